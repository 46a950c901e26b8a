#include "tools/eval/engine.h"

#include <algorithm>
#include <chrono>

#include "engine/sampler.h"
#include "kv/page_table.h"
#include "launch/engine_assembly.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace warden::tools::eval {

// The model and KV cache come from the CLI's options and assembly (cli/common.h,
// cli/engine_options.h).
using namespace launch;

EvalEngine::EvalEngine(const std::string& model_path, const EvalConfig& cfg, util::ThreadPool& pool)
    : cfg_(cfg), pool_(pool) {
    cfg_.common.model_path = model_path;
    LoadedModel loaded = load(cfg_.common, true, pool_);
    model_ = std::move(loaded.model);
    tokenizer_ = std::move(loaded.tokenizer);
    util::check(tokenizer_ != nullptr, "warden eval needs a model with a tokenizer");
}

std::vector<int32_t> EvalEngine::encode(const std::string& text, bool bos) const {
    return tokenizer_->encode(text, bos, false);
}

std::string EvalEngine::decode(const std::vector<int32_t>& ids) const {
    return tokenizer_->decode(ids);
}

std::vector<float> EvalEngine::logits_all(const std::vector<int32_t>& tokens) {
    std::vector<float> all;
    run(tokens, 0, &all, nullptr, nullptr);
    return all;
}

std::vector<int32_t> EvalEngine::greedy(const std::vector<int32_t>& prompt, int64_t n,
                                        std::vector<double>* step_ms) {
    std::vector<int32_t> gen;
    run(prompt, n, nullptr, &gen, step_ms);
    return gen;
}

void EvalEngine::run(const std::vector<int32_t>& prompt, int64_t n, std::vector<float>* all,
                     std::vector<int32_t>* gen, std::vector<double>* step_ms) {
    util::check(!prompt.empty(), "eval: empty prompt");
    const int64_t np = static_cast<int64_t>(prompt.size());
    const int64_t ctx = np + n;
    util::check(ctx <= model_->config.max_ctx, "eval: " + std::to_string(ctx) +
                                                   " tokens exceed the model's context of " +
                                                   std::to_string(model_->config.max_ctx));
    const int64_t V = vocab();
    // Each sequence gets its own engine, its KV cache sized to fit it exactly.
    const EngineParts parts = assemble_engine(cfg_.engine, *model_, pool_, ctx);
    const auto& cache = parts.cache;
    kv::PageTable table;
    util::check(cache->reserve(table, ctx), "eval: KV cache too small");
    std::vector<int32_t> page_ids;
    for (const auto& p : table.pages) page_ids.push_back(p.page.v);
    const bool verify = cfg_.engine.kv_integrity != "off";
    auto forward = [&](const int32_t* toks, int64_t m, int64_t pos0, float* out, bool every) {
        if (verify)
            util::check(!cache->verify(kv::SeqId{0}, table).has_value(),
                        "eval: kv integrity violation");
        model::SeqInput in;
        in.tokens = std::span<const int32_t>(toks, static_cast<size_t>(m));
        in.pos0 = pos0;
        in.page_ids = page_ids.data();
        in.logits = out;
        in.all_logits = every;
        parts.transformer->step(std::span<const model::SeqInput>(&in, 1), cache->storage());
    };
    using Clock = std::chrono::steady_clock;
    std::vector<float> last(static_cast<size_t>(V));
    auto t0 = Clock::now();
    if (all) all->assign(static_cast<size_t>(np * V), 0.0f);
    for (int64_t off = 0; off < np; off += model::Transformer::kMaxChunk) {
        const int64_t m = std::min(model::Transformer::kMaxChunk, np - off);
        const bool final_chunk = off + m == np;
        if (all)
            forward(prompt.data() + off, m, off, all->data() + off * V, true);
        else
            forward(prompt.data() + off, m, off, final_chunk ? last.data() : nullptr, false);
    }
    if (step_ms)
        step_ms->push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    if (!gen || n <= 0) return;
    if (all) std::copy(all->end() - V, all->end(), last.begin());
    const auto stops = tokenizer_->stop_ids();
    for (int64_t i = 0; i < n; ++i) {
        const int32_t id = engine::Sampler::argmax(last);
        if (std::find(stops.begin(), stops.end(), id) != stops.end()) break;
        gen->push_back(id);
        if (i + 1 < n) {
            t0 = Clock::now();
            forward(&id, 1, np + i, last.data(), false);
            if (step_ms)
                step_ms->push_back(
                    std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
        }
    }
}

}  // namespace warden::tools::eval
