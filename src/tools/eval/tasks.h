#pragma once
// The quality tasks of `warden eval`. Each runs the base and the test engine on the same
// items and returns paired per-item scores per metric. Items come from data/eval/ (shipped
// with the repo) or are built deterministically from it (retrieval haystacks).
#include <functional>
#include <string>
#include <vector>

#include "tools/eval/engine.h"

namespace warden::tools::eval {

struct Metric {
    std::string name;
    bool higher_is_better = true;
    std::vector<double> base, test;  // per item, paired
};

struct TaskResult {
    std::string task;
    std::vector<Metric> metrics;
    std::vector<std::string> notes;  // e.g. a sample of outputs that differ
};

struct TaskContext {
    EvalEngine& base;
    EvalEngine& test;
    std::string data_dir;
    int64_t limit = 0;  // 0: every item; else at most this many items per task
};

// Known task names, in default order.
const std::vector<std::string>& task_names();
// Default tasks (deterministic: base == test gives exactly zero difference). "latency" is
// opt-in since wall time differs between any two runs.
const std::vector<std::string>& default_tasks();
// Throws util::Error naming the known tasks when `name` is not one.
void check_task_name(const std::string& name);
TaskResult run_task(const std::string& name, TaskContext& ctx);

// Helpers shared by the task files.
std::vector<std::string> read_jsonl_field(const std::string& path, const std::string& field);
std::string read_text(const std::string& path);
double distinct_ngram_ratio(const std::vector<int32_t>& toks, size_t n);
bool contains_valid_json(const std::string& s);
bool balanced_code(const std::string& s);

TaskResult task_kl(TaskContext& ctx);
TaskResult task_retrieval(TaskContext& ctx);
TaskResult task_json(TaskContext& ctx);
TaskResult task_code(TaskContext& ctx);
TaskResult task_tools(TaskContext& ctx);
TaskResult task_copy(TaskContext& ctx);
TaskResult task_drift(TaskContext& ctx);
TaskResult task_latency(TaskContext& ctx);

}  // namespace warden::tools::eval
