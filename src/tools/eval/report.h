#pragma once
// Paired statistics and the per-task tables of `warden eval`.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tools/eval/tasks.h"

namespace warden::tools::eval {

struct PairedStats {
    int64_t n = 0;
    double base = 0, test = 0, diff = 0;  // means; diff = test - base
    double ci_lo = 0, ci_hi = 0;          // 95% interval of the mean difference
};
// Normal approximation over items: diff +- 1.96 * sd(test_i - base_i) / sqrt(n) (sample sd,
// n-1); with one item the interval is the point. Exactly zero when every pair is equal.
PairedStats paired(const std::vector<double>& base, const std::vector<double>& test);

std::string format_task(const TaskResult& r);
nlohmann::json to_json(const TaskResult& r);

}  // namespace warden::tools::eval
