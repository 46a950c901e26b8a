#include "tools/eval/report.h"

#include <cmath>
#include <cstdio>

#include "util/error.h"

namespace warden::tools::eval {

PairedStats paired(const std::vector<double>& base, const std::vector<double>& test) {
    util::check(base.size() == test.size(), "eval: unpaired scores");
    PairedStats s;
    s.n = static_cast<int64_t>(base.size());
    if (s.n == 0) return s;
    double sb = 0, st = 0, sd = 0;
    for (size_t i = 0; i < base.size(); ++i) sb += base[i], st += test[i], sd += test[i] - base[i];
    const double n = static_cast<double>(s.n);
    s.base = sb / n;
    s.test = st / n;
    s.diff = sd / n;
    double var = 0;
    if (s.n > 1) {
        for (size_t i = 0; i < base.size(); ++i) {
            const double e = (test[i] - base[i]) - s.diff;
            var += e * e;
        }
        var /= n - 1;
    }
    const double half = 1.96 * std::sqrt(var / n);
    s.ci_lo = s.diff - half;
    s.ci_hi = s.diff + half;
    return s;
}

std::string format_task(const TaskResult& r) {
    std::string out = "== " + r.task + "\n";
    char line[512];
    std::snprintf(line, sizeof line, "%-36s %4s %10s %10s %10s  %-24s %s\n", "metric", "n", "base",
                  "test", "diff", "95% CI (normal approx.)", "verdict");
    out += line;
    for (const auto& m : r.metrics) {
        const auto s = paired(m.base, m.test);
        const bool worse = m.higher_is_better ? s.ci_hi < 0 : s.ci_lo > 0;
        const bool better = m.higher_is_better ? s.ci_lo > 0 : s.ci_hi < 0;
        char ci[64];
        std::snprintf(ci, sizeof ci, "[%+.4f, %+.4f]", s.ci_lo, s.ci_hi);
        std::snprintf(line, sizeof line, "%-36s %4lld %10.4f %10.4f %+10.4f  %-24s %s\n",
                      m.name.c_str(), static_cast<long long>(s.n), s.base, s.test, s.diff, ci,
                      worse    ? "WORSE"
                      : better ? "better"
                               : "no significant change");
        out += line;
    }
    for (const auto& n : r.notes) out += "  note: " + n + "\n";
    return out;
}

nlohmann::json to_json(const TaskResult& r) {
    nlohmann::json j = {{"task", r.task}, {"metrics", nlohmann::json::array()}, {"notes", r.notes}};
    for (const auto& m : r.metrics) {
        const auto s = paired(m.base, m.test);
        j["metrics"].push_back({{"name", m.name},
                                {"higher_is_better", m.higher_is_better},
                                {"n", s.n},
                                {"base", s.base},
                                {"test", s.test},
                                {"diff", s.diff},
                                {"ci95", {s.ci_lo, s.ci_hi}},
                                {"base_items", m.base},
                                {"test_items", m.test}});
    }
    return j;
}

}  // namespace warden::tools::eval
