#include "engine/batch_runner.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <memory>

#include "util/error.h"
#include "util/log.h"

namespace warden::engine {

const char* finish_reason_name(FinishReason r) {
    switch (r) {
        case FinishReason::Length: return "length";
        case FinishReason::Stop: return "stop";
        case FinishReason::IntegrityError: return "integrity_error";
        case FinishReason::Cancelled: return "cancelled";
        case FinishReason::Rejected: return "rejected";
    }
    return "?";
}

struct BatchRunner::Seq {
    size_t req = 0;
    kv::SeqId id;
    std::vector<int32_t> tokens;  // prompt + generated
    int64_t n_prompt = 0;
    int64_t max_new = 0;
    int64_t n_computed = 0;       // tokens whose K/V are in the cache
    kv::PageTable table;
    std::unique_ptr<Sampler> sampler;
    bool finished = false;
    bool cancelled = false;       // cancellation processed; a racing step may still name it
    std::vector<kv::PageRef> displaced;  // live pages a stale-mapping fault pushed out of the table
};

BatchRunner::BatchRunner(Executor& exec, kv::KvCache& kv, RunnerOptions opts, kv::FaultInjector* faults)
    : exec_(exec), kv_(kv), opts_(opts), faults_(faults) {
    util::check(opts_.max_seqs >= 1 && opts_.max_batch_tokens >= 1 && opts_.prefill_chunk >= 1,
                "runner: max_seqs, max_batch_tokens and prefill_chunk must be positive");
}

std::vector<Result> BatchRunner::run(const std::vector<Request>& requests) {
    std::vector<Result> results(requests.size());
    results_ = &results;
    std::deque<Seq> waiting;
    const int64_t ctx_tokens = kv_.capacity_tokens();
    for (size_t i = 0; i < requests.size(); ++i) {
        const Request& r = requests[i];
        if (r.prompt.empty() || r.max_new_tokens < 1 ||
            static_cast<int64_t>(r.prompt.size()) + r.max_new_tokens > ctx_tokens) {
            results[i].finish = FinishReason::Rejected;
            results[i].error = r.prompt.empty() ? "empty prompt" : "request does not fit in the KV cache";
            continue;
        }
        Seq s;
        s.req = i;
        s.id = kv::SeqId{static_cast<int64_t>(i)};
        s.tokens = r.prompt;
        s.n_prompt = static_cast<int64_t>(r.prompt.size());
        s.max_new = r.max_new_tokens;
        s.sampler = std::make_unique<Sampler>(r.sampling);
        waiting.push_back(std::move(s));
    }

    std::vector<Seq> running;
    std::vector<kv::PageRef> deferred_frees;
    // Releases a sequence's pages. Returns false when the pool refused an entry: the table
    // was corrupted, and the sequence must end with an integrity error (fail closed).
    auto release_pages = [&](Seq& s) {
        for (const kv::PageRef& p : s.displaced) (void)kv_.pool().release(p);
        s.displaced.clear();
        const int64_t refused = kv_.free(s.table);
        stats_.refused_frees += refused;
        return refused == 0;
    };
    auto finish = [&](Seq& s, FinishReason why) {
        s.finished = true;
        if (!release_pages(s) && why != FinishReason::IntegrityError) {
            spdlog::warn("request {}: page table held stale entries at release; reporting an integrity error", s.req);
            why = FinishReason::IntegrityError;
        }
        results[s.req].finish = why;
        results[s.req].output.assign(s.tokens.begin() + s.n_prompt, s.tokens.end());
    };

    while (!waiting.empty() || !running.empty()) {
        // Admission, FCFS: the head waits until its prompt fits (no overtaking).
        while (!waiting.empty() && static_cast<int64_t>(running.size()) < opts_.max_seqs) {
            const int64_t need = kv_.pages_for(static_cast<int64_t>(waiting.front().tokens.size()) + 1);
            if (need > kv_.pool().free_pages()) break;
            running.push_back(std::move(waiting.front()));
            waiting.pop_front();
        }
        stats_.max_running = std::max<int64_t>(stats_.max_running, static_cast<int64_t>(running.size()));

        std::vector<size_t> stale_members;  // cancelled sequences a racing step still names
        if (faults_) inject_faults(running, deferred_frees, stale_members);

        // Build the step: every running sequence gets its next tokens within the budget.
        // Pages are reserved first; when they run out the newest sequence is preempted
        // (its pages freed, it re-queues at the front and recomputes later).
        StepBatch batch;
        std::vector<size_t> member;  // index into running for each batch entry
        int64_t budget = opts_.max_batch_tokens;
        for (size_t i = 0; i < running.size() && budget > 0; ++i) {
            Seq& s = running[i];
            if (s.finished || s.cancelled) continue;
            const int64_t remaining = static_cast<int64_t>(s.tokens.size()) - s.n_computed;
            const int64_t n_new = std::min({remaining, budget, opts_.prefill_chunk});
            while (!kv_.reserve(s.table, s.n_computed + n_new)) {
                // Preempt the newest other unfinished sequence, or this one if it is the newest.
                size_t victim = running.size();
                for (size_t j = running.size(); j-- > 0;)
                    if (!running[j].finished && !running[j].cancelled) {
                        victim = j;
                        break;
                    }
                Seq& v = running[victim];
                if (!release_pages(v)) {  // a corrupted table is never recomputed into health
                    finish(v, FinishReason::IntegrityError);
                    if (victim == i) break;
                    continue;
                }
                v.n_computed = 0;
                ++results[v.req].preemptions;
                ++stats_.preemptions;
                v.finished = true;  // leaves `running` below; re-queued at the front
                waiting.push_front(std::move(v));
                waiting.front().finished = false;
                if (victim == i) break;
            }
            if (s.finished || s.table.capacity(kv_.page_size()) < s.n_computed + n_new) continue;
            StepSeq ss;
            ss.id = s.id;
            ss.tokens = std::span<const int32_t>(s.tokens.data() + s.n_computed, static_cast<size_t>(n_new));
            ss.pos0 = s.n_computed;
            ss.table = &s.table;
            ss.want_logits = s.n_computed + n_new == static_cast<int64_t>(s.tokens.size());
            batch.seqs.push_back(ss);
            member.push_back(i);
            budget -= n_new;
        }
        for (size_t i : stale_members) {  // the cancellation race: a stale snapshot still lists it
            StepSeq ss;
            ss.id = running[i].id;
            ss.tokens = std::span<const int32_t>(running[i].tokens.data() + running[i].tokens.size() - 1, 1);
            ss.pos0 = running[i].table.capacity(kv_.page_size()) - 1;  // inside its (stale) pages
            ss.table = &running[i].table;
            batch.seqs.push_back(ss);
            member.push_back(i);
        }
        if (faults_ && batch.seqs.size() > 1 && faults_->roll(kv::FaultKind::Reorder)) {
            for (size_t k = batch.seqs.size() - 1; k > 0; --k) {
                const size_t j = faults_->random(k + 1);
                std::swap(batch.seqs[k], batch.seqs[j]);
                std::swap(member[k], member[j]);
            }
        }

        if (!batch.seqs.empty()) {
            const auto t0 = std::chrono::steady_clock::now();
            const StepResult r = exec_.execute(batch);
            stats_.step_ms.push_back(
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
            stats_.tokens_computed += batch.n_tokens();
            ++stats_.steps;
            for (size_t b = 0; b < batch.seqs.size(); ++b) {
                Seq& s = running[member[b]];
                if (s.cancelled) {
                    util::check(!r.ok[b], "a cancelled sequence's stale step was not refused");
                    continue;
                }
                if (!r.ok[b]) {
                    results[s.req].violation = r.violation[b];
                    if (r.violation[b])
                        spdlog::warn("request {} aborted: {}", s.req, r.violation[b]->describe());
                    finish(s, FinishReason::IntegrityError);
                    continue;
                }
                s.n_computed += static_cast<int64_t>(batch.seqs[b].tokens.size());
                s.table.n_tokens = s.n_computed;
                if (!batch.seqs[b].want_logits) continue;
                const Request& req = requests[s.req];
                std::vector<float> logits = r.logits[b];
                const int32_t tok = s.sampler->sample(logits, s.tokens);
                s.tokens.push_back(tok);
                if (on_token_) on_token_(s.req, tok);
                const int64_t generated = static_cast<int64_t>(s.tokens.size()) - s.n_prompt;
                if (std::find(req.stop_ids.begin(), req.stop_ids.end(), tok) != req.stop_ids.end()) {
                    finish(s, FinishReason::Stop);
                } else if (generated >= req.max_new_tokens) {
                    finish(s, FinishReason::Length);
                }
            }
        }
        // Frees requested while the step ran take effect only now, on this thread.
        for (const kv::PageRef& p : deferred_frees)
            if (kv_.pool().release(p) != kv::PoolStatus::Ok && faults_) faults_->note_refused();
        deferred_frees.clear();
        std::erase_if(running, [](const Seq& s) { return s.finished || s.cancelled; });
        if (batch.seqs.empty() && running.empty() && !waiting.empty() &&
            kv_.pages_for(static_cast<int64_t>(waiting.front().tokens.size()) + 1) > kv_.pool().free_pages())
            throw util::Error("KV cache too small for the next request even with nothing running");
    }
    results_ = nullptr;
    return results;
}

void BatchRunner::inject_faults(std::vector<Seq>& running, std::vector<kv::PageRef>& deferred_frees,
                                std::vector<size_t>& stale_members) {
    using kv::FaultKind;
    // Victims are sequences that will certainly take part in a later step (so detection is
    // certain): running, with pages, and at least two tokens still to generate.
    auto pick_victim = [&]() -> Seq* {
        std::vector<size_t> c;
        for (size_t i = 0; i < running.size(); ++i) {
            const Seq& s = running[i];
            const int64_t generated = static_cast<int64_t>(s.tokens.size()) - s.n_prompt;
            if (!s.finished && !s.cancelled && !s.table.pages.empty() &&
                generated + 2 <= s.max_new)
                c.push_back(i);
        }
        if (c.empty()) return nullptr;
        return &running[c[faults_->random(c.size())]];
    };
    auto hit = [&](Seq& s) { (*results_)[s.req].fault_target = true; };
    kv::PagePool& pool = kv_.pool();
    for (int k = 0; k < kv::kFaultKinds; ++k) {
        const auto kind = static_cast<FaultKind>(k);
        if (kind == FaultKind::Reorder) continue;  // applied to the built batch
        // Each fault needs a victim with a live entry to break (an entry an earlier fault of
        // this step already broke does not count twice).
        Seq* v = pick_victim();
        if (!v) continue;
        std::vector<size_t> live;
        for (size_t j = 0; j < v->table.pages.size(); ++j)
            if (pool.is_live(v->table.pages[j])) live.push_back(j);
        if (live.empty() || !faults_->roll(kind)) continue;
        hit(*v);
        kv::PageRef& e = v->table.pages[live[faults_->random(live.size())]];
        switch (kind) {
            case FaultKind::Stale: {  // the entry now names an earlier allocation of some page
                if (pool.is_live(e)) v->displaced.push_back(e);
                const kv::PageId q{static_cast<int32_t>(1 + faults_->random(static_cast<uint64_t>(pool.capacity())))};
                e = kv::PageRef{q, pool.generation(q) - 1};
                break;
            }
            case FaultKind::EarlyFree:
                util::check(pool.release(e) == kv::PoolStatus::Ok, "fault injector: early free refused");
                if (pool.refcount(e.page) > 0) {  // shared page: force it out of every holder
                    while (pool.refcount(e.page) > 0) (void)pool.release(e);
                }
                break;
            case FaultKind::DoubleFree:
                while (pool.release(e) == kv::PoolStatus::Ok) {
                }
                faults_->note_refused();  // the second release was refused
                break;
            case FaultKind::FreeInFlight:
                deferred_frees.push_back(e);
                break;
            case FaultKind::CancelRace:
                // The cancellation is processed (pages freed, request finished) while a step built
                // from a stale snapshot still lists the sequence.
                v->cancelled = true;
                (*results_)[v->req].finish = FinishReason::Cancelled;
                (*results_)[v->req].output.assign(v->tokens.begin() + v->n_prompt, v->tokens.end());
                {
                    kv::PageTable stale = v->table;  // what the racing step still holds
                    for (const kv::PageRef& p : v->displaced) (void)pool.release(p);
                    v->displaced.clear();
                    (void)kv_.free(v->table);
                    v->table = stale;
                }
                for (size_t i = 0; i < running.size(); ++i)
                    if (&running[i] == v) stale_members.push_back(i);
                break;
            case FaultKind::Reuse: {  // freed early and immediately handed to another owner
                const kv::PageId page = e.page;
                while (pool.refcount(page) > 0 && pool.release(kv::PageRef{page, pool.generation(page)}) == kv::PoolStatus::Ok) {
                }
                auto fresh = pool.allocate();  // LIFO free list: the page just freed comes back
                if (fresh) (void)pool.release(*fresh);
                break;
            }
            case FaultKind::Reorder: break;
        }
    }
}

}  // namespace warden::engine
