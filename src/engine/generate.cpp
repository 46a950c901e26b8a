#include "engine/generate.h"

#include <algorithm>

#include "util/error.h"

namespace warden::engine {

namespace {
double ms_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

std::vector<int32_t> generate(model::Transformer& tf, model::ContiguousKvCache& cache,
                              const std::vector<int32_t>& prompt, const GenerateOptions& opts,
                              Sampler& sampler, const std::function<void(int32_t)>& on_token,
                              GenerateTimings* timings) {
    util::check(!prompt.empty(), "the prompt is empty (no tokens to condition on)");
    util::check(opts.max_new_tokens >= 1, "the number of tokens to generate must be at least 1");
    const int64_t vocab = tf.model().config.vocab_size;
    util::check(static_cast<int64_t>(prompt.size()) + opts.max_new_tokens <= cache.capacity(),
                "prompt of " + std::to_string(prompt.size()) + " tokens plus " +
                    std::to_string(opts.max_new_tokens) + " new tokens exceeds the context of " +
                    std::to_string(cache.capacity()) + " tokens");
    std::vector<float> logits(static_cast<size_t>(vocab));
    std::vector<int32_t> history = prompt;
    std::vector<int32_t> out;
    GenerateTimings t;
    t.prompt_tokens = static_cast<int64_t>(prompt.size());

    auto t0 = std::chrono::steady_clock::now();
    tf.forward(prompt.data(), static_cast<int64_t>(prompt.size()), cache, logits.data(), false);
    for (int64_t i = 0; i < opts.max_new_tokens; ++i) {
        const int32_t id = sampler.sample(logits, history);
        if (i == 0) {
            t.prefill_ms = ms_since(t0);
            t0 = std::chrono::steady_clock::now();
        }
        out.push_back(id);
        history.push_back(id);
        on_token(id);
        const bool stop = !opts.ignore_eos &&
                          std::find(opts.stop_ids.begin(), opts.stop_ids.end(), id) != opts.stop_ids.end();
        if (stop || i + 1 == opts.max_new_tokens) break;
        tf.forward(&id, 1, cache, logits.data(), false);
    }
    t.decode_ms = ms_since(t0);
    t.gen_tokens = static_cast<int64_t>(out.size());
    if (timings) *timings = t;
    return out;
}

}  // namespace warden::engine
