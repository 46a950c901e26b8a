#pragma once
// Token sampling: repetition penalty, frequency/presence penalties (OpenAI semantics, over the
// generated tokens), temperature, top-k, top-p, min-p, then a draw from a seeded generator
// (same seed + same logits = same token). temperature <= 0 is greedy. Log-probabilities of the
// model's distribution (log-softmax of the raw logits) for the logprobs API.
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace warden::engine {

struct SamplingParams {
    float temperature = 0.8f;
    int32_t top_k = 40;               // <= 0: disabled
    float top_p = 0.95f;              // >= 1: disabled
    float min_p = 0.05f;              // <= 0: disabled
    float repetition_penalty = 1.0f;  // 1: disabled; applies to every token seen so far
    float frequency_penalty = 0.0f;   // [-2, 2]: logit -= f * count(token in generated output)
    float presence_penalty = 0.0f;    // [-2, 2]: logit -= p * (token in generated output)
    uint64_t seed = 0;

    // Throws util::Error naming the first out-of-range parameter.
    void validate() const;
};

// log p(token) under softmax(logits) and the `top` most likely (id, log p), best first (ties:
// lower id first). logits: [vocab], unmodified.
struct TokenLogprobs {
    float logprob = 0.0f;
    int32_t rank = 1;  // 1 + how many tokens have a larger logit
    std::vector<std::pair<int32_t, float>> top;
};
TokenLogprobs token_logprobs(std::span<const float> logits, int32_t token, int32_t top);

class Sampler {
  public:
    explicit Sampler(const SamplingParams& p);
    // logits: [vocab], modified in place. history: prompt + generated ids (for the repetition
    // penalty); the frequency/presence penalties count history[n_prompt..] (generated only).
    int32_t sample(std::span<float> logits, std::span<const int32_t> history, size_t n_prompt = 0);
    static int32_t argmax(std::span<const float> logits);
    // What sample() draws from: the surviving candidates as (probability, id), most likely
    // first, probabilities as sample() weighs them (their sum may fall short of 1 after top-p).
    // Greedy: the argmax alone with probability 1. Same inputs and effects on `logits` as
    // sample(); the reference stays valid until the next call. Speculative verification reads it.
    const std::vector<std::pair<float, int32_t>>& distribution(std::span<float> logits,
                                                               std::span<const int32_t> history,
                                                               size_t n_prompt = 0);
    bool greedy() const { return p_.temperature <= 0.0f; }
    const SamplingParams& params() const { return p_; }

  private:
    // Frequency, presence and repetition penalties, in place.
    void apply_penalties(std::span<float> logits, std::span<const int32_t> history,
                         size_t n_prompt) const;
    // distribution() after the penalties, temperature > 0: every candidate sorted (top-k: the k).
    const std::vector<std::pair<float, int32_t>>& weigh(std::span<const float> logits);
    // sample() without top-k: the same draw with only the likely head of the vocabulary sorted.
    int32_t sample_whole_vocabulary(std::span<const float> logits);
    // A uniform double in [0, total), one draw of the generator.
    double uniform(double total);

    SamplingParams p_;
    std::mt19937_64 rng_;
    std::vector<std::pair<float, int32_t>> cand_;  // scratch
    std::vector<float> scaled_;                    // scratch: logits / temperature
    std::vector<float> exps_;                      // scratch: exp(scaled - max)
};

}  // namespace warden::engine
