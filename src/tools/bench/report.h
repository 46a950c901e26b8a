#pragma once
// Output of `warden bench`: a text table on stdout, bench.json and (through
// bench/plot_bench.py and matplotlib, when available) bench.png in the output directory.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tools/bench/stats.h"

namespace warden::tools::bench {

std::string format_table(const std::vector<LevelSummary>& levels);
void write_json(const std::string& path, const nlohmann::json& j);
// Runs `python script json png`; returns "" on success, else why no plot was made.
std::string render_plot(const std::string& python, const std::string& script,
                        const std::string& json_path, const std::string& png_path);

}  // namespace warden::tools::bench
