#include "launch/engine_assembly.h"

#include <algorithm>

#include "engine/speculative/draft_proposer.h"
#include "engine/speculative/mtp_proposer.h"
#include "engine/speculative/ngram_proposer.h"
#include "util/error.h"

namespace warden::launch {

EngineParts assemble_engine(const EngineOptions& o, const model::Model& model,
                            util::ThreadPool& pool, std::optional<int64_t> kv_tokens,
                            const CommonOptions* common) {
    EngineParts p;
    // A draft model's KV shares the pool: a budget sized for one known request doubles.
    // So does the MTP layer's (a page per token of it, like the target's).
    if ((o.spec == "draft" || o.spec == "mtp") && kv_tokens)
        *kv_tokens = 2 * *kv_tokens + 2 * o.spec_tokens;
    p.cache = make_kv_cache(o, model, kv_tokens);
    p.faults = make_fault_injector(o);
    p.transformer = std::make_unique<model::Transformer>(model, pool);
    p.executor = std::make_unique<engine::Executor>(*p.transformer, *p.cache,
                                                    kv::parse_integrity_mode(o.kv_integrity));
    p.scheduler.max_seqs = o.max_seqs;
    p.scheduler.max_batch_tokens = o.max_batch_tokens;
    p.scheduler.prefill_chunk =
        std::min<int64_t>(o.max_batch_tokens, model::Transformer::kMaxChunk);
    if (o.spec == "ngram") {
        util::check(o.draft_model.empty() && o.draft_weights.empty(),
                    "--draft-model and --draft-weights need --spec draft");
        p.proposer = std::make_unique<engine::speculative::NgramProposer>();
    } else if (o.spec == "draft") {
        util::check(common != nullptr, "--spec draft is not available in this command");
        CommonOptions d = *common;
        if (!o.draft_model.empty()) d.model_path = o.draft_model;
        d.weights = o.draft_weights;
        d.prefill_weights.clear();
        auto draft = load(d, true, pool).model;
        util::check(draft->config.vocab_size == model.config.vocab_size,
                    "--draft-model: vocabulary of " + std::to_string(draft->config.vocab_size) +
                        " tokens, the target has " + std::to_string(model.config.vocab_size));
        p.proposer =
            std::make_unique<engine::speculative::DraftProposer>(std::move(draft), *p.cache, pool);
    } else if (o.spec == "mtp") {
        util::check(common != nullptr, "--spec mtp is not available in this command");
        util::check(o.draft_model.empty() && o.draft_weights.empty(),
                    "--draft-model and --draft-weights need --spec draft");
        p.proposer = std::make_unique<engine::speculative::MtpProposer>(
            model::load_mtp_model(model, load_options(*common), pool), *p.cache, pool);
    } else {
        util::check(o.spec == "off", "--spec: unknown proposer '" + o.spec + "'");
        util::check(o.draft_model.empty() && o.draft_weights.empty(),
                    "--draft-model and --draft-weights need --spec draft");
    }
    if (p.proposer) {
        p.spec.max_k = o.spec_tokens;
        p.spec.adaptive = !o.spec_fixed;
    }
    return p;
}

}  // namespace warden::launch
