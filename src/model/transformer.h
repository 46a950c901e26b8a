#pragma once
// The forward pass of a dense llama/qwen2/qwen3 decoder. One call runs a chunk of consecutive
// tokens of one sequence (prefill chunk or a single decode token) through every layer,
// appending their K/V to the cache; linear layers see the whole chunk at once.
#include <cstdint>
#include <vector>

#include "model/kv_cache.h"
#include "model/model.h"
#include "util/thread_pool.h"

namespace warden::model {

class Transformer {
public:
    Transformer(const Model& model, util::ThreadPool& pool);

    // tokens: [n] at positions [cache.n_tokens(), +n). Writes logits of the last token to
    // `logits` ([vocab]), or of every token when all_logits ([n, vocab]). Chunks internally
    // so scratch memory stays bounded for long prompts.
    void forward(const int32_t* tokens, int64_t n, ContiguousKvCache& cache, float* logits,
                 bool all_logits);

    const Model& model() const { return model_; }
    static constexpr int64_t kMaxChunk = 256;

private:
    void forward_chunk(const int32_t* tokens, int64_t n, ContiguousKvCache& cache, float* logits,
                       bool all_logits);
    void ensure_scratch(int64_t n);
    void rope(float* x, int64_t n, int64_t n_heads, int64_t pos0) const;

    const Model& model_;
    util::ThreadPool& pool_;
    int64_t scratch_n_ = 0;
    // Scratch, sized for the largest chunk seen:
    std::vector<float> x_;      // [n, d_model] residual stream
    std::vector<float> xb_;     // [n, d_model] normed input
    std::vector<float> q_;      // [n, n_heads * head_dim]
    std::vector<float> k_;      // [n, n_kv_heads * head_dim]
    std::vector<float> v_;      // [n, n_kv_heads * head_dim]
    std::vector<float> att_;    // [n, n_heads * head_dim]
    std::vector<float> proj_;   // [n, d_model]
    std::vector<float> gate_;   // [n, d_ff]
    std::vector<float> up_;     // [n, d_ff]
};

}  // namespace warden::model
