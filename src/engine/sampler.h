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
    // What sample() draws from: the candidates as (probability, id). With top-k, top-p or min-p,
    // the survivors, most likely first (their probabilities may sum short of 1 after top-p);
    // otherwise every token, in vocabulary order (no sort). Greedy: the argmax alone with
    // probability 1. Same inputs and effects on `logits` as sample(); the reference stays valid
    // until the next call. Speculative verification and the draft proposers read it.
    const std::vector<std::pair<float, int32_t>>& distribution(std::span<float> logits,
                                                               std::span<const int32_t> history,
                                                               size_t n_prompt = 0);
    bool greedy() const { return p_.temperature <= 0.0f; }
    const SamplingParams& params() const { return p_; }

  private:
    // Frequency, presence and repetition penalties, in place.
    void apply_penalties(std::span<float> logits, std::span<const int32_t> history,
                         size_t n_prompt) const;
    // Whether top-k (below the vocabulary size n), top-p or min-p cut the candidates.
    bool truncates(size_t n) const;
    // scaled_, mx_, exps_ and sum_ for these logits and an empty walk order (higher scaled logit
    // first, then lower id); returns how many candidates of the walk order survive top-k, min-p
    // and top-p (every one without them). With top-k the walk order is its k best, sorted, and
    // the softmax is over them; otherwise it is built band by band by reach() only as far as a
    // walk goes, so no call sorts the whole vocabulary unless a walk reaches its far tail.
    size_t soften_and_cut(std::span<const float> logits);
    // Makes cand_[0..k] the first k + 1 candidates of the walk order; false past the last one.
    bool reach(size_t k);
    // The probability of the k-th candidate of the walk order, float(exp(s - max) / sum).
    float prob(size_t k) const;
    // A uniform double in [0, total), one draw of the generator.
    double uniform(double total);

    SamplingParams p_;
    std::mt19937_64 rng_;
    std::vector<std::pair<float, int32_t>> cand_;  // scratch: candidates (walk order or result)
    std::vector<float> scaled_;                    // scratch: logits / temperature
    std::vector<float> exps_;  // scratch: exp(scaled - max) (top-k: set for its k alone)
    float mx_ = 0.0f;          // max of scaled_
    // Sum of the candidates' exps_: every token's in vocabulary order, top-k's in walk order.
    double sum_ = 0.0;
    size_t band_ = 0;          // bands of the walk order built so far
    float band_upper_ = 0.0f;  // the next band's candidates lie below this
};

}  // namespace warden::engine
