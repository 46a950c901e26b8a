// `warden batch`: run many prompts at once through the continuous-batching engine on the
// paged KV cache and print one JSON line per prompt plus a summary (integrity counters, step
// times). What the integrity tests and benchmarks drive from the command line.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "engine/scheduler.h"
#include "launch/common.h"
#include "launch/engine_assembly.h"
#include "model/transformer.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/utf8.h"

namespace warden::cli {

namespace {

struct BatchOptions {
    launch::CommonOptions common;
    launch::EngineOptions engine;
    std::string prompts_file;
    int64_t n = 32;
    float temperature = 0.0f;
    int64_t seed = 0;
    bool ignore_eos = false;
};

// One prompt per line: either plain UTF-8 text, or a JSON object {"prompt": "..."} /
// {"tokens": [ids]} with an optional "n".
std::vector<engine::Request> read_requests(const BatchOptions& o, const model::Model& m,
                                           const tokenizer::Tokenizer* tok) {
    std::ifstream f(o.prompts_file, std::ios::binary);
    util::check(static_cast<bool>(f), "cannot open prompts file '" + o.prompts_file + "'");
    std::vector<engine::Request> reqs;
    std::string line;
    int64_t lineno = 0;
    while (std::getline(f, line)) {
        ++lineno;
        if (line.empty()) continue;
        const std::string where = o.prompts_file + ":" + std::to_string(lineno);
        util::check(util::find_invalid_utf8(line) == std::string::npos,
                    where + ": not valid UTF-8");
        engine::Request r;
        r.max_new_tokens = o.n;
        r.sampling.temperature = o.temperature;
        r.sampling.seed = static_cast<uint64_t>(o.seed) + static_cast<uint64_t>(reqs.size());
        if (line.front() == '{') {
            nlohmann::json j;
            try {
                j = nlohmann::json::parse(line);
            } catch (const nlohmann::json::exception&) {
                throw util::Error(where + ": invalid JSON");
            }
            util::check(j.is_object(), where + ": expected a JSON object");
            if (j.contains("tokens")) {
                util::check(j["tokens"].is_array(), where + ": 'tokens' must be an array");
                for (const auto& t : j["tokens"]) {
                    util::check(t.is_number_integer() && t.get<int64_t>() >= 0 &&
                                    t.get<int64_t>() < m.config.vocab_size,
                                where + ": bad token id");
                    r.prompt.push_back(t.get<int32_t>());
                }
            } else {
                util::check(j.contains("prompt") && j["prompt"].is_string(),
                            where + ": needs 'prompt' or 'tokens'");
                util::check(tok != nullptr, "model has no tokenizer; give token ids");
                r.prompt = tok->encode(j["prompt"].get<std::string>(), true);
            }
            if (j.contains("n")) {
                util::check(j["n"].is_number_integer() && j["n"].get<int64_t>() >= 1,
                            where + ": 'n' must be >= 1");
                r.max_new_tokens = j["n"].get<int64_t>();
            }
        } else {
            util::check(tok != nullptr, "model has no tokenizer; give token ids");
            r.prompt = tok->encode(line, true);
        }
        if (!o.ignore_eos && tok) r.stop_ids = tok->stop_ids();
        reqs.push_back(std::move(r));
    }
    util::check(!reqs.empty(), "prompts file '" + o.prompts_file + "' has no prompts");
    return reqs;
}

double percentile(std::vector<double> v, double p) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const size_t i =
        std::min(v.size() - 1, static_cast<size_t>(p / 100.0 * static_cast<double>(v.size())));
    return v[i];
}

int batch(const BatchOptions& o) {
    util::check(o.n >= 1, "-n must be at least 1");
    util::ThreadPool pool(o.common.threads);
    const launch::LoadedModel loaded = launch::load(o.common, true, pool);
    const auto& model = loaded.model;
    const auto reqs = read_requests(o, *model, loaded.tokenizer.get());
    const launch::EngineParts parts =
        launch::assemble_engine(o.engine, *model, pool, std::nullopt, &o.common);
    const auto& cache = parts.cache;
    const auto& faults = parts.faults;
    const engine::Executor& exec = *parts.executor;
    engine::Scheduler scheduler(*parts.executor, *cache, parts.scheduler, faults.get());
    scheduler.set_speculative(parts.proposer.get(), parts.spec);
    const auto t0 = std::chrono::steady_clock::now();
    const auto results = scheduler.run(reqs);
    const double wall_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

    int64_t generated = 0, aborted = 0;
    for (size_t i = 0; i < results.size(); ++i) {
        const auto& r = results[i];
        generated += static_cast<int64_t>(r.output.size());
        aborted += r.finish == engine::FinishReason::IntegrityError;
        nlohmann::json j;
        j["index"] = i;
        j["tokens"] = r.output;
        if (loaded.tokenizer) j["text"] = loaded.tokenizer->decode(r.output);
        j["finish_reason"] = engine::finish_reason_name(r.finish);
        j["preemptions"] = r.preemptions;
        if (r.violation) j["error"] = r.violation->describe();
        if (!r.error.empty()) j["error"] = r.error;
        std::puts(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    }
    const auto& st = scheduler.stats();
    nlohmann::json s;
    s["summary"] = true;
    s["requests"] = results.size();
    s["generated_tokens"] = generated;
    s["computed_tokens"] = st.tokens_computed;
    s["wall_ms"] = wall_ms;
    s["output_tok_s"] = wall_ms > 0 ? 1000.0 * static_cast<double>(generated) / wall_ms : 0.0;
    s["steps"] = st.steps;
    s["step_ms_p50"] = percentile(st.step_ms, 50);
    s["step_ms_p99"] = percentile(st.step_ms, 99);
    s["preemptions"] = st.preemptions;
    s["max_running"] = st.max_running;
    s["integrity_mode"] = o.engine.kv_integrity;
    s["integrity_checks"] = exec.stats().integrity_checks;
    s["integrity_violations"] = exec.stats().integrity_violations;
    s["aborted_integrity"] = aborted;
    s["refused_frees"] = st.refused_frees;
    s["kv_pages_used_after"] = cache->pool().used_pages();
    if (parts.proposer) {  // speculative decoding: what was drafted, kept, and where time went
        const auto& sp = st.spec;
        s["spec"] = {{"proposer", parts.proposer->name()},
                     {"proposed", sp.proposed},
                     {"accepted", sp.accepted},
                     {"acceptance", sp.proposed > 0 ? static_cast<double>(sp.accepted) /
                                                          static_cast<double>(sp.proposed)
                                                    : 0.0},
                     {"proposed_at", sp.proposed_at},
                     {"accepted_at", sp.accepted_at},
                     {"verify_steps", sp.verify_steps},
                     {"draft_ms", sp.draft_ms},
                     {"verify_step_ms", sp.verify_step_ms},
                     {"rollback_ms", sp.rollback_ms},
                     {"rollback_pages", sp.rollback_pages}};
    }
    if (faults) {
        s["faults_injected"] = faults->total_injected();
        nlohmann::json per;
        for (int k = 0; k < kv::kFaultKinds; ++k)
            per[kv::fault_kind_name(static_cast<kv::FaultKind>(k))] =
                faults->injected()[static_cast<size_t>(k)];
        s["faults_by_kind"] = per;
    }
    std::puts(s.dump().c_str());
    return 0;
}

}  // namespace

void register_batch(CLI::App& app, int& rc) {
    auto o = std::make_shared<BatchOptions>();
    CLI::App* sub = app.add_subcommand(
        "batch", "run many prompts concurrently (continuous batching, paged KV)");
    launch::add_model_option(*sub, o->common);
    launch::add_threads_option(*sub, o->common);
    launch::add_dtype_option(*sub, o->common);
    launch::add_engine_options(*sub, o->engine, true);
    launch::add_spec_options(*sub, o->engine);
    sub->add_option("--prompts", o->prompts_file, "file with one prompt per line (text or JSON)")
        ->required();
    sub->add_option("-n,--n-predict", o->n, "tokens to generate per prompt (default 32)");
    sub->add_option("--temp", o->temperature, "temperature (default 0: greedy)");
    sub->add_option("--seed", o->seed, "base seed (prompt i uses seed + i)");
    sub->add_flag("--ignore-eos", o->ignore_eos, "keep generating past end-of-sequence tokens");
    sub->callback([o, &rc] { rc = batch(*o); });
}

}  // namespace warden::cli
