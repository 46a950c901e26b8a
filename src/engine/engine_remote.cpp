// Disaggregated decode, the engine's side: a request's prompt is computed by a prefill server
// (EngineConfig::remote_prefill) into pages reserved here, verified, and only then handed to
// the scheduler as a prefilled sequence. Every failure path frees the reserved pages on this
// (the scheduler's) thread; a failed fetch is retried (new pages, possibly another prefill
// server) while attempts remain, since nothing of the request was emitted yet.
//
// Verification is split so a long prompt's arrival does not stall the sequences decoding: the
// pass over every byte (page checksums) runs on the verifier thread once the transport is done
// writing, reading the reserved pages' bytes only; the rest (transfer, fingerprint, counts, every
// page still live with its reserved generation) runs here, right before admission. The pages
// stay reserved (nobody else may free or write them) until the outcome is applied here.
#include "engine/engine.h"
#include "util/log.h"

namespace warden::engine {

namespace {

uint64_t transfer_id(uint64_t engine_id, int attempt) {
    return engine_id << 8 | static_cast<uint64_t>(attempt & 0xff);
}

}  // namespace

void Engine::start_fetch(Fetching&& f) {
    const uint64_t id = f.p.id;
    const auto n_tokens = static_cast<int64_t>(f.p.req.prompt.size());
    const uint64_t tid = transfer_id(id, f.attempt);
    PrefillSource& src = *cfg_.remote_prefill;
    if (kv::PrefixCache* pc = scheduler_.prefix_cache()) {
        const int64_t short_by = kv_.pages_for(n_tokens) - kv_.pool().free_pages();
        if (short_by > 0) pc->evict(short_by);
    }
    f.handoff = kv::KvHandoff::reserve(kv_, n_tokens, tid, src.fingerprint());
    if (!f.handoff) {
        // No room for the prompt's pages now: the scheduler computes it here instead (its
        // admission waits for pages and preempts as usual).
        metrics_.count_remote_prefill("local_fallback");
        admit_to_scheduler(std::move(f.p), f.deadline);
        return;
    }
    std::vector<uint8_t*> dest = f.handoff->page_data(kv_);
    const auto page_bytes = static_cast<size_t>(kv_.bytes_per_page());
    const std::vector<int32_t> prompt = f.p.req.prompt;
    fetching_.emplace(id, std::move(f));
    // Runs where the transport ends the fetch (any thread); the checksums go to the verifier.
    auto done = [this, id, pages = std::vector<const uint8_t*>(dest.begin(), dest.end()),
                 page_bytes](RemotePrefill&& r) mutable {
        auto deliver = [this](FetchOutcome&& o) {
            {
                std::lock_guard lk(mu_);
                fetched_.push_back(std::move(o));
            }
            cv_.notify_all();
        };
        if (!r.ok) {  // nothing to verify: the pages are refused anyway
            deliver(FetchOutcome{id, std::move(r), {}});
            return;
        }
        verifier_->post(
            [id, pages = std::move(pages), page_bytes, r = std::move(r), deliver]() mutable {
                const auto t0 = std::chrono::steady_clock::now();
                const kv::PayloadCheck payload = kv::check_payload(pages, page_bytes, r.manifest);
                spdlog::debug(
                    "request {}: {} pages read in {:.3f} ms, checksummed in {:.3f} ms", id,
                    pages.size(), r.fetch_ms,
                    std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                        .count());
                deliver(FetchOutcome{id, std::move(r), payload});
            });
    };
    src.fetch(tid, prompt, std::move(dest), page_bytes, fetching_.at(id).attempt,
              fetching_.at(id).p.req.prefill_hint, std::move(done));
}

bool Engine::cancel_fetch(uint64_t id, FinishReason why) {
    auto it = fetching_.find(id);
    if (it == fetching_.end()) return false;
    if (!it->second.cancelled) {
        it->second.cancelled = why;
        cfg_.remote_prefill->cancel(transfer_id(id, it->second.attempt));
    }
    return true;
}

void Engine::expire_fetches(std::chrono::steady_clock::time_point now) {
    std::vector<uint64_t> late;
    for (const auto& [id, f] : fetching_)
        if (f.deadline <= now && !f.cancelled) late.push_back(id);
    for (uint64_t id : late) cancel_fetch(id, FinishReason::Timeout);
}

void Engine::end_unscheduled(Pending& p, Result&& r) {
    metrics_.observe(p.req.tenant, r);
    Event e;
    e.kind = Event::Kind::Finish;
    e.result = std::move(r);
    p.stream->push(std::move(e));
    publish_gauges();
    std::lock_guard lk(mu_);
    --n_active_;
    if (n_active_ == 0) idle_cv_.notify_all();
}

void Engine::on_fetched(FetchOutcome&& o) {
    const uint64_t id = o.id;
    RemotePrefill& r = o.r;
    auto it = fetching_.find(id);
    if (it == fetching_.end()) return;
    Fetching f = std::move(it->second);
    fetching_.erase(it);
    std::string error = r.error;
    bool integrity = false;
    if (!f.cancelled && r.ok) {
        // The checksums were compared on the verifier; the generations are checked now.
        const kv::HandoffCheck c = f.handoff->verify(kv_, r.manifest, o.payload);
        if (c.ok()) {
            metrics_.count_remote_prefill("ok");
            metrics_.observe_kv_transfer(r.transfer_ms, r.fetch_ms, r.bytes);
            auto pp = std::make_shared<PrefilledPrompt>();
            pp->table = f.handoff->take();
            pp->logits = std::move(r.logits);
            pp->arrival = f.arrival;
            pp->transfer_ms = r.transfer_ms;
            pp->transfer_bytes = r.bytes;
            f.p.req.prefilled = std::move(pp);
            admit_to_scheduler(std::move(f.p), f.deadline);
            return;
        }
        integrity = true;
        error = c.describe();
        spdlog::warn("request {}: prompt KV from the prefill server refused: {}", id, error);
    }
    // Fail closed: the reserved pages go back (the transport writes into them no more).
    const int64_t refused = f.handoff->release(kv_);
    if (refused)
        spdlog::warn("request {}: {} reserved pages were no longer live at release", id, refused);
    if (!f.cancelled && f.attempt + 1 < cfg_.remote_attempts && (r.retryable || integrity)) {
        metrics_.count_remote_prefill("retry");
        f.attempt += 1;
        f.handoff.reset();
        start_fetch(std::move(f));
        return;
    }
    metrics_.count_remote_prefill(f.cancelled ? "cancelled" : integrity ? "refused" : "failed");
    Result res;
    res.n_prompt = static_cast<int64_t>(f.p.req.prompt.size());
    res.finish = f.cancelled ? *f.cancelled
                 : integrity ? FinishReason::IntegrityError
                             : FinishReason::Unavailable;
    res.error = "prompt prefill failed: " + (error.empty() ? std::string("unknown") : error);
    res.timing.total_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - f.arrival)
            .count();
    end_unscheduled(f.p, std::move(res));
}

}  // namespace warden::engine
