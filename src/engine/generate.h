#pragma once
// Single-sequence generation on the contiguous cache: prefill the prompt, then sample one
// token per step until n tokens or a stop token. `warden run` and `warden logits --greedy`
// use it; the continuous-batching engine supersedes it for serving.
#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

#include "engine/sampler.h"
#include "model/transformer.h"

namespace warden::engine {

struct GenerateTimings {
    int64_t prompt_tokens = 0;
    int64_t gen_tokens = 0;
    double prefill_ms = 0;  // prompt forward pass, including the first sampled token
    double decode_ms = 0;   // all later steps
};

struct GenerateOptions {
    int64_t max_new_tokens = 64;
    bool ignore_eos = false;
    std::vector<int32_t> stop_ids;
};

// Calls on_token(id) for each generated token (including a final stop token, which is not
// counted as text by callers). Returns the generated ids.
std::vector<int32_t> generate(model::Transformer& tf, model::ContiguousKvCache& cache,
                              const std::vector<int32_t>& prompt, const GenerateOptions& opts,
                              Sampler& sampler, const std::function<void(int32_t)>& on_token,
                              GenerateTimings* timings);

}  // namespace warden::engine
