#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>
#include <unordered_set>

#include "kernels/ops.h"
#include "util/error.h"

namespace warden::engine {

void SamplingParams::validate() const {
    util::check(std::isfinite(temperature) && temperature >= 0.0f && temperature <= 100.0f,
                "temperature must be in [0, 100]");
    util::check(top_k >= 0, "top-k must be >= 0");
    util::check(std::isfinite(top_p) && top_p > 0.0f && top_p <= 1.0f, "top-p must be in (0, 1]");
    util::check(std::isfinite(min_p) && min_p >= 0.0f && min_p <= 1.0f, "min-p must be in [0, 1]");
    util::check(std::isfinite(repetition_penalty) && repetition_penalty > 0.0f &&
                    repetition_penalty <= 10.0f,
                "repetition penalty must be in (0, 10]");
    util::check(
        std::isfinite(frequency_penalty) && frequency_penalty >= -2.0f && frequency_penalty <= 2.0f,
        "frequency_penalty must be in [-2, 2]");
    util::check(
        std::isfinite(presence_penalty) && presence_penalty >= -2.0f && presence_penalty <= 2.0f,
        "presence_penalty must be in [-2, 2]");
}

TokenLogprobs token_logprobs(std::span<const float> logits, int32_t token, int32_t top) {
    TokenLogprobs r;
    if (logits.empty()) return r;
    float mx = logits[0];
    for (float l : logits) mx = std::max(mx, l);
    double sum = 0.0;
    for (float l : logits) sum += std::exp(static_cast<double>(l) - mx);
    const double lse = static_cast<double>(mx) + std::log(sum);
    if (token >= 0 && static_cast<size_t>(token) < logits.size()) {
        const float lt = logits[static_cast<size_t>(token)];
        r.logprob = static_cast<float>(static_cast<double>(lt) - lse);
        for (float l : logits) r.rank += l > lt ? 1 : 0;
    }
    const size_t k = std::min(static_cast<size_t>(std::max(top, 0)), logits.size());
    if (k == 0) return r;
    std::vector<int32_t> ids(logits.size());
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
    std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k), ids.end(),
                      [&](int32_t a, int32_t b) {
                          const float la = logits[static_cast<size_t>(a)],
                                      lb = logits[static_cast<size_t>(b)];
                          return la > lb || (la == lb && a < b);
                      });
    for (size_t i = 0; i < k; ++i)
        r.top.emplace_back(
            ids[i],
            static_cast<float>(static_cast<double>(logits[static_cast<size_t>(ids[i])]) - lse));
    return r;
}

Sampler::Sampler(const SamplingParams& p) : p_(p), rng_(p.seed) {
    p_.validate();
}

int32_t Sampler::argmax(std::span<const float> logits) {
    // First maximum wins, as in torch.argmax, so ties resolve like the reference (kernels/ops.h;
    // a vocabulary fits int32).
    return static_cast<int32_t>(
        kernels::argmax(logits.data(), static_cast<int64_t>(logits.size())));
}

namespace {

// The walk order of the candidates: higher (scaled) logit first, then lower id.
bool by_logit(const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
}

// Candidates are sorted band by band, as a walk reaches them: scaled logits within 4 of the
// maximum first (probability at least e^-4 of the most likely token's), then within 8, 16, then
// the rest. Every candidate of a band ranks below every candidate of the bands before it.
constexpr float kBandWidths[] = {4.0f, 8.0f, 16.0f, std::numeric_limits<float>::infinity()};

}  // namespace

void Sampler::apply_penalties(std::span<float> logits, std::span<const int32_t> history,
                              size_t n_prompt) const {
    if (p_.frequency_penalty != 0.0f || p_.presence_penalty != 0.0f) {
        // OpenAI: mu[j] -= c[j] * frequency_penalty + (c[j] > 0) * presence_penalty, c over the
        // output.
        std::unordered_map<int32_t, int32_t> count;
        for (size_t i = std::min(n_prompt, history.size()); i < history.size(); ++i)
            ++count[history[i]];
        for (const auto& [id, c] : count) {
            if (id < 0 || static_cast<size_t>(id) >= logits.size()) continue;
            logits[static_cast<size_t>(id)] -=
                static_cast<float>(c) * p_.frequency_penalty + p_.presence_penalty;
        }
    }
    if (p_.repetition_penalty != 1.0f) {
        // CTRL-style penalty (as llama.cpp and transformers): shrink positive logits, grow
        // negative ones, once per distinct token.
        std::unordered_set<int32_t> seen(history.begin(), history.end());
        for (int32_t id : seen) {
            if (id < 0 || static_cast<size_t>(id) >= logits.size()) continue;
            float& l = logits[static_cast<size_t>(id)];
            l = l > 0 ? l / p_.repetition_penalty : l * p_.repetition_penalty;
        }
    }
}

double Sampler::uniform(double total) {
    // 53 random bits -> uniform double in [0, 1): portable, unlike std::uniform_real_distribution.
    return static_cast<double>(rng_() >> 11) * (1.0 / 9007199254740992.0) * total;
}

int32_t Sampler::sample(std::span<float> logits, std::span<const int32_t> history,
                        size_t n_prompt) {
    apply_penalties(logits, history, n_prompt);
    if (p_.temperature <= 0.0f) return argmax(logits);
    // The candidates in walk order, sorted only as far as the walk goes.
    const size_t kept = soften_and_cut(logits);
    double total = 0.0;
    if (truncates(logits.size())) {
        for (size_t k = 0; k < kept; ++k) total += prob(k);
    } else {
        for (size_t i = 0; i < logits.size(); ++i) total += static_cast<float>(exps_[i] / sum_);
    }
    const double u = uniform(total);
    double acc = 0.0;
    size_t k = 0;
    for (; k < kept && reach(k); ++k) {
        acc += prob(k);
        if (u < acc) return cand_[k].second;
    }
    return cand_[k - 1].second;
}

const std::vector<std::pair<float, int32_t>>& Sampler::distribution(
    std::span<float> logits, std::span<const int32_t> history, size_t n_prompt) {
    apply_penalties(logits, history, n_prompt);
    if (p_.temperature <= 0.0f) {
        cand_.assign(1, {1.0f, argmax(logits)});
        return cand_;
    }
    const size_t n = logits.size();
    const size_t kept = soften_and_cut(logits);
    if (!truncates(n)) {  // every token, in vocabulary order: no sort
        cand_.resize(n);
        for (size_t i = 0; i < n; ++i)
            cand_[i] = {static_cast<float>(exps_[i] / sum_), static_cast<int32_t>(i)};
        return cand_;
    }
    for (size_t k = 0; k < kept; ++k) cand_[k].first = prob(k);
    cand_.resize(kept);
    return cand_;
}

bool Sampler::truncates(size_t n) const {
    return (p_.top_k > 0 && static_cast<size_t>(p_.top_k) < n) || p_.min_p > 0.0f ||
           p_.top_p < 1.0f;
}

size_t Sampler::soften_and_cut(std::span<const float> logits) {
    const size_t n = logits.size();
    scaled_.resize(n);
    exps_.resize(n);
    mx_ = -std::numeric_limits<float>::infinity();
    for (size_t i = 0; i < n; ++i) {
        scaled_[i] = logits[i] / p_.temperature;
        mx_ = std::max(mx_, scaled_[i]);
    }
    cand_.clear();
    sum_ = 0.0;
    size_t kept = n;
    if (p_.top_k > 0 && static_cast<size_t>(p_.top_k) < n) {
        // The k best are the whole walk order, and the softmax is over them alone (summed in that
        // order).
        kept = static_cast<size_t>(p_.top_k);
        cand_.reserve(n);
        for (size_t i = 0; i < n; ++i) cand_.emplace_back(scaled_[i], static_cast<int32_t>(i));
        std::partial_sort(cand_.begin(), cand_.begin() + static_cast<std::ptrdiff_t>(kept),
                          cand_.end(), by_logit);
        cand_.resize(kept);
        for (const auto& c : cand_) {
            const float e = std::exp(c.first - mx_);
            exps_[static_cast<size_t>(c.second)] = e;
            sum_ += e;
        }
        band_ = std::size(kBandWidths);  // nothing more to reach
    } else {
        for (size_t i = 0; i < n; ++i) {
            exps_[i] = std::exp(scaled_[i] - mx_);
            sum_ += exps_[i];
        }
        band_ = 0;
        band_upper_ = std::numeric_limits<float>::infinity();
    }
    if (p_.min_p <= 0.0f && p_.top_p >= 1.0f) return kept;
    // Survivors: a prefix of the walk order (min-p, then top-p).
    reach(0);
    const float floor = prob(0) * p_.min_p;
    const size_t limit = kept;
    double cum = 0.0;
    kept = 0;
    while (kept < limit && reach(kept)) {
        const float pk = prob(kept);
        if (kept > 0 && p_.min_p > 0.0f && !(pk >= floor)) break;
        cum += pk;
        ++kept;
        if (p_.top_p < 1.0f && cum >= p_.top_p) break;
    }
    return kept;
}

bool Sampler::reach(size_t k) {
    const size_t n = scaled_.size();
    while (k >= cand_.size() && band_ < std::size(kBandWidths)) {
        const float lower = mx_ - kBandWidths[band_++];
        const bool last = band_ == std::size(kBandWidths);
        const size_t from = cand_.size();
        for (size_t i = 0; i < n; ++i) {
            const float x = scaled_[i];
            // The last band takes everything left (NaN included).
            if (last ? !(x >= band_upper_) : x >= lower && x < band_upper_)
                cand_.emplace_back(x, static_cast<int32_t>(i));
        }
        std::sort(cand_.begin() + static_cast<std::ptrdiff_t>(from), cand_.end(), by_logit);
        band_upper_ = lower;
    }
    return k < cand_.size();
}

float Sampler::prob(size_t k) const {
    return static_cast<float>(exps_[static_cast<size_t>(cand_[k].second)] / sum_);
}

}  // namespace warden::engine
