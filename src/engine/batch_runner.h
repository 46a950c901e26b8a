#pragma once
// The scheduler core over the paged KV cache, shared by `warden batch`/`warden run` (run(): add
// everything, step until idle) and the server's scheduler thread (engine.h: add / cancel / step
// as messages arrive). Iteration-level continuous batching: FCFS admission by free pages with a
// watermark, chunked prefill and decode under a per-step token budget, preemption by recompute
// when pages run out, and the fault injector's hooks between steps.
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
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/executor.h"
#include "engine/sampler.h"
#include "kv/fault_injector.h"
#include "kv/prefix_cache.h"

namespace warden::engine {

struct Request {
    std::vector<int32_t> prompt;
    int64_t max_new_tokens = 16;
    SamplingParams sampling;
    std::vector<int32_t> stop_ids;
    int32_t top_logprobs = -1;  // < 0: no logprobs; >= 0: logprob of each token + this many top ones
    // The server-side tenant (from the API key, never from the client): the metrics label and
    // the prefix cache's isolation scope. cache_salt is the client's optional narrowing of it.
    std::string tenant;
    std::string cache_salt;
};

enum class FinishReason { Length, Stop, IntegrityError, Cancelled, Rejected, Timeout };
const char* finish_reason_name(FinishReason r);

// Per-request latency breakdown, milliseconds. queue: arrival -> first admission; prefill:
// first admission -> first token; ttft: arrival -> first token; tpot: mean gap between output
// tokens after the first; total: arrival -> finish. Zero where the event never happened.
struct Timing {
    double queue_ms = 0, prefill_ms = 0, ttft_ms = 0, tpot_ms = 0, total_ms = 0;
};

struct Result {
    std::vector<int32_t> output;
    FinishReason finish = FinishReason::Length;
    std::optional<kv::IntegrityViolation> violation;
    bool fault_target = false;  // an injected fault was aimed at this sequence
    int64_t preemptions = 0;
    std::string error;          // for Rejected
    int64_t n_prompt = 0;
    int64_t cached_tokens = 0;  // prompt tokens served by the prefix cache at first admission
    Timing timing;
};

// One sampled token as delivered to on_token.
struct TokenInfo {
    int32_t token = 0;
    TokenLogprobs logprobs;  // filled when the request asked for logprobs
};

struct RunnerOptions {
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

struct RunnerStats {
    int64_t steps = 0;
    std::vector<double> step_ms;  // wall time of every executed step (run() only; bounded otherwise)
    int64_t tokens_computed = 0;  // prompt + generated tokens run through the model
    int64_t prompt_tokens = 0;    // prompt tokens of finished requests
    int64_t generated_tokens = 0; // tokens sampled
    int64_t preemptions = 0;
    int64_t refused_frees = 0;  // releases the pool refused (stale entries of aborted sequences)
    int64_t max_running = 0;
};

class BatchRunner {
public:
    using Handle = uint64_t;

    BatchRunner(Executor& exec, kv::KvCache& kv, RunnerOptions opts, kv::FaultInjector* faults = nullptr);
    ~BatchRunner();

    // Called on the runner's thread for every sampled token.
    void on_token(std::function<void(Handle, const TokenInfo&)> cb) { on_token_ = std::move(cb); }
    // Called on the runner's thread exactly once per added request, when it ends for any reason.
    void on_finish(std::function<void(Handle, Result&&)> cb) { on_finish_ = std::move(cb); }
    // The prefix cache (owned by the caller, used on the runner's thread only; it must share
    // the KvCache's pool and outlive the runner's use of it). nullptr: no caching.
    void set_prefix_cache(kv::PrefixCache* pc) { prefix_ = pc; }
    kv::PrefixCache* prefix_cache() const { return prefix_; }

    // Incremental core. add() queues a request (FCFS) and returns its handle; a request that can
    // never run (empty, larger than the cache) finishes at once as Rejected (on_finish is
    // called before add returns). cancel() ends a waiting or running request with `why`
    // (Cancelled, Timeout), freeing its pages; unknown/finished handles are ignored.
    Handle add(Request r);
    void cancel(Handle h, FinishReason why = FinishReason::Cancelled);
    // One iteration: admission, fault injection, one model step over the batch, sampling,
    // finishing. Throws util::Error when the head of the queue can never be admitted.
    void step();
    bool idle() const { return waiting_.empty() && running_.empty(); }
    size_t n_waiting() const { return waiting_.size(); }
    size_t n_running() const { return running_.size(); }

    // Synchronous batch: add all, step until idle; results in request order. Uses on_finish.
    std::vector<Result> run(const std::vector<Request>& requests);

    const RunnerStats& stats() const { return stats_; }
    kv::KvCache& kv() { return kv_; }

private:
    struct Seq;
    using Clock = std::chrono::steady_clock;
    void admit();
    bool release_pages(Seq& s, bool offer);
    void offer(Seq& s);
    int64_t evict_for(int64_t pages_short);
    void finish(Seq& s, FinishReason why);
    void emit_finish(Seq& s);
    void inject_faults(std::vector<size_t>& stale_members);

    Executor& exec_;
    kv::KvCache& kv_;
    RunnerOptions opts_;
    kv::FaultInjector* faults_;
    kv::PrefixCache* prefix_ = nullptr;
    RunnerStats stats_;
    bool keep_step_times_ = false;
    std::function<void(Handle, const TokenInfo&)> on_token_;
    std::function<void(Handle, Result&&)> on_finish_;
    Handle next_handle_ = 0;
    std::deque<std::unique_ptr<Seq>> waiting_;
    std::vector<std::unique_ptr<Seq>> running_;
    std::vector<kv::PageRef> deferred_frees_;
};

}  // namespace warden::engine
