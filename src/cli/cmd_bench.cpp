// `warden bench`: a load generator for any OpenAI-compatible server (warden serve,
// llama-server, vLLM, ...). Streams every request, times TTFT, inter-token gaps, TPOT and
// end-to-end, and reports percentiles, throughput and goodput under an SLO per concurrency
// level (or request rate), as a table, bench.json and bench.png. Every run is bounded by a
// per-request timeout and a total deadline.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "cli/commands.h"
#include "launch/common.h"
#include "tools/bench/client.h"
#include "tools/bench/report.h"
#include "tools/bench/runner.h"
#include "tools/bench/stats.h"
#include "tools/bench/workload.h"
#include "util/error.h"

namespace warden::cli {

namespace {

struct BenchOptions {
    std::string url, model, concurrency = "1", input_len = "128", output_len = "64",
                            workload = "fixed";
    std::string out = "bench-out", plot_script, python;
    double rate = 0, slo_ttft_ms = 0, slo_tpot_ms = 0, timeout_s = 120, max_duration_s = 600;
    int64_t requests = 16, shared_prefix = 0, turns = 4, seed = 0, warmup = 0;
    bool no_plot = false, respect_eos = false, quiet = false;
};

std::vector<int64_t> parse_levels(const std::string& s) {
    std::vector<int64_t> v;
    size_t i = 0;
    while (i <= s.size()) {
        const size_t j = std::min(s.find(',', i), s.size());
        const std::string part = s.substr(i, j - i);
        char* end = nullptr;
        const long long c = std::strtoll(part.c_str(), &end, 10);
        util::check(!part.empty() && end == part.c_str() + part.size() && c >= 1 && c <= 4096,
                    "--concurrency: '" + part + "' is not a number in 1..4096");
        v.push_back(c);
        i = j + 1;
    }
    return v;
}

std::filesystem::path exe_dir() {
    std::error_code ec;
    auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
    return ec ? std::filesystem::path(".") : p.parent_path();
}

std::string default_plot_script() {
    for (const auto& p : {exe_dir() / ".." / "bench" / "plot_bench.py",
                          std::filesystem::path("bench/plot_bench.py")})
        if (std::filesystem::exists(p)) return std::filesystem::weakly_canonical(p).string();
    return "bench/plot_bench.py";
}

std::string default_python() {
    if (const char* e = std::getenv("WARDEN_PYTHON")) return e;
    for (const auto& p :
         {exe_dir() / ".." / ".venv" / "bin" / "python", std::filesystem::path(".venv/bin/python")})
        if (std::filesystem::exists(p)) return std::filesystem::weakly_canonical(p).string();
    return "python3";
}

int run_bench(const BenchOptions& o) {
    using namespace tools::bench;
    util::check(o.timeout_s > 0, "--timeout-s must be positive");
    util::check(o.max_duration_s > 0, "--max-duration-s must be positive");
    util::check(o.rate >= 0, "--rate must be >= 0");
    util::check(o.requests >= 1, "--requests must be at least 1");
    util::check(o.shared_prefix >= 0, "--shared-prefix must be >= 0");
    util::check(o.warmup >= 0, "--warmup must be >= 0");
    const auto levels = parse_levels(o.concurrency);
    util::check(o.rate == 0 || levels.size() == 1,
                "--rate takes one --concurrency value (the in-flight cap)");
    WorkloadOptions wo;
    wo.kind = o.workload;
    wo.input = LenDist::parse(o.input_len, "--input-len");
    wo.output = LenDist::parse(o.output_len, "--output-len");
    wo.shared_prefix = o.shared_prefix;
    wo.turns = o.turns;
    wo.seed = static_cast<uint64_t>(o.seed);
    make_workload(wo, 1);  // checks the options before anything is sent

    const Endpoint ep = Endpoint::parse(o.url);
    ClientOptions co;
    co.timeout_s = o.timeout_s;
    co.ignore_eos = !o.respect_eos;
    co.model = o.model.empty() ? discover_model(ep, std::min(o.timeout_s, 10.0)) : o.model;
    if (co.model.empty()) co.model = "default";
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(o.max_duration_s));
    std::filesystem::create_directories(o.out);

    Slo slo{o.slo_ttft_ms, o.slo_tpot_ms};
    std::vector<LevelSummary> summaries;
    nlohmann::json jlevels = nlohmann::json::array();
    for (size_t li = 0; li < levels.size(); ++li) {
        const int64_t c = levels[li];
        // Fresh prompts for every level and for its warm-up (WorkloadOptions::variant): with the
        // same prompts, every level after the first would measure prefix-cache hits.
        WorkloadOptions wl = wo;
        if (o.warmup > 0) {
            wl.variant = 2 * li + 1;
            run_level(ep, co, make_workload(wl, std::min<int64_t>(o.warmup, o.requests)), c, 0,
                      static_cast<uint64_t>(o.seed), deadline);
        }
        wl.variant = 2 * li + 2;
        const auto reqs = make_workload(wl, o.requests);
        auto res = run_level(ep, co, reqs, c, o.rate, static_cast<uint64_t>(o.seed), deadline);
        auto s = summarize_level(res.records, res.duration_s, slo);
        s.concurrency = c;
        s.rate = o.rate;
        s.label =
            o.rate > 0 ? "rate=" + std::to_string(o.rate).substr(0, 6) : "c=" + std::to_string(c);
        if (!o.quiet)
            std::fprintf(stderr, "warden bench: %s: %lld ok, %lld errors, %.2f output tok/s\n",
                         s.label.c_str(), static_cast<long long>(s.ok),
                         static_cast<long long>(s.errors), s.output_tok_s);
        auto jl = to_json(s);
        jl["records"] = nlohmann::json::array();
        for (const auto& r : res.records) jl["records"].push_back(to_json(r));
        jlevels.push_back(std::move(jl));
        summaries.push_back(std::move(s));
    }
    nlohmann::json j = {{"tool", "warden bench"},
                        {"url", o.url},
                        {"model", co.model},
                        {"workload", o.workload},
                        {"input_len", o.input_len},
                        {"output_len", o.output_len},
                        {"shared_prefix", o.shared_prefix},
                        {"requests_per_level", o.requests},
                        {"rate", o.rate},
                        {"seed", o.seed},
                        {"timeout_s", o.timeout_s},
                        {"slo", {{"ttft_ms", o.slo_ttft_ms}, {"tpot_ms", o.slo_tpot_ms}}},
                        {"levels", jlevels}};
    const std::string json_path = (std::filesystem::path(o.out) / "bench.json").string();
    write_json(json_path, j);
    std::fputs(format_table(summaries).c_str(), stdout);
    std::printf("results: %s\n", json_path.c_str());
    if (!o.no_plot) {
        const std::string png = (std::filesystem::path(o.out) / "bench.png").string();
        const std::string why = render_plot(
            o.python.empty() ? default_python() : o.python,
            o.plot_script.empty() ? default_plot_script() : o.plot_script, json_path, png);
        if (why.empty())
            std::printf("plot: %s\n", png.c_str());
        else
            std::fprintf(stderr, "warden bench: no plot: %s\n", why.c_str());
    }
    std::fflush(stdout);
    int64_t ok = 0;
    for (const auto& s : summaries) ok += s.ok;
    if (ok == 0) {
        std::fprintf(stderr, "warden bench: error: every request failed (first: %s)\n",
                     summaries.empty() || summaries[0].error_samples.empty()
                         ? "?"
                         : summaries[0].error_samples[0].c_str());
        return 3;
    }
    return 0;
}

}  // namespace

void register_bench(CLI::App& app, int& rc) {
    auto o = std::make_shared<BenchOptions>();
    CLI::App* sub = app.add_subcommand(
        "bench", "load-test an OpenAI-compatible server (streaming; TTFT, TPOT, throughput)");
    sub->add_option("--url", o->url, "server base URL, e.g. http://127.0.0.1:8080")->required();
    sub->add_option("--model", o->model,
                    "model name to send (default: the first of GET /v1/models)");
    sub->add_option("--concurrency", o->concurrency,
                    "comma list of concurrent streams, one level each (default 1); "
                    "with --rate: the in-flight cap");
    sub->add_option("--rate", o->rate,
                    "open loop: Poisson arrivals at R requests/s instead of a closed loop");
    sub->add_option("--requests", o->requests, "requests per level (default 16)");
    sub->add_option("--input-len", o->input_len,
                    "prompt tokens: N, LO:HI or lognormal:MEDIAN:SIGMA[:MAX] (default 128)");
    sub->add_option("--output-len", o->output_len, "max_tokens: same forms (default 64)");
    sub->add_option("--shared-prefix", o->shared_prefix,
                    "tokens of a prefix shared by every prompt (agent: system prompt)");
    sub->add_option("--workload", o->workload, "fixed | longtail | agent (default fixed)")
        ->check(CLI::IsMember({"fixed", "longtail", "agent"}));
    sub->add_option("--turns", o->turns, "agent workload: turns per session (default 4)");
    sub->add_option("--slo-ttft-ms", o->slo_ttft_ms, "SLO bound on TTFT for goodput (0: none)");
    sub->add_option("--slo-tpot-ms", o->slo_tpot_ms, "SLO bound on TPOT for goodput (0: none)");
    sub->add_option("--seed", o->seed, "workload seed (default 0)");
    sub->add_option("--timeout-s", o->timeout_s, "per-request timeout in seconds (default 120)");
    sub->add_option("--max-duration-s", o->max_duration_s,
                    "deadline of the whole run in seconds (default 600)");
    sub->add_option("--warmup", o->warmup,
                    "requests sent before each level and not counted (default 0)");
    sub->add_option("--out", o->out,
                    "output directory for bench.json / bench.png (default bench-out)");
    sub->add_option("--plot-script", o->plot_script,
                    "plot script (default: bench/plot_bench.py of the source tree)");
    sub->add_option("--python", o->python,
                    "python with matplotlib (default: $WARDEN_PYTHON, the repo's .venv, python3)");
    sub->add_flag("--no-plot", o->no_plot, "do not render bench.png");
    sub->add_flag("--respect-eos", o->respect_eos,
                  "do not send ignore_eos (outputs may end before max_tokens)");
    sub->add_flag("-q,--quiet", o->quiet, "no progress lines on stderr");
    sub->callback([o, &rc] { rc = run_bench(*o); });
}

}  // namespace warden::cli
