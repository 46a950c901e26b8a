// `warden run`: stream a continuation of a prompt to stdout. The request goes through the
// same engine pieces as served traffic: paged KV cache, integrity checks, scheduler.
#include <chrono>
#include <cstdio>
#include <random>

#include "cli/commands.h"
#include "engine/scheduler.h"
#include "kernels/decode_tuning.h"
#include "launch/common.h"
#include "launch/engine_assembly.h"
#include "model/transformer.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/log.h"
#include "util/utf8.h"

namespace warden::cli {

namespace {

struct RunOptions {
    launch::CommonOptions common;
    launch::EngineOptions engine;
    std::string prompt;
    int64_t n = 64;
    engine::SamplingParams sampling;
    int64_t seed = -1;
    bool ignore_eos = false;
    bool no_bos = false;
};

int run(const RunOptions& o) {
    util::check(o.n >= 1, "-n must be at least 1 (got " + std::to_string(o.n) + ")");
    const size_t bad = util::find_invalid_utf8(o.prompt);
    util::check(bad == std::string::npos,
                "the prompt is not valid UTF-8 (byte " + std::to_string(bad) + ")");
    engine::SamplingParams sp = o.sampling;
    sp.seed = o.seed >= 0 ? static_cast<uint64_t>(o.seed) : std::random_device{}();
    sp.validate();
    util::ThreadPool pool(o.common.threads);
    const launch::LoadedModel loaded = launch::load(o.common, true, pool);
    const auto& model = loaded.model;
    util::check(loaded.tokenizer != nullptr,
                "model '" + o.common.model_path + "' has no tokenizer");
    const tokenizer::Tokenizer& tok = *loaded.tokenizer;

    engine::Request req;
    req.prompt = tok.encode(o.prompt, !o.no_bos);
    util::check(!req.prompt.empty(), "the prompt is empty");
    const int64_t max_ctx = model->config.max_ctx;
    const int64_t need = static_cast<int64_t>(req.prompt.size()) + o.n;
    util::check(need <= max_ctx, "prompt (" + std::to_string(req.prompt.size()) + " tokens) + -n " +
                                     std::to_string(o.n) + " exceeds the model's context of " +
                                     std::to_string(max_ctx) + " tokens");
    req.max_new_tokens = o.n;
    req.sampling = sp;
    if (!o.ignore_eos) req.stop_ids = tok.stop_ids();

    // Default KV budget: exactly the pages this request needs.
    launch::EngineParts parts = launch::assemble_engine(o.engine, *model, pool, need, &o.common);
    // One request: all of it in one sequence, prefill in the model's largest chunks.
    parts.scheduler.max_seqs = 1;
    parts.scheduler.max_batch_tokens = model::Transformer::kMaxChunk;
    parts.scheduler.prefill_chunk = model::Transformer::kMaxChunk;
    engine::Scheduler scheduler(*parts.executor, *parts.cache, parts.scheduler, parts.faults.get());
    scheduler.set_speculative(parts.proposer.get(), parts.spec);

    tokenizer::StreamingDecoder detok(tok);
    const auto t0 = std::chrono::steady_clock::now();
    auto t_first = t0;
    int64_t n_tokens = 0;
    scheduler.on_token([&](engine::Scheduler::Handle, const engine::TokenInfo& info) {
        const int32_t id = info.token;
        if (n_tokens++ == 0) t_first = std::chrono::steady_clock::now();
        const bool is_stop =
            std::find(req.stop_ids.begin(), req.stop_ids.end(), id) != req.stop_ids.end();
        if (is_stop) return;
        const std::string piece = detok.push(id);
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
    });
    const auto results = scheduler.run({req});
    const auto t_end = std::chrono::steady_clock::now();
    const std::string tail = detok.flush();
    std::fwrite(tail.data(), 1, tail.size(), stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
    const engine::Result& r = results[0];
    if (r.finish == engine::FinishReason::IntegrityError)
        throw util::Error("generation aborted: " + (r.violation
                                                        ? r.violation->describe()
                                                        : std::string("kv integrity error")));
    util::check(r.finish != engine::FinishReason::Rejected, "request rejected: " + r.error);

    using ms = std::chrono::duration<double, std::milli>;
    const double prefill_ms = ms(t_first - t0).count();
    const double decode_ms = ms(t_end - t_first).count();
    const double prefill_tps =
        prefill_ms > 0 ? 1000.0 * static_cast<double>(req.prompt.size()) / prefill_ms : 0;
    const double decode_tps =
        decode_ms > 0 && n_tokens > 1 ? 1000.0 * static_cast<double>(n_tokens - 1) / decode_ms : 0;
    std::fprintf(stderr,
                 "timings: prompt_tokens=%zu prefill_ms=%.2f prefill_tok_s=%.2f gen_tokens=%lld "
                 "decode_ms=%.2f "
                 "decode_tok_s=%.2f threads=%d isa=%s decode_tuning=%s dtype=%s finish=%s\n",
                 req.prompt.size(), prefill_ms, prefill_tps, static_cast<long long>(n_tokens),
                 decode_ms, decode_tps, pool.size(), kernels::isa_name(kernels::active_isa()),
                 kernels::decode_tuning().source, model::runtime_dtype_name(model->dtype),
                 engine::finish_reason_name(r.finish));
    return 0;
}

}  // namespace

void register_run(CLI::App& app, int& rc) {
    auto o = std::make_shared<RunOptions>();
    CLI::App* sub =
        app.add_subcommand("run", "generate a continuation of a prompt and stream it to stdout");
    launch::add_model_option(*sub, o->common);
    launch::add_threads_option(*sub, o->common);
    launch::add_dtype_option(*sub, o->common);
    launch::add_engine_options(*sub, o->engine, false);
    launch::add_spec_options(*sub, o->engine);
    sub->add_option("-p,--prompt", o->prompt, "prompt text (UTF-8)")->required();
    sub->add_option("-n,--n-predict", o->n, "number of tokens to generate (>= 1)");
    sub->add_option("--temp", o->sampling.temperature, "temperature (0 = greedy)");
    sub->add_option("--top-k", o->sampling.top_k, "top-k (0 = off)");
    sub->add_option("--top-p", o->sampling.top_p, "top-p (1 = off)");
    sub->add_option("--min-p", o->sampling.min_p, "min-p (0 = off)");
    sub->add_option("--repeat-penalty", o->sampling.repetition_penalty,
                    "repetition penalty (1 = off)");
    sub->add_option("--seed", o->seed, "random seed (default: random)");
    sub->add_flag("--ignore-eos", o->ignore_eos, "keep generating past end-of-sequence tokens");
    sub->add_flag("--no-bos", o->no_bos, "never prepend BOS");
    sub->callback([o, &rc] { rc = run(*o); });
}

}  // namespace warden::cli
