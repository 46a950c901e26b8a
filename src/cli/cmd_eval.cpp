// `warden eval`: quality of a test configuration (weight / KV formats) against a base
// configuration of the same model, in-process, on tasks shipped in data/eval/: KL divergence
// and top-1 agreement, planted-fact retrieval, JSON/code validity, tool selection, exact
// copies of mixed-script text, numbers and dates, and drift in long generations. Prints one
// table per task (base, test, difference, 95% interval) and optionally writes JSON.
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "cli/commands.h"
#include "launch/common.h"
#include "tools/eval/config.h"
#include "tools/eval/engine.h"
#include "tools/eval/report.h"
#include "tools/eval/tasks.h"
#include "util/error.h"

namespace warden::cli {

namespace {

struct EvalOptions {
    std::string model, base, test, tasks, data_dir, json_out;
    int threads = 0;
    int64_t limit = 0;
};

std::string default_data_dir() {
    std::error_code ec;
    const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (!ec) {
        const auto p = exe.parent_path() / ".." / "data" / "eval";
        if (std::filesystem::exists(p / "text.txt"))
            return std::filesystem::weakly_canonical(p).string();
    }
    return "data/eval";
}

int run_eval(const EvalOptions& o) {
    const auto base_cfg = tools::eval::parse_config(o.base, "--base");
    const auto test_cfg = tools::eval::parse_config(o.test, "--test");
    std::vector<std::string> tasks;
    if (o.tasks.empty()) {
        tasks = tools::eval::default_tasks();
    } else {
        size_t i = 0;
        while (i <= o.tasks.size()) {
            const size_t j = std::min(o.tasks.find(',', i), o.tasks.size());
            tasks.push_back(o.tasks.substr(i, j - i));
            i = j + 1;
        }
        for (const auto& t : tasks) tools::eval::check_task_name(t);
    }
    util::check(o.limit >= 0, "--limit must be >= 0");
    const std::string data = o.data_dir.empty() ? default_data_dir() : o.data_dir;
    util::check(std::filesystem::exists(data + "/text.txt"),
                "eval: no task data in '" + data + "' (see --data)");
    util::ThreadPool pool(o.threads);
    tools::eval::EvalEngine base(o.model, base_cfg, pool);
    tools::eval::EvalEngine test(o.model, test_cfg, pool);
    tools::eval::TaskContext ctx{base, test, data, o.limit};
    std::printf("warden eval: model %s\nbase: %s\ntest: %s\n\n", o.model.c_str(), o.base.c_str(),
                o.test.c_str());
    nlohmann::json all = {{"model", o.model},
                          {"base", o.base},
                          {"test", o.test},
                          {"limit", o.limit},
                          {"ci", "95%, normal approximation of the paired mean difference"},
                          {"tasks", nlohmann::json::array()}};
    for (const auto& t : tasks) {
        const auto r = tools::eval::run_task(t, ctx);
        std::fputs((tools::eval::format_task(r) + "\n").c_str(), stdout);
        std::fflush(stdout);
        all["tasks"].push_back(tools::eval::to_json(r));
    }
    if (!o.json_out.empty()) {
        std::ofstream f(o.json_out, std::ios::binary);
        util::check(static_cast<bool>(f), "cannot write '" + o.json_out + "'");
        // Generated texts may end inside a UTF-8 sequence (a token cut); write U+FFFD there
        // rather than fail the whole report.
        f << all.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    }
    return 0;
}

}  // namespace

void register_eval(CLI::App& app, int& rc) {
    auto o = std::make_shared<EvalOptions>();
    CLI::App* sub = app.add_subcommand(
        "eval", "quality of a test configuration against a base one (tasks in data/eval)");
    sub->add_option("-m,--model", o->model, "GGUF file or Hugging Face model directory")
        ->required();
    sub->add_option("--base", o->base, "base configuration, e.g. weights=bf16,kv=bf16")->required();
    sub->add_option("--test", o->test, "test configuration, e.g. weights=int4-g32,kv=fp8_e4m3")
        ->required();
    sub->add_option("--tasks", o->tasks,
                    "comma list of tasks (default: kl,retrieval,json,code,tools,copy,drift; "
                    "also: latency)");
    sub->add_option("--limit", o->limit, "at most N items per task (default: all)");
    sub->add_option("--data", o->data_dir,
                    "task data directory (default: data/eval of the source tree)");
    sub->add_option("--json", o->json_out, "also write the results as JSON to this file");
    sub->add_option("-t,--threads", o->threads, "worker threads (default: all cores)")
        ->check(CLI::Range(0, 1024));
    sub->callback([o, &rc] { rc = run_eval(*o); });
}

}  // namespace warden::cli
