#pragma once
// The engine's parts for one loaded model, assembled the same way by every command that runs
// the model (run, batch, serve, logits, eval): the paged KV cache, the fault injector, the
// forward pass, the executor over both, and the scheduler's options from the flags.
#include <memory>
#include <optional>

#include "engine/executor.h"
#include "engine/scheduler.h"
#include "kv/fault_injector.h"
#include "kv/kv_cache.h"
#include "launch/common.h"
#include "launch/engine_options.h"
#include "model/model.h"
#include "model/transformer.h"
#include "util/thread_pool.h"

namespace warden::launch {

struct EngineParts {
    std::unique_ptr<kv::KvCache> cache;
    std::unique_ptr<kv::FaultInjector> faults;  // nullptr without --fault-inject
    std::unique_ptr<model::Transformer> transformer;
    std::unique_ptr<engine::Executor> executor;  // --kv-integrity over `transformer` and `cache`
    // --max-seqs and --max-batch-tokens; prefill chunks of at most the model's largest chunk.
    engine::SchedulerOptions scheduler;
    // --spec: the draft source (nullptr when off) and the policy; hand both to the scheduler
    // (Scheduler::set_speculative, EngineConfig).
    std::unique_ptr<engine::speculative::Proposer> proposer;
    engine::speculative::SpecConfig spec;
};

// `model` and `pool` must outlive the parts. The KV cache holds --kv-cache-bytes, else exactly
// `kv_tokens` tokens when given (a single known request), else 1 GiB.
// `common` (the target's model options) is needed by --spec draft, which loads the draft with
// them (another checkpoint with --draft-model, another format with --draft-weights).
EngineParts assemble_engine(const EngineOptions& o, const model::Model& model,
                            util::ThreadPool& pool, std::optional<int64_t> kv_tokens = std::nullopt,
                            const CommonOptions* common = nullptr);

}  // namespace warden::launch
