#pragma once
// The scheduler over the paged KV cache, shared by `warden batch`/`warden run` (run(): add
// everything, step until idle) and the server's scheduler thread (engine.h: add / cancel / step
// as messages arrive). Iteration-level continuous batching: FCFS admission by free pages with a
// watermark, chunked prefill and decode under a per-step token budget, preemption by recompute
// when pages run out, and the fault injector's hooks between steps.
//
// One step() is schedule -> execute -> postprocess; each job has its own file:
//   scheduler.cpp     requests' lifecycle (add, cancel, finish), admission, building the step
//   preemption.cpp    pages for the step: prefix-cache eviction first, then preemption
//   fault_hooks.cpp   the fault injector's hooks (page-table faults, stale members, reordering)
//   postprocess.cpp   applying a step's result: sampling, stop conditions, finishing
//
// Single-threaded: the thread that calls add/cancel/step owns the KvCache and does every free.
//
// With a prefix cache (set_prefix_cache): admission attaches cached pages for the head of a
// prompt (the first step then starts at pos0 = cached tokens) and evicts unreferenced cached
// pages when free pages run short; a page shortage while building a step evicts before it
// preempts; a sequence's full pages are offered to the cache when its prompt is computed and
// right before its table is freed (finish, preemption; never after an integrity error).
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "engine/executor.h"
#include "engine/request.h"
#include "engine/speculative/policy.h"
#include "engine/speculative/proposer.h"
#include "engine/step_batch.h"
#include "kv/fault_injector.h"
#include "kv/prefix_cache.h"

namespace warden::engine {

struct SchedulerOptions {
    int64_t max_seqs = 64;
    int64_t max_batch_tokens = 512;
    int64_t prefill_chunk = 256;
    // Admission keeps this fraction of the pool free for running sequences to grow into
    // (unless nothing is running), so admitting does not immediately force preemption.
    double watermark = 0.0;
    // Admission by expected length (TGI's policy): a request is admitted only when the pool can
    // hold it and every running sequence at their longest (prompt + max_new_tokens), so running
    // sequences never have to be preempted; the price is fewer sequences at once when max_tokens
    // are generous. Off: admission by the prompt's pages and the watermark (vLLM's policy), which
    // packs more sequences but preempts (and recomputes) when they outgrow the pool.
    bool reserve_outputs = false;
};

struct SchedulerStats {
    int64_t steps = 0;
    std::vector<double>
        step_ms;  // wall time of every executed step (run() only; bounded otherwise)
    int64_t tokens_computed = 0;   // prompt + generated tokens run through the model
    int64_t prompt_tokens = 0;     // prompt tokens of finished requests
    int64_t generated_tokens = 0;  // tokens sampled
    int64_t preemptions = 0;
    int64_t refused_frees = 0;  // releases the pool refused (stale entries of aborted sequences)
    int64_t max_running = 0;
    speculative::SpecStats spec;  // speculative decoding (all zero when it is off)
};

class Scheduler {
  public:
    using Handle = uint64_t;

    Scheduler(Executor& exec, kv::KvCache& kv, SchedulerOptions opts,
              kv::FaultInjector* faults = nullptr);
    ~Scheduler();

    // Called on the scheduler's thread for every sampled token.
    void on_token(std::function<void(Handle, const TokenInfo&)> cb) { on_token_ = std::move(cb); }
    // Called on the scheduler's thread as a request's prompt is processed: after each prefill
    // chunk, with the prompt tokens it completed (prefix-cache hits count with the first chunk,
    // a chunk recomputed after preemption does not count again). A request whose prefill ends
    // has been reported its whole prompt by the time of its first on_token.
    void on_prompt_tokens(std::function<void(Handle, int64_t)> cb) {
        on_prompt_tokens_ = std::move(cb);
    }
    // Called on the scheduler's thread exactly once per added request, when it ends for any reason.
    void on_finish(std::function<void(Handle, Result&&)> cb) { on_finish_ = std::move(cb); }
    // The prefix cache (owned by the caller, used on the scheduler's thread only; it must share
    // the KvCache's pool and outlive the scheduler's use of it). nullptr: no caching.
    void set_prefix_cache(kv::PrefixCache* pc) { prefix_ = pc; }
    kv::PrefixCache* prefix_cache() const { return prefix_; }
    // Speculative decoding: drafts from `p` (owned by the caller, used on the scheduler's thread
    // only), verified by the target in the same step (engine/speculative/verify.cpp). nullptr or
    // cfg.max_k == 0: off.
    void set_speculative(speculative::Proposer* p, speculative::SpecConfig cfg);

    // Incremental core. add() queues a request (FCFS) and returns its handle; a request that can
    // never run (empty, larger than the cache) finishes at once as Rejected (on_finish is
    // called before add returns). cancel() ends a waiting or running request with `why`
    // (Cancelled, Timeout), freeing its pages; unknown/finished handles are ignored.
    Handle add(Request r);
    void cancel(Handle h, FinishReason why = FinishReason::Cancelled);
    // One iteration: schedule (admission, fault injection, the step's batch within the token
    // budget), execute (one model step), postprocess (sampling, stop conditions, finishing).
    // Throws util::Error when the head of the queue can never be admitted.
    void step();
    bool idle() const { return waiting_.empty() && running_.empty(); }
    size_t n_waiting() const { return waiting_.size(); }
    size_t n_running() const { return running_.size(); }
    // Tokens whose K/V the running sequences hold (what a decode step's attention reads).
    int64_t running_context_tokens() const;

    // Synchronous batch: add all, step until idle; results in request order. Uses on_finish.
    std::vector<Result> run(const std::vector<Request>& requests);

    const SchedulerStats& stats() const { return stats_; }
    kv::KvCache& kv() { return kv_; }

  private:
    struct Seq;
    using Clock = std::chrono::steady_clock;
    // One step's batch; member[b] is the index into running_ of batch.seqs[b].
    struct StepPlan {
        StepBatch batch;
        std::vector<size_t> member;
    };

    // schedule (scheduler.cpp)
    StepPlan schedule();
    void admit();
    void end_step(const StepPlan& plan);
    // pages for the step (preemption.cpp)
    bool reserve_or_preempt(size_t i, int64_t n_new);
    size_t newest_unfinished() const;
    bool release_pages(Seq& s, bool offer);
    void offer(Seq& s);
    int64_t evict_for(int64_t pages_short);
    // fault hooks (fault_hooks.cpp)
    void inject_table_faults(std::vector<size_t>& stale_members);
    void inject_batch_faults(StepPlan& plan, const std::vector<size_t>& stale_members);
    void release_deferred_frees();
    // execute (scheduler.cpp) and postprocess (postprocess.cpp)
    StepResult execute(const StepPlan& plan, Clock::time_point& done);
    void postprocess(const StepPlan& plan, const StepResult& r, Clock::time_point done);
    void sample_next(Seq& s, const std::vector<float>& logits, Clock::time_point done);
    // speculative decoding (speculative/verify.cpp)
    void propose_drafts();
    bool critical_path_drafts(const std::vector<Seq*>& owners,
                              const std::vector<speculative::DraftRequest>& reqs) const;
    int64_t draft_tokens(Seq& s, int64_t budget);
    void accept_verified(Seq& s, const StepSeq& ss, const std::vector<float>& logits,
                         Clock::time_point done);
    bool rollback_pages(Seq& s);
    void release_draft(Seq& s);
    void note_step_cost(const StepPlan& plan, double ms);
    void record_prompt_logprobs(Seq& s, int64_t pos0, const std::vector<float>& logits);
    void report_prompt_progress(Seq& s);
    // requests' lifecycle (scheduler.cpp)
    void finish(Seq& s, FinishReason why);
    void emit_finish(Seq& s);

    Executor& exec_;
    kv::KvCache& kv_;
    SchedulerOptions opts_;
    kv::FaultInjector* faults_;
    kv::PrefixCache* prefix_ = nullptr;
    SchedulerStats stats_;
    bool keep_step_times_ = false;
    std::function<void(Handle, const TokenInfo&)> on_token_;
    std::function<void(Handle, Result&&)> on_finish_;
    std::function<void(Handle, int64_t)> on_prompt_tokens_;
    Handle next_handle_ = 0;
    std::deque<std::unique_ptr<Seq>> waiting_;
    std::vector<std::unique_ptr<Seq>> running_;
    std::vector<kv::PageRef> deferred_frees_;
    speculative::Proposer* proposer_ = nullptr;
    speculative::SpecConfig spec_;
    speculative::StepCostModel step_cost_;
    speculative::DraftCostModel draft_cost_;  // the proposer's time per drafted token
    speculative::EvidenceAcceptance spec_evidence_;
};

}  // namespace warden::engine
