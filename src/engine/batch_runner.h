#pragma once
// A synchronous multi-sequence runner over the paged KV cache: FCFS admission by free pages,
// chunked prefill and decode under a per-step token budget, preemption by recompute when
// pages run out, and the fault injector's hooks between steps. It is what `warden batch` and
// the integrity tests drive; the server's scheduler thread is built on the same pieces.
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "engine/executor.h"
#include "engine/sampler.h"
#include "kv/fault_injector.h"

namespace warden::engine {

struct Request {
    std::vector<int32_t> prompt;
    int64_t max_new_tokens = 16;
    SamplingParams sampling;
    std::vector<int32_t> stop_ids;
};

enum class FinishReason { Length, Stop, IntegrityError, Cancelled, Rejected };
const char* finish_reason_name(FinishReason r);

struct Result {
    std::vector<int32_t> output;
    FinishReason finish = FinishReason::Length;
    std::optional<kv::IntegrityViolation> violation;
    bool fault_target = false;  // an injected fault was aimed at this sequence
    int64_t preemptions = 0;
    std::string error;          // for Rejected
};

struct RunnerOptions {
    int64_t max_seqs = 64;
    int64_t max_batch_tokens = 512;
    int64_t prefill_chunk = 256;
};

struct RunnerStats {
    int64_t steps = 0;
    std::vector<double> step_ms;  // wall time of every executed step
    int64_t tokens_computed = 0;  // prompt + generated tokens run through the model
    int64_t preemptions = 0;
    int64_t refused_frees = 0;  // releases the pool refused (stale entries of aborted sequences)
    int64_t max_running = 0;
};

class BatchRunner {
public:
    BatchRunner(Executor& exec, kv::KvCache& kv, RunnerOptions opts, kv::FaultInjector* faults = nullptr);
    // Called on the runner's thread for every sampled token (request index, token id).
    void on_token(std::function<void(size_t, int32_t)> cb) { on_token_ = std::move(cb); }
    std::vector<Result> run(const std::vector<Request>& requests);
    const RunnerStats& stats() const { return stats_; }

private:
    struct Seq;
    void inject_faults(std::vector<Seq>& running, std::vector<kv::PageRef>& deferred_frees,
                       std::vector<size_t>& stale_members);

    Executor& exec_;
    kv::KvCache& kv_;
    RunnerOptions opts_;
    kv::FaultInjector* faults_;
    RunnerStats stats_;
    std::function<void(size_t, int32_t)> on_token_;
    std::vector<Result>* results_ = nullptr;  // of the run in progress
};

}  // namespace warden::engine
