#pragma once
// Contiguous per-sequence KV cache: the reference layout the paged pool must reproduce.
// K and V of layer l are [max_ctx, n_kv_heads, head_dim] in bf16 (default) or f32.
#include <cstdint>
#include <vector>

#include "kernels/attention.h"
#include "model/model_config.h"

namespace warden::model {

class ContiguousKvCache {
public:
    ContiguousKvCache(const ModelConfig& c, int64_t max_ctx, kernels::KvType type);

    int64_t capacity() const { return max_ctx_; }
    int64_t n_tokens() const { return n_tokens_; }
    void set_n_tokens(int64_t n) { n_tokens_ = n; }
    kernels::KvType type() const { return type_; }
    int64_t bytes() const;

    // Writes rows [pos, pos + n) of layer l from f32 k, v: [n, n_kv_heads * head_dim].
    void write(int64_t layer, int64_t pos, int64_t n, const float* k, const float* v);
    kernels::KvView view(int64_t layer) const;

private:
    int64_t n_layers_, n_kv_heads_, head_dim_, max_ctx_;
    int64_t n_tokens_ = 0;
    kernels::KvType type_;
    std::vector<uint8_t> k_, v_;  // [n_layers, max_ctx, n_kv_heads, head_dim]
};

}  // namespace warden::model
