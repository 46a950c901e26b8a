#include "tools/bench/report.h"

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "util/error.h"

namespace warden::tools::bench {

namespace {

std::string fmt(const char* f, double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, f, v);
    return buf;
}

std::string shell_quote(const std::string& s) {
    std::string q = "'";
    for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
}

}  // namespace

std::string format_table(const std::vector<LevelSummary>& levels) {
    std::string t;
    char line[512];
    std::snprintf(line, sizeof line, "%-10s %5s %4s %9s %8s %7s %9s %9s %9s %9s %9s %9s %9s\n",
                  "level", "ok", "err", "out tok/s", "req/s", "good/s", "TTFT p50", "TTFT p90",
                  "TTFT p99", "TPOT p50", "TPOT p99", "ITL p99", "E2E p50");
    t += line;
    for (const auto& s : levels) {
        std::snprintf(
            line, sizeof line, "%-10s %5lld %4lld %9s %8s %7s %9s %9s %9s %9s %9s %9s %9s\n",
            s.label.c_str(), static_cast<long long>(s.ok), static_cast<long long>(s.errors),
            fmt("%.2f", s.output_tok_s).c_str(), fmt("%.3f", s.req_s).c_str(),
            fmt("%.3f", s.goodput_req_s).c_str(), fmt("%.1f", s.ttft.p50).c_str(),
            fmt("%.1f", s.ttft.p90).c_str(), fmt("%.1f", s.ttft.p99).c_str(),
            fmt("%.2f", s.tpot.p50).c_str(), fmt("%.2f", s.tpot.p99).c_str(),
            fmt("%.2f", s.itl.p99).c_str(), fmt("%.1f", s.e2e.p50).c_str());
        t += line;
    }
    for (const auto& s : levels)
        if (s.spec_proposed > 0) {  // speculative decoding on the server
            std::snprintf(line, sizeof line,
                          "%-10s speculative: %lld of %lld draft tokens accepted (%.1f%%)\n",
                          s.label.c_str(), static_cast<long long>(s.spec_accepted),
                          static_cast<long long>(s.spec_proposed),
                          100.0 * static_cast<double>(s.spec_accepted) /
                              static_cast<double>(s.spec_proposed));
            t += line;
        }
    t += "(latencies in ms; good/s = requests/s meeting the SLO)\n";
    return t;
}

void write_json(const std::string& path, const nlohmann::json& j) {
    std::ofstream f(path, std::ios::binary);
    util::check(static_cast<bool>(f), "cannot write '" + path + "'");
    f << j.dump(1) << "\n";
    util::check(static_cast<bool>(f), "cannot write '" + path + "'");
}

std::string render_plot(const std::string& python, const std::string& script,
                        const std::string& json_path, const std::string& png_path) {
    if (!std::filesystem::exists(script))
        return "plot script '" + script + "' not found (see --plot-script)";
    const std::string cmd = shell_quote(python) + " " + shell_quote(script) + " " +
                            shell_quote(json_path) + " " + shell_quote(png_path) + " 1>&2";
    const int st = std::system(cmd.c_str());
    if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        return "plot script failed (is matplotlib installed for " + python + "?)";
    return "";
}

}  // namespace warden::tools::bench
