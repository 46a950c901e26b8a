#pragma once
// Sampling under a structured-output constraint: the token drawn is one the constraint allows
// (stop tokens only where the text is complete), and the constraint advances by it.
#include <cstdint>
#include <span>
#include <vector>

#include "constrain/constraint.h"
#include "engine/sampler.h"

namespace warden::engine {

// logits: the logits to sample from (after the request's logit processors); used as scratch.
// Returns the token, already accepted by `c`, or -1 when no token is allowed (the grammar
// allows nothing the vocabulary can spell, or only stop tokens min_tokens still bans): the
// sequence should end.
//
// Where the sampler draws from the whole distribution (greedy, or temperature without top-k,
// top-p or min-p), the unmasked draw is tried first and kept when allowed: for greedy the
// argmax of the masked logits is then the same token, and otherwise keeping an allowed draw
// and redrawing from the masked logits on refusal is rejection sampling, which yields exactly
// the masked distribution. Most steps then cost one check of the token's bytes instead of a
// vocabulary mask. Truncating samplers (top-k/top-p/min-p) are not equivalent under that
// order, so they always draw from the masked logits.
int32_t sample_constrained(Sampler& sampler, constrain::Constraint& c, std::vector<float>& logits,
                           std::span<const int32_t> stop_ids, std::span<const int32_t> history,
                           size_t n_prompt);

}  // namespace warden::engine
