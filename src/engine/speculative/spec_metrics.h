#pragma once
// Prometheus metrics of speculative decoding: draft tokens proposed and accepted (counters) and
// a histogram of each finished request's acceptance rate. Rendered only once a request has had
// drafts verified, so a server with --spec off shows none. Not thread-safe: engine::Metrics
// calls it under its own lock.
#include <array>
#include <cstdint>
#include <string>

#include "engine/request.h"

namespace warden::engine::speculative {

class SpecMetrics {
  public:
    static constexpr std::array<double, 10> kBounds = {0.1, 0.2, 0.3, 0.4, 0.5,
                                                       0.6, 0.7, 0.8, 0.9, 1.0};
    void observe(const Timing& t);
    void render(std::string& out) const;

  private:
    int64_t proposed_ = 0, accepted_ = 0, requests_ = 0;
    std::array<int64_t, kBounds.size()> buckets_{};
    double sum_ = 0;
};

}  // namespace warden::engine::speculative
