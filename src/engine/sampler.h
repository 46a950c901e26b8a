#pragma once
// Token sampling: repetition penalty, temperature, top-k, top-p, min-p, then a draw from a
// seeded generator (same seed + same logits = same token). temperature <= 0 is greedy.
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace warden::engine {

struct SamplingParams {
    float temperature = 0.8f;
    int32_t top_k = 40;          // <= 0: disabled
    float top_p = 0.95f;         // >= 1: disabled
    float min_p = 0.05f;         // <= 0: disabled
    float repetition_penalty = 1.0f;  // 1: disabled; applies to every token seen so far
    uint64_t seed = 0;

    // Throws util::Error naming the first out-of-range parameter.
    void validate() const;
};

class Sampler {
public:
    explicit Sampler(const SamplingParams& p);
    // logits: [vocab], modified in place. history: prompt + generated ids (for penalties).
    int32_t sample(std::span<float> logits, std::span<const int32_t> history);
    static int32_t argmax(std::span<const float> logits);

private:
    SamplingParams p_;
    std::mt19937_64 rng_;
    std::vector<std::pair<float, int32_t>> cand_;  // scratch
};

}  // namespace warden::engine
