#include "engine/scheduler.h"

#include <algorithm>
#include <string>

#include "engine/scheduler_seq.h"
#include "util/error.h"
#include "util/huge_page_arena.h"
#include "util/log.h"

namespace warden::engine {

Scheduler::Scheduler(Executor& exec, kv::KvCache& kv, SchedulerOptions opts,
                     kv::FaultInjector* faults)
    : exec_(exec), kv_(kv), opts_(opts), faults_(faults) {
    util::check(opts_.max_seqs >= 1 && opts_.max_batch_tokens >= 1 && opts_.prefill_chunk >= 1,
                "scheduler: max_seqs, max_batch_tokens and prefill_chunk must be positive");
    util::check(opts_.watermark >= 0.0 && opts_.watermark < 1.0,
                "scheduler: watermark must be in [0, 1)");
}

Scheduler::~Scheduler() {
    // Whatever is still queued or running ends here (its pages go back to the pool).
    for (auto& s : running_)
        if (s && !s->finished && !s->cancelled) finish(*s, FinishReason::Cancelled);
    for (auto& s : waiting_) finish(*s, FinishReason::Cancelled);
}

Scheduler::Handle Scheduler::add(Request r) {
    auto s = std::make_unique<Seq>();
    s->h = next_handle_++;
    s->t_arrival = Clock::now();
    s->id = kv::SeqId{static_cast<int64_t>(s->h)};
    s->tokens = r.prompt;
    s->n_prompt = static_cast<int64_t>(r.prompt.size());
    s->res.n_prompt = s->n_prompt;
    bool bad = r.prompt.empty() || r.max_new_tokens < 1 ||
               static_cast<int64_t>(r.prompt.size()) + r.max_new_tokens > kv_.capacity_tokens();
    s->req = std::move(r);
    if (s->req.prefilled) {
        // Disaggregated decode: the prompt's KV is in these pages already (verified by the
        // caller); the sequence starts with its prompt computed.
        PrefilledPrompt& pp = *s->req.prefilled;
        s->table = std::move(pp.table);
        s->n_computed = s->n_prompt;
        s->table.n_tokens = s->n_prompt;
        s->first_logits = std::move(pp.logits);
        s->t_arrival = pp.arrival;
        s->res.timing.kv_transfer_ms = pp.transfer_ms;
        s->res.timing.kv_transfer_bytes = pp.transfer_bytes;
        s->req.prefilled.reset();
        bad = bad || s->first_logits.empty() ||
              s->table.n_tokens > s->table.capacity(kv_.page_size());
    }
    if (bad) {
        s->res.error = s->req.prompt.empty()       ? "empty prompt"
                       : s->req.max_new_tokens < 1 ? "max_new_tokens must be >= 1"
                                                   : "request does not fit in the KV cache";
        finish(*s, FinishReason::Rejected);
        return s->h;
    }
    // A token without an embedding row (a tokenizer larger than the model's vocabulary) is this
    // request's error, refused here: inside a step it would fail every sequence of the batch.
    const int64_t vocab = exec_.vocab_size();
    for (const int32_t id : s->req.prompt)
        if (id < 0 || id >= vocab) {
            s->res.error = "the prompt holds token id " + std::to_string(id) +
                           ", outside the model's vocabulary of " + std::to_string(vocab) +
                           " (does the tokenizer belong to this model?)";
            finish(*s, FinishReason::Rejected);
            return s->h;
        }
    s->sampler = std::make_unique<Sampler>(s->req.sampling);
    s->scope = kv::CacheScope{s->req.tenant, s->req.cache_salt};
    const Handle h = s->h;
    waiting_.push_back(std::move(s));
    return h;
}

void Scheduler::cancel(Handle h, FinishReason why) {
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

std::vector<Result> Scheduler::run(const std::vector<Request>& requests) {
    std::vector<Result> results(requests.size());
    const Handle base = next_handle_;
    // The caller's callback comes back however this returns: a step that throws leaves sequences
    // behind, which the destructor finishes after `results` (which the callback below writes) is
    // gone.
    struct Restore {
        Scheduler& s;
        std::function<void(Handle, Result&&)> saved;
        ~Restore() {
            s.on_finish_ = std::move(saved);
            s.keep_step_times_ = false;
        }
    } restore{*this, std::move(on_finish_)};
    on_finish_ = [&](Handle h, Result&& r) { results[h - base] = std::move(r); };
    keep_step_times_ = true;
    // While these requests run, the KV pool's background population waits (it would take a core
    // and memory bandwidth from every step; the engine does the same while it has requests).
    util::ForegroundWork busy;
    busy.set(true);
    for (const Request& r : requests) add(r);
    while (!idle()) step();
    return results;
}

int64_t Scheduler::running_context_tokens() const {
    int64_t n = 0;
    for (const auto& s : running_) n += s->n_computed;
    return n;
}

void Scheduler::step() {
    StepPlan plan = schedule();
    if (!plan.batch.seqs.empty()) {
        Clock::time_point done;
        const StepResult r = execute(plan, done);
        postprocess(plan, r, done);
    }
    end_step(plan);
}

// Admission, the fault hooks, then the batch: every running sequence gets its next tokens
// within the budget. Pages are reserved first; when they run out the newest sequence is
// preempted (preemption.cpp).
Scheduler::StepPlan Scheduler::schedule() {
    admit();
    std::vector<size_t> stale_members;  // cancelled sequences a racing step still names
    if (faults_) inject_table_faults(stale_members);

    if (proposer_) propose_drafts();
    StepPlan plan;
    plan.batch.want_hidden = proposer_ && proposer_->wants_hidden();
    int64_t budget = opts_.max_batch_tokens;
    for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
        if (!running_[i]) continue;
        Seq& s = *running_[i];
        if (s.finished || s.cancelled) continue;
        const int64_t remaining = static_cast<int64_t>(s.tokens.size()) - s.n_computed;
        const int64_t n_new = std::min({remaining, budget, opts_.prefill_chunk});
        if (!reserve_or_preempt(i, n_new)) continue;
        StepSeq ss;
        ss.id = s.id;
        ss.tokens =
            std::span<const int32_t>(s.tokens.data() + s.n_computed, static_cast<size_t>(n_new));
        if (const int64_t n_verify = proposer_ ? draft_tokens(s, budget) : 0; n_verify > 1) {
            ss.tokens = s.spec.input;
            ss.verify = true;
            budget -= n_verify - n_new;
        }
        ss.pos0 = s.n_computed;
        ss.table = &s.table;
        ss.want_logits = s.n_computed + n_new == static_cast<int64_t>(s.tokens.size());
        ss.all_logits = s.wants_prompt_logits();
        plan.batch.seqs.push_back(ss);
        plan.member.push_back(i);
        budget -= n_new;
    }
    if (faults_) inject_batch_faults(plan, stale_members);
    return plan;
}

void Scheduler::admit() {
    // FCFS: the head waits until its tokens fit (no overtaking). Beyond the head's own pages,
    // `watermark` of the pool stays free while anything runs. Pages the prefix cache already
    // holds for the head of the tokens are attached, not allocated; unreferenced cached pages
    // are evicted (LRU) before the head is made to wait.
    const auto reserve_pages = static_cast<int64_t>(opts_.watermark * kv_.pool().capacity());
    // reserve_outputs: pages a sequence may still need to reach its longest length.
    auto final_pages = [&](const Seq& q) {
        return kv_.pages_for(q.n_prompt + q.req.max_new_tokens + 1);
    };
    int64_t growth = 0;  // pages the running sequences may still take
    if (opts_.reserve_outputs)
        for (const auto& r : running_)
            if (r && !r->finished && !r->cancelled)
                growth += std::max<int64_t>(
                    0, final_pages(*r) - static_cast<int64_t>(r->table.pages.size()));
    while (!waiting_.empty() && static_cast<int64_t>(running_.size()) < opts_.max_seqs) {
        Seq& s = *waiting_.front();
        // Alone, a request is admitted on its prompt's pages whatever the policy (it cannot wait
        // for anyone); if it then outgrows the pool it ends as it would have anyway.
        const bool reserve_all = opts_.reserve_outputs && !running_.empty();
        const int64_t reserve = running_.empty() ? 0 : reserve_all ? growth : reserve_pages;
        const int64_t full =
            reserve_all
                ? std::max(final_pages(s), kv_.pages_for(static_cast<int64_t>(s.tokens.size()) + 1))
                : kv_.pages_for(static_cast<int64_t>(s.tokens.size()) + 1);
        const bool attach = prefix_ && s.table.pages.empty() && !s.wants_prompt_logits();
        auto cached_pages = [&] {
            return attach ? prefix_->probe(s.scope, s.tokens) / kv_.page_size() : 0;
        };
        // Pages the head holds already (a prefilled prompt's) are not needed again.
        const auto held = static_cast<int64_t>(s.table.pages.size());
        int64_t need = full - (attach ? cached_pages() : held);
        // Eviction may take pages of the head's own cached chain (then they are needed again),
        // so re-measure after each round that freed something; each round frees a page or stops.
        for (int round = 0; round < 4; ++round) {
            const int64_t short_by = need + reserve - kv_.pool().free_pages();
            if (short_by <= 0 || evict_for(short_by) == 0) break;
            need = full - (attach ? cached_pages() : held);
        }
        if (need + reserve > kv_.pool().free_pages()) break;
        const bool first = !s.admitted_once;
        if (first) {
            s.admitted_once = true;
            s.t_admit = Clock::now();
        }
        if (attach) {
            const kv::AttachResult a = prefix_->attach(s.scope, s.tokens, s.table);
            util::check(a.cached_tokens >= 0 &&
                            a.cached_tokens < static_cast<int64_t>(s.tokens.size()) &&
                            s.table.capacity(kv_.page_size()) >= a.cached_tokens,
                        "prefix cache attached an impossible prefix");
            s.n_computed = a.cached_tokens;
            s.table.n_tokens = a.cached_tokens;
            if (first) s.res.cached_tokens = std::min(a.cached_tokens, s.n_prompt);
        }
        if (opts_.reserve_outputs)
            growth +=
                std::max<int64_t>(0, final_pages(s) - static_cast<int64_t>(s.table.pages.size()));
        running_.push_back(std::move(waiting_.front()));
        waiting_.pop_front();
        if (!s.first_logits.empty()) {  // prefilled elsewhere: its first token now
            const std::vector<float> logits = std::move(s.first_logits);
            s.first_logits.clear();
            sample_next(s, logits, Clock::now());
        }
    }
    stats_.max_running =
        std::max<int64_t>(stats_.max_running, static_cast<int64_t>(running_.size()));
}

// One model step over the batch; `done` is when it returned (the sampled tokens' time).
StepResult Scheduler::execute(const StepPlan& plan, Clock::time_point& done) {
    const auto t0 = Clock::now();
    StepResult r = exec_.execute(plan.batch);
    if (plan.batch.want_hidden)  // an MTP proposer follows the target's hidden states
        for (size_t i = 0; i < plan.batch.seqs.size(); ++i)
            if (r.ok[i])
                proposer_->observe_hidden(plan.batch.seqs[i].id, plan.batch.seqs[i].pos0,
                                          plan.batch.seqs[i].tokens, r.hidden[i].data());
    done = Clock::now();
    const double ms = std::chrono::duration<double, std::milli>(done - t0).count();
    if (keep_step_times_) stats_.step_ms.push_back(ms);
    if (proposer_) note_step_cost(plan, ms);
    stats_.tokens_computed += plan.batch.n_tokens();
    ++stats_.steps;
    return r;
}

// After the step: frees the fault hooks deferred, finished sequences leave running_, and a
// queue head that can never fit is an error rather than an endless loop.
void Scheduler::end_step(const StepPlan& plan) {
    release_deferred_frees();
    std::erase_if(running_, [](const auto& s) { return !s || s->finished || s->cancelled; });
    if (plan.batch.seqs.empty() && running_.empty() && !waiting_.empty() &&
        kv_.pages_for(static_cast<int64_t>(waiting_.front()->tokens.size()) + 1) >
            kv_.pool().free_pages() + (prefix_ ? prefix_->evictable_pages() : 0))
        throw util::Error("KV cache too small for the next request even with nothing running");
}

void Scheduler::finish(Seq& s, FinishReason why) {
    s.finished = true;
    release_draft(s);
    if (!release_pages(s, why != FinishReason::IntegrityError) &&
        why != FinishReason::IntegrityError) {
        spdlog::warn(
            "request {}: page table held stale entries at release; reporting an integrity error",
            s.h);
        why = FinishReason::IntegrityError;
    }
    s.res.finish = why;
    emit_finish(s);
}

void Scheduler::emit_finish(Seq& s) {
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
        if (n_out > 1)
            t.tpot_ms = ms(s.t_last - s.t_first).count() / static_cast<double>(n_out - 1);
    }
    if (on_finish_) on_finish_(s.h, std::move(s.res));
}

}  // namespace warden::engine
