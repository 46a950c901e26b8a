#include "engine/speculative/spec_metrics.h"

#include <cstdio>

namespace warden::engine::speculative {

void SpecMetrics::observe(const Timing& t) {
    if (t.spec_proposed <= 0) return;
    proposed_ += t.spec_proposed;
    accepted_ += t.spec_accepted;
    const double rate = static_cast<double>(t.spec_accepted) / static_cast<double>(t.spec_proposed);
    size_t i = 0;
    while (i < kBounds.size() && rate > kBounds[i]) ++i;
    if (i < kBounds.size()) ++buckets_[i];
    ++requests_;
    sum_ += rate;
}

void SpecMetrics::render(std::string& o) const {
    if (requests_ == 0) return;
    o += "# HELP warden_spec_proposed_tokens_total draft tokens the target verified\n"
         "# TYPE warden_spec_proposed_tokens_total counter\n"
         "warden_spec_proposed_tokens_total " +
         std::to_string(proposed_) + "\n";
    o += "# HELP warden_spec_accepted_tokens_total draft tokens the target accepted\n"
         "# TYPE warden_spec_accepted_tokens_total counter\n"
         "warden_spec_accepted_tokens_total " +
         std::to_string(accepted_) + "\n";
    o += "# HELP warden_spec_acceptance_rate accepted / proposed draft tokens per request\n"
         "# TYPE warden_spec_acceptance_rate histogram\n";
    int64_t cum = 0;
    char buf[64];
    for (size_t i = 0; i < kBounds.size(); ++i) {
        cum += buckets_[i];
        std::snprintf(buf, sizeof buf, "%.1f", kBounds[i]);
        o += std::string("warden_spec_acceptance_rate_bucket{le=\"") + buf + "\"} " +
             std::to_string(cum) + "\n";
    }
    o += "warden_spec_acceptance_rate_bucket{le=\"+Inf\"} " + std::to_string(requests_) + "\n";
    std::snprintf(buf, sizeof buf, "%.9g", sum_);
    o += std::string("warden_spec_acceptance_rate_sum ") + buf + "\n";
    o += "warden_spec_acceptance_rate_count " + std::to_string(requests_) + "\n";
}

}  // namespace warden::engine::speculative
