#pragma once
// The request's output controls on the logits of its next token, before the sampler:
// logit_bias (OpenAI: added to the token's logit; +-100 forces or bans it) and min_tokens
// (vLLM: the stop ids cannot be sampled until that many tokens were generated).
#include <cstdint>
#include <span>

#include "engine/request.h"

namespace warden::engine {

// logits: [vocab], modified in place. generated: tokens sampled so far.
void apply_logit_processors(const Request& req, int64_t generated, std::span<float> logits);

}  // namespace warden::engine
