#include "engine/speculative/rejection.h"

#include <algorithm>

#include "util/error.h"

namespace warden::engine::speculative {

namespace {

double total(Dist d) {
    double t = 0.0;
    for (const auto& [w, id] : d) t += w;
    return t;
}

double weight_of(Dist d, int32_t id) {
    for (const auto& [w, i] : d)
        if (i == id) return w;
    return 0.0;
}

}  // namespace

int32_t draw(Dist p, std::mt19937_64& rng) {
    util::check(!p.empty(), "speculative: empty target distribution");
    const double u = uniform01(rng) * total(p);
    double acc = 0.0;
    for (const auto& [w, id] : p) {
        acc += w;
        if (u < acc) return id;
    }
    return p.back().second;
}

Verdict verify_token(Dist p, Dist q, int32_t draft, double u, std::mt19937_64& rng) {
    util::check(!p.empty(), "speculative: empty target distribution");
    const double p_sum = total(p);
    const double q_sum = q.empty() ? 1.0 : total(q);
    const double pd = weight_of(p, draft) / p_sum;
    const double qd = q.empty() ? 1.0 : weight_of(q, draft) / q_sum;
    // A draft the proposer itself gave no weight cannot come from q; never accept it blindly.
    if (qd > 0.0 && u * qd < pd) return {true, draft};
    // Residual: max(0, p - q) over p's support (q's mass outside p's support cancels).
    std::vector<std::pair<int32_t, double>> q_by_id;  // q sorted by id, for lookups
    q_by_id.reserve(q.size());
    for (const auto& [w, id] : q) q_by_id.emplace_back(id, w / q_sum);
    // A whole-vocabulary q comes in id order already (Sampler::distribution).
    if (!std::is_sorted(q_by_id.begin(), q_by_id.end())) std::sort(q_by_id.begin(), q_by_id.end());
    auto q_of = [&](int32_t id) {
        if (q.empty()) return id == draft ? 1.0 : 0.0;
        const auto it =
            std::lower_bound(q_by_id.begin(), q_by_id.end(), std::pair<int32_t, double>{id, -1.0});
        return it != q_by_id.end() && it->first == id ? it->second : 0.0;
    };
    std::vector<std::pair<double, int32_t>> r;
    r.reserve(p.size());
    double r_sum = 0.0;
    for (const auto& [w, id] : p) {
        const double x = std::max(0.0, w / p_sum - q_of(id));
        if (x > 0.0) {
            r.emplace_back(x, id);
            r_sum += x;
        }
    }
    if (r.empty()) return {true, draft};  // p == q up to rounding: acceptance was certain
    const double v = uniform01(rng) * r_sum;
    double acc = 0.0;
    for (const auto& [x, id] : r) {
        acc += x;
        if (v < acc) return {false, id};
    }
    return {false, r.back().second};
}

}  // namespace warden::engine::speculative
