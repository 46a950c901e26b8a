#include "engine/batch_runner.h"

#include <algorithm>
#include <cmath>

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
        case FinishReason::Timeout: return "timeout";
    }
    return "?";
}

struct BatchRunner::Seq {
    Handle h = 0;
    Request req;
    kv::CacheScope scope;         // prefix-cache isolation: server-side tenant + client salt
    kv::SeqId id;
    std::vector<int32_t> tokens;  // prompt + generated
    int64_t n_prompt = 0;
    int64_t n_computed = 0;       // tokens whose K/V are in the cache
    kv::PageTable table;
    std::unique_ptr<Sampler> sampler;
    bool finished = false;
    bool cancelled = false;       // cancellation processed; a racing step may still name it
    bool emitted = false;         // on_finish called
    std::vector<kv::PageRef> displaced;  // live pages a stale-mapping fault pushed out of the table
    Result res;
    Clock::time_point t_arrival, t_admit, t_first, t_last;
    bool admitted_once = false;
};

BatchRunner::BatchRunner(Executor& exec, kv::KvCache& kv, RunnerOptions opts, kv::FaultInjector* faults)
    : exec_(exec), kv_(kv), opts_(opts), faults_(faults) {
    util::check(opts_.max_seqs >= 1 && opts_.max_batch_tokens >= 1 && opts_.prefill_chunk >= 1,
                "runner: max_seqs, max_batch_tokens and prefill_chunk must be positive");
    util::check(opts_.watermark >= 0.0 && opts_.watermark < 1.0, "runner: watermark must be in [0, 1)");
}

BatchRunner::~BatchRunner() {
    // Whatever is still queued or running ends here (its pages go back to the pool).
    for (auto& s : running_)
        if (s && !s->finished && !s->cancelled) finish(*s, FinishReason::Cancelled);
    for (auto& s : waiting_) finish(*s, FinishReason::Cancelled);
}

BatchRunner::Handle BatchRunner::add(Request r) {
    auto s = std::make_unique<Seq>();
    s->h = next_handle_++;
    s->t_arrival = Clock::now();
    s->id = kv::SeqId{static_cast<int64_t>(s->h)};
    s->tokens = r.prompt;
    s->n_prompt = static_cast<int64_t>(r.prompt.size());
    s->res.n_prompt = s->n_prompt;
    const bool bad = r.prompt.empty() || r.max_new_tokens < 1 ||
                     static_cast<int64_t>(r.prompt.size()) + r.max_new_tokens > kv_.capacity_tokens();
    s->req = std::move(r);
    if (bad) {
        s->res.error = s->req.prompt.empty() ? "empty prompt"
                       : s->req.max_new_tokens < 1 ? "max_new_tokens must be >= 1"
                                                   : "request does not fit in the KV cache";
        finish(*s, FinishReason::Rejected);
        return s->h;
    }
    s->sampler = std::make_unique<Sampler>(s->req.sampling);
    s->scope = kv::CacheScope{s->req.tenant, s->req.cache_salt};
    const Handle h = s->h;
    waiting_.push_back(std::move(s));
    return h;
}

void BatchRunner::cancel(Handle h, FinishReason why) {
    for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
        if ((*it)->h != h) continue;
        finish(**it, why);
        waiting_.erase(it);
        return;
    }
    for (auto& s : running_) {
        if (!s || s->h != h || s->finished || s->cancelled) continue;
        finish(*s, why);
        std::erase_if(running_, [](const auto& p) { return !p || p->finished; });
        return;
    }
}

// Releases a sequence's pages. Returns false when the pool refused an entry: the table was
// corrupted, and the sequence must end with an integrity error (fail closed).
bool BatchRunner::release_pages(Seq& s, bool offer) {
    for (const kv::PageRef& p : s.displaced) (void)kv_.pool().release(p);
    s.displaced.clear();
    // Full pages are offered to the prefix cache before the sequence lets go of them.
    if (offer) this->offer(s);
    const int64_t refused = kv_.free(s.table);
    stats_.refused_frees += refused;
    return refused == 0;
}

// Offers the sequence's full, computed pages to the prefix cache (idempotent). The cache
// verifies the table first: a stale one offers nothing.
void BatchRunner::offer(Seq& s) {
    if (!prefix_ || s.table.pages.empty()) return;
    (void)prefix_->offer(s.scope, s.tokens, s.table);
}

// Frees up to `pages_short` unreferenced cached pages (LRU). Returns how many were freed.
int64_t BatchRunner::evict_for(int64_t pages_short) {
    if (!prefix_ || pages_short <= 0) return 0;
    return prefix_->evict(pages_short);
}

void BatchRunner::finish(Seq& s, FinishReason why) {
    s.finished = true;
    if (!release_pages(s, why != FinishReason::IntegrityError) && why != FinishReason::IntegrityError) {
        spdlog::warn("request {}: page table held stale entries at release; reporting an integrity error", s.h);
        why = FinishReason::IntegrityError;
    }
    s.res.finish = why;
    emit_finish(s);
}

void BatchRunner::emit_finish(Seq& s) {
    if (s.emitted) return;
    s.emitted = true;
    s.res.output.assign(s.tokens.begin() + s.n_prompt, s.tokens.end());
    if (s.res.finish != FinishReason::Rejected) stats_.prompt_tokens += s.n_prompt;
    using ms = std::chrono::duration<double, std::milli>;
    const auto now = Clock::now();
    Timing& t = s.res.timing;
    t.total_ms = ms(now - s.t_arrival).count();
    if (s.admitted_once) t.queue_ms = ms(s.t_admit - s.t_arrival).count();
    const auto n_out = static_cast<int64_t>(s.res.output.size());
    if (n_out > 0) {
        t.prefill_ms = ms(s.t_first - s.t_admit).count();
        t.ttft_ms = ms(s.t_first - s.t_arrival).count();
        if (n_out > 1) t.tpot_ms = ms(s.t_last - s.t_first).count() / static_cast<double>(n_out - 1);
    }
    if (on_finish_) on_finish_(s.h, std::move(s.res));
}

void BatchRunner::admit() {
    // FCFS: the head waits until its tokens fit (no overtaking). Beyond the head's own pages,
    // `watermark` of the pool stays free while anything runs. Pages the prefix cache already
    // holds for the head of the tokens are attached, not allocated; unreferenced cached pages
    // are evicted (LRU) before the head is made to wait.
    const auto reserve_pages = static_cast<int64_t>(opts_.watermark * kv_.pool().capacity());
    // reserve_outputs: pages a sequence may still need to reach its longest length.
    auto final_pages = [&](const Seq& q) { return kv_.pages_for(q.n_prompt + q.req.max_new_tokens + 1); };
    int64_t growth = 0;  // pages the running sequences may still take
    if (opts_.reserve_outputs)
        for (const auto& r : running_)
            if (r && !r->finished && !r->cancelled)
                growth += std::max<int64_t>(0, final_pages(*r) - static_cast<int64_t>(r->table.pages.size()));
    while (!waiting_.empty() && static_cast<int64_t>(running_.size()) < opts_.max_seqs) {
        Seq& s = *waiting_.front();
        // Alone, a request is admitted on its prompt's pages whatever the policy (it cannot wait
        // for anyone); if it then outgrows the pool it ends as it would have anyway.
        const bool reserve_all = opts_.reserve_outputs && !running_.empty();
        const int64_t reserve = running_.empty() ? 0 : reserve_all ? growth : reserve_pages;
        const int64_t full = reserve_all ? std::max(final_pages(s), kv_.pages_for(static_cast<int64_t>(s.tokens.size()) + 1))
                                         : kv_.pages_for(static_cast<int64_t>(s.tokens.size()) + 1);
        const bool attach = prefix_ && s.table.pages.empty();
        auto cached_pages = [&] { return attach ? prefix_->probe(s.scope, s.tokens) / kv_.page_size() : 0; };
        int64_t need = full - cached_pages();
        // Eviction may take pages of the head's own cached chain (then they are needed again),
        // so re-measure after each round that freed something; each round frees a page or stops.
        for (int round = 0; round < 4; ++round) {
            const int64_t short_by = need + reserve - kv_.pool().free_pages();
            if (short_by <= 0 || evict_for(short_by) == 0) break;
            need = full - cached_pages();
        }
        if (need + reserve > kv_.pool().free_pages()) break;
        const bool first = !s.admitted_once;
        if (first) {
            s.admitted_once = true;
            s.t_admit = Clock::now();
        }
        if (attach) {
            const kv::AttachResult a = prefix_->attach(s.scope, s.tokens, s.table);
            util::check(a.cached_tokens >= 0 && a.cached_tokens < static_cast<int64_t>(s.tokens.size()) &&
                            s.table.capacity(kv_.page_size()) >= a.cached_tokens,
                        "prefix cache attached an impossible prefix");
            s.n_computed = a.cached_tokens;
            s.table.n_tokens = a.cached_tokens;
            if (first) s.res.cached_tokens = std::min(a.cached_tokens, s.n_prompt);
        }
        if (opts_.reserve_outputs) growth += std::max<int64_t>(0, final_pages(s) - static_cast<int64_t>(s.table.pages.size()));
        running_.push_back(std::move(waiting_.front()));
        waiting_.pop_front();
    }
    stats_.max_running = std::max<int64_t>(stats_.max_running, static_cast<int64_t>(running_.size()));
}

std::vector<Result> BatchRunner::run(const std::vector<Request>& requests) {
    std::vector<Result> results(requests.size());
    const Handle base = next_handle_;
    auto saved = std::move(on_finish_);
    on_finish_ = [&](Handle h, Result&& r) { results[h - base] = std::move(r); };
    keep_step_times_ = true;
    for (const Request& r : requests) add(r);
    while (!idle()) step();
    keep_step_times_ = false;
    on_finish_ = std::move(saved);
    return results;
}

void BatchRunner::step() {
    admit();
    std::vector<size_t> stale_members;  // cancelled sequences a racing step still names
    if (faults_) inject_faults(stale_members);

    // Build the step: every running sequence gets its next tokens within the budget.
    // Pages are reserved first; when they run out the newest sequence is preempted
    // (its pages freed, it re-queues at the front and recomputes later).
    StepBatch batch;
    std::vector<size_t> member;  // index into running_ for each batch entry
    int64_t budget = opts_.max_batch_tokens;
    for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
        if (!running_[i]) continue;
        Seq& s = *running_[i];
        if (s.finished || s.cancelled) continue;
        const int64_t remaining = static_cast<int64_t>(s.tokens.size()) - s.n_computed;
        const int64_t n_new = std::min({remaining, budget, opts_.prefill_chunk});
        bool self_preempted = false;
        while (!kv_.reserve(s.table, s.n_computed + n_new)) {
            // Unreferenced cached pages go before any running sequence is preempted.
            if (evict_for(kv_.pages_for(s.n_computed + n_new) - static_cast<int64_t>(s.table.pages.size()) -
                          kv_.pool().free_pages()) > 0)
                continue;
            // Preempt the newest other unfinished sequence, or this one if it is the newest.
            size_t victim = running_.size();
            for (size_t j = running_.size(); j-- > 0;)
                if (running_[j] && !running_[j]->finished && !running_[j]->cancelled) {
                    victim = j;
                    break;
                }
            Seq& v = *running_[victim];
            if (!release_pages(v, true)) {  // a corrupted table is never recomputed into health
                finish(v, FinishReason::IntegrityError);
                if (victim == i) break;
                continue;
            }
            v.n_computed = 0;
            ++v.res.preemptions;
            ++stats_.preemptions;
            waiting_.push_front(std::move(running_[victim]));  // leaves a null slot, erased below
            if (victim == i) {
                self_preempted = true;
                break;
            }
        }
        if (self_preempted || s.finished || s.table.capacity(kv_.page_size()) < s.n_computed + n_new) continue;
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
        Seq& s = *running_[i];
        StepSeq ss;
        ss.id = s.id;
        ss.tokens = std::span<const int32_t>(s.tokens.data() + s.tokens.size() - 1, 1);
        ss.pos0 = s.table.capacity(kv_.page_size()) - 1;  // inside its (stale) pages
        ss.table = &s.table;
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
        const auto t0 = Clock::now();
        const StepResult r = exec_.execute(batch);
        const auto t1 = Clock::now();
        if (keep_step_times_) stats_.step_ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
        stats_.tokens_computed += batch.n_tokens();
        ++stats_.steps;
        for (size_t b = 0; b < batch.seqs.size(); ++b) {
            Seq& s = *running_[member[b]];
            if (s.cancelled) {
                util::check(!r.ok[b], "a cancelled sequence's stale step was not refused");
                continue;
            }
            if (s.finished) continue;
            if (!r.ok[b]) {
                s.res.violation = r.violation[b];
                if (r.violation[b]) spdlog::warn("request {} aborted: {}", s.h, r.violation[b]->describe());
                finish(s, FinishReason::IntegrityError);
                continue;
            }
            const int64_t before = s.n_computed;
            s.n_computed += static_cast<int64_t>(batch.seqs[b].tokens.size());
            s.table.n_tokens = s.n_computed;
            // A prefill chunk that completed a page: offer the full pages now, so that concurrent
            // requests with the same prefix hit while this one is still running.
            if (batch.seqs[b].tokens.size() > 1 && s.n_computed / kv_.page_size() > before / kv_.page_size()) offer(s);
            if (!batch.seqs[b].want_logits) continue;
            TokenInfo info;
            std::vector<float> logits = r.logits[b];
            const int32_t tok = s.sampler->sample(logits, s.tokens, static_cast<size_t>(s.n_prompt));
            if (s.req.top_logprobs >= 0) info.logprobs = token_logprobs(r.logits[b], tok, s.req.top_logprobs);
            s.tokens.push_back(tok);
            ++stats_.generated_tokens;
            const int64_t generated = static_cast<int64_t>(s.tokens.size()) - s.n_prompt;
            if (generated == 1) s.t_first = t1;
            s.t_last = t1;
            info.token = tok;
            if (on_token_) on_token_(s.h, info);
            if (std::find(s.req.stop_ids.begin(), s.req.stop_ids.end(), tok) != s.req.stop_ids.end()) {
                finish(s, FinishReason::Stop);
            } else if (generated >= s.req.max_new_tokens) {
                finish(s, FinishReason::Length);
            }
        }
    }
    // Frees requested while the step ran take effect only now, on this thread.
    for (const kv::PageRef& p : deferred_frees_)
        if (kv_.pool().release(p) != kv::PoolStatus::Ok && faults_) faults_->note_refused();
    deferred_frees_.clear();
    std::erase_if(running_, [](const auto& s) { return !s || s->finished || s->cancelled; });
    if (batch.seqs.empty() && running_.empty() && !waiting_.empty() &&
        kv_.pages_for(static_cast<int64_t>(waiting_.front()->tokens.size()) + 1) >
            kv_.pool().free_pages() + (prefix_ ? prefix_->evictable_pages() : 0))
        throw util::Error("KV cache too small for the next request even with nothing running");
}

void BatchRunner::inject_faults(std::vector<size_t>& stale_members) {
    using kv::FaultKind;
    // Victims are sequences that will certainly take part in a later step (so detection is
    // certain): running, with pages, and at least two tokens still to generate.
    auto pick_victim = [&]() -> Seq* {
        std::vector<size_t> c;
        for (size_t i = 0; i < running_.size(); ++i) {
            const Seq& s = *running_[i];
            const int64_t generated = static_cast<int64_t>(s.tokens.size()) - s.n_prompt;
            if (!s.finished && !s.cancelled && !s.table.pages.empty() && generated + 2 <= s.req.max_new_tokens)
                c.push_back(i);
        }
        if (c.empty()) return nullptr;
        return running_[c[faults_->random(c.size())]].get();
    };
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
        v->res.fault_target = true;
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
                deferred_frees_.push_back(e);
                break;
            case FaultKind::CancelRace:
                // The cancellation is processed (pages freed, request finished) while a step built
                // from a stale snapshot still lists the sequence.
                v->cancelled = true;
                {
                    kv::PageTable stale = v->table;  // what the racing step still holds
                    for (const kv::PageRef& p : v->displaced) (void)pool.release(p);
                    v->displaced.clear();
                    (void)kv_.free(v->table);
                    v->table = stale;
                }
                v->res.finish = FinishReason::Cancelled;
                emit_finish(*v);
                for (size_t i = 0; i < running_.size(); ++i)
                    if (running_[i].get() == v) stale_members.push_back(i);
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
