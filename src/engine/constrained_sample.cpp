#include "engine/constrained_sample.h"

#include <algorithm>
#include <cmath>

namespace warden::engine {

namespace {

bool draws_from_full_distribution(const SamplingParams& p) {
    return p.temperature <= 0.0f || (p.top_k <= 0 && p.top_p >= 1.0f && p.min_p <= 0.0f);
}

bool is_stop(int32_t t, std::span<const int32_t> stop_ids) {
    return std::find(stop_ids.begin(), stop_ids.end(), t) != stop_ids.end();
}

}  // namespace

int32_t sample_constrained(Sampler& sampler, constrain::Constraint& c, std::vector<float>& logits,
                           std::span<const int32_t> stop_ids, std::span<const int32_t> history,
                           size_t n_prompt) {
    int32_t tok = -1;
    if (draws_from_full_distribution(sampler.params())) {
        thread_local std::vector<float> work;
        work.assign(logits.begin(), logits.end());
        tok = sampler.sample(work, history, n_prompt);
        if (!std::isfinite(logits[static_cast<size_t>(tok)]) || !c.allows(tok, stop_ids)) tok = -1;
    }
    if (tok < 0) {
        if (!c.apply(logits, stop_ids)) return -1;
        if (std::none_of(logits.begin(), logits.end(), [](float l) { return std::isfinite(l); }))
            return -1;
        tok = sampler.sample(logits, history, n_prompt);
        if (!c.allows(tok, stop_ids)) return -1;  // cannot happen: every other logit is -inf
    }
    if (!is_stop(tok, stop_ids)) c.accept(tok);
    return tok;
}

}  // namespace warden::engine
