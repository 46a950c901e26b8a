#pragma once
// Causal multi-head attention with grouped-query heads over a contiguous KV cache (the paged
// pool replaces the cache layout later; this kernel is the reference it must match).
#include <cstdint>

#include "kernels/cpu_features.h"
#include "tensor/float_convert.h"
#include "tensor/kv_format.h"
#include "util/thread_pool.h"

namespace warden::kernels {

// KV storage formats (tensor/kv_format.h), named here for the kernels' own use.
using tensor::kv_elem_bytes;
using tensor::kv_type_name;
using tensor::kv_type_qmax;
using tensor::kv_type_scaled;
using tensor::KvType;
using tensor::parse_kv_type;

struct KvView {
    KvType type = KvType::BF16;
    const void* k = nullptr;  // [n_ctx, n_kv_heads, head_dim]
    const void* v = nullptr;  // [n_ctx, n_kv_heads, head_dim]
    int64_t n_kv_heads = 0;
    int64_t head_dim = 0;
};

// For query token t (t in [0, n_q)) at absolute position pos0 + t, attends over cache
// positions [0, pos0 + t] (causal). q: [n_q, n_heads, head_dim], out: [n_q, n_heads, head_dim].
// Query head h uses kv head h / (n_heads / n_kv_heads). scale is usually 1/sqrt(head_dim).
// Work is split over (token, head) pairs on the pool. Only F32 and BF16 caches (the reference).
void attention(const float* q, int64_t n_q, int64_t n_heads, int64_t pos0, const KvView& kv,
               float scale, float* out, util::ThreadPool& pool);

}  // namespace warden::kernels
