#pragma once
// Drives one level of `warden bench`: a closed loop of `concurrency` streams, or an open
// loop of Poisson arrivals at `rate` requests/s (at most `concurrency` in flight), over a
// fixed list of requests, and returns one record per request. Always ends by `deadline`.
#include <vector>

#include "tools/bench/client.h"

namespace warden::tools::bench {

struct LevelResult {
    std::vector<RequestRecord> records;  // in request order
    double duration_s = 0;               // first send -> last finish
};

LevelResult run_level(const Endpoint& ep, const ClientOptions& co,
                      const std::vector<BenchRequest>& reqs, int64_t concurrency, double rate,
                      uint64_t seed, Clock::time_point deadline);

}  // namespace warden::tools::bench
