#pragma once
// Summary statistics of one `warden bench` level (a concurrency or a request rate).
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tools/bench/client.h"

namespace warden::tools::bench {

struct Dist {
    int64_t n = 0;
    double mean = 0, p50 = 0, p90 = 0, p99 = 0, max = 0;
};
// Percentiles by linear interpolation between closest ranks (numpy's default).
Dist summarize(std::vector<double> v);
double percentile(const std::vector<double>& sorted, double q);

struct Slo {
    double ttft_ms = 0;  // 0: no bound
    double tpot_ms = 0;
};

struct LevelSummary {
    std::string label;  // "c=8" or "rate=2"
    int64_t concurrency = 0;
    double rate = 0;
    int64_t requests = 0, ok = 0, errors = 0;
    double duration_s = 0;  // first send -> last finish
    int64_t input_tokens = 0, output_tokens = 0, cached_tokens = 0;
    int64_t spec_proposed = 0, spec_accepted = 0;  // speculative decoding's draft tokens
    double output_tok_s = 0, total_tok_s = 0, req_s = 0;
    int64_t slo_met = 0;
    double goodput_req_s = 0;  // requests per second that finished and met the SLO
    Dist ttft, tpot, itl, e2e, headers, wait;
    std::vector<std::string> error_samples;  // the first few distinct errors
};

LevelSummary summarize_level(const std::vector<RequestRecord>& recs, double duration_s,
                             const Slo& slo);
nlohmann::json to_json(const Dist& d);
nlohmann::json to_json(const LevelSummary& s);
nlohmann::json to_json(const RequestRecord& r);

}  // namespace warden::tools::bench
