// `warden run`: stream a continuation of a prompt to stdout.
#include <cstdio>
#include <random>

#include "cli/common.h"
#include "engine/generate.h"
#include "model/transformer.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/utf8.h"

namespace warden::cli {

namespace {

struct RunOptions {
    CommonOptions common;
    std::string prompt;
    int64_t n = 64;
    engine::SamplingParams sampling;
    int64_t seed = -1;
    bool ignore_eos = false;
    bool no_bos = false;
    int64_t ctx = 0;
};

int run(const RunOptions& o) {
    util::check(o.n >= 1, "-n must be at least 1 (got " + std::to_string(o.n) + ")");
    const size_t bad = util::find_invalid_utf8(o.prompt);
    util::check(bad == std::string::npos, "the prompt is not valid UTF-8 (byte " + std::to_string(bad) + ")");
    util::ThreadPool pool(o.common.threads);
    auto model = load(o.common, true, pool);
    util::check(model->tokenizer != nullptr, "model '" + o.common.model_path + "' has no tokenizer");
    const tokenizer::Tokenizer& tok = *model->tokenizer;

    engine::SamplingParams sp = o.sampling;
    sp.seed = o.seed >= 0 ? static_cast<uint64_t>(o.seed) : std::random_device{}();
    sp.validate();

    const std::vector<int32_t> prompt = tok.encode(o.prompt, !o.no_bos);
    util::check(!prompt.empty(), "the prompt is empty");
    const int64_t max_ctx = model->config.max_ctx;
    const int64_t need = static_cast<int64_t>(prompt.size()) + o.n;
    util::check(static_cast<int64_t>(prompt.size()) < max_ctx,
                "the prompt has " + std::to_string(prompt.size()) + " tokens, more than the model's context of " +
                    std::to_string(max_ctx));
    int64_t ctx = o.ctx > 0 ? o.ctx : std::min(max_ctx, need);
    util::check(need <= ctx, "prompt (" + std::to_string(prompt.size()) + " tokens) + -n " + std::to_string(o.n) +
                                 " exceeds the context of " + std::to_string(ctx) + " tokens");

    const auto kv_type = model->dtype == model::RuntimeDType::F32 ? kernels::KvType::F32 : kernels::KvType::BF16;
    model::ContiguousKvCache cache(model->config, ctx, kv_type);
    model::Transformer tf(*model, pool);
    engine::Sampler sampler(sp);
    engine::GenerateOptions go;
    go.max_new_tokens = o.n;
    go.ignore_eos = o.ignore_eos;
    go.stop_ids = tok.stop_ids();

    tokenizer::StreamingDecoder detok(tok);
    engine::GenerateTimings t;
    engine::generate(tf, cache, prompt, go, sampler, [&](int32_t id) {
        const bool is_stop = std::find(go.stop_ids.begin(), go.stop_ids.end(), id) != go.stop_ids.end();
        if (is_stop && !o.ignore_eos) return;
        const std::string piece = detok.push(id);
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
    }, &t);
    const std::string tail = detok.flush();
    std::fwrite(tail.data(), 1, tail.size(), stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
    const double prefill_tps = t.prefill_ms > 0 ? 1000.0 * static_cast<double>(t.prompt_tokens) / t.prefill_ms : 0;
    const double decode_tps =
        t.decode_ms > 0 && t.gen_tokens > 1 ? 1000.0 * static_cast<double>(t.gen_tokens - 1) / t.decode_ms : 0;
    std::fprintf(stderr,
                 "timings: prompt_tokens=%lld prefill_ms=%.2f prefill_tok_s=%.2f gen_tokens=%lld decode_ms=%.2f "
                 "decode_tok_s=%.2f threads=%d isa=%s dtype=%s\n",
                 static_cast<long long>(t.prompt_tokens), t.prefill_ms, prefill_tps,
                 static_cast<long long>(t.gen_tokens), t.decode_ms, decode_tps, pool.size(),
                 kernels::isa_name(kernels::active_isa()), model::runtime_dtype_name(model->dtype));
    return 0;
}

}  // namespace

void register_run(CLI::App& app, int& rc) {
    auto o = std::make_shared<RunOptions>();
    CLI::App* sub = app.add_subcommand("run", "generate a continuation of a prompt and stream it to stdout");
    add_model_option(*sub, o->common);
    add_threads_option(*sub, o->common);
    add_dtype_option(*sub, o->common);
    sub->add_option("-p,--prompt", o->prompt, "prompt text (UTF-8)")->required();
    sub->add_option("-n,--n-predict", o->n, "number of tokens to generate (>= 1)");
    sub->add_option("--temp", o->sampling.temperature, "temperature (0 = greedy)");
    sub->add_option("--top-k", o->sampling.top_k, "top-k (0 = off)");
    sub->add_option("--top-p", o->sampling.top_p, "top-p (1 = off)");
    sub->add_option("--min-p", o->sampling.min_p, "min-p (0 = off)");
    sub->add_option("--repeat-penalty", o->sampling.repetition_penalty, "repetition penalty (1 = off)");
    sub->add_option("--seed", o->seed, "random seed (default: random)");
    sub->add_option("-c,--ctx", o->ctx, "context size (default: prompt + n, at most the model's)");
    sub->add_flag("--ignore-eos", o->ignore_eos, "keep generating past end-of-sequence tokens");
    sub->add_flag("--no-bos", o->no_bos, "never prepend BOS");
    sub->callback([o, &rc] { rc = run(*o); });
}

}  // namespace warden::cli
