#pragma once
// Speculative rejection sampling (Leviathan et al. / Chen et al.): a draft token d proposed
// from a draft distribution q is kept with probability min(1, p(d) / q(d)), where p is the
// target's distribution; when it is not, the replacement is drawn from norm(max(0, p - q)).
// The emitted token is then distributed exactly as p, whatever q is. A proposer without a
// distribution (n-gram lookup) proposes with a point mass: q(d) = 1.
//
// Distributions are sparse lists of (weight, id) as Sampler::distribution returns them: the
// weights need not sum to 1 (they are normalized here), ids absent have weight 0.
#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

namespace warden::engine::speculative {

using Dist = std::span<const std::pair<float, int32_t>>;

struct Verdict {
    bool accepted = false;
    int32_t token = 0;  // the draft when accepted, else the replacement
};

// One verification. q empty: a point mass at `draft`. u: a uniform draw in [0, 1) for the
// acceptance test; rng supplies the replacement draw (used only on rejection).
Verdict verify_token(Dist p, Dist q, int32_t draft, double u, std::mt19937_64& rng);

// A draw from p (the bonus token after every draft was accepted).
int32_t draw(Dist p, std::mt19937_64& rng);

// A uniform double in [0, 1) from 53 random bits (portable across standard libraries).
inline double uniform01(std::mt19937_64& rng) {
    return static_cast<double>(rng() >> 11) * (1.0 / 9007199254740992.0);
}

}  // namespace warden::engine::speculative
