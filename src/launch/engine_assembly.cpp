#include "launch/engine_assembly.h"

#include <algorithm>

namespace warden::launch {

EngineParts assemble_engine(const EngineOptions& o, const model::Model& model,
                            util::ThreadPool& pool, std::optional<int64_t> kv_tokens) {
    EngineParts p;
    p.cache = make_kv_cache(o, model, kv_tokens);
    p.faults = make_fault_injector(o);
    p.transformer = std::make_unique<model::Transformer>(model, pool);
    p.executor = std::make_unique<engine::Executor>(*p.transformer, *p.cache,
                                                    kv::parse_integrity_mode(o.kv_integrity));
    p.scheduler.max_seqs = o.max_seqs;
    p.scheduler.max_batch_tokens = o.max_batch_tokens;
    p.scheduler.prefill_chunk =
        std::min<int64_t>(o.max_batch_tokens, model::Transformer::kMaxChunk);
    return p;
}

}  // namespace warden::launch
