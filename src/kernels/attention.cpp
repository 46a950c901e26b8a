// Causal GQA attention, two-pass per (query token, head): scores = scale * q.K^T over the
// visible prefix, softmax, out = p.V. Built from the dispatched dot/softmax/axpy kernels so
// every ISA path is the one the op tests already cover. The scores live in a thread_local
// buffer that only grows (no allocation per call once warmed up); at 32k context it is
// 128 KiB per thread.
//
// Work split: items (token-major) are dealt round-robin to the pool's threads. With a causal
// mask later tokens cost more, so contiguous chunks would leave the last thread with most of
// the work; round-robin interleaving balances it.
#include "kernels/attention.h"

#include <string>
#include <vector>

#include "kernels/kernels_internal.h"
#include "util/error.h"

namespace warden::kernels {

void attention(const float* q, int64_t n_q, int64_t n_heads, int64_t pos0, const KvView& kv,
               float scale, float* out, util::ThreadPool& pool) {
    util::check(n_q >= 0 && pos0 >= 0, "attention: negative n_q or pos0");
    util::check(kv.n_kv_heads > 0 && n_heads > 0 && n_heads % kv.n_kv_heads == 0,
                "attention: n_heads must be a positive multiple of n_kv_heads");
    util::check(kv.head_dim > 0, "attention: head_dim must be positive");
    util::check(kv.type == KvType::F32 || kv.type == KvType::BF16,
                std::string("attention: contiguous KvView supports f32 and bf16, not ") +
                    kv_type_name(kv.type));
    if (n_q == 0) return;
    const int64_t dim = kv.head_dim;
    const int64_t group = n_heads / kv.n_kv_heads;
    const int64_t kv_stride = kv.n_kv_heads * dim;  // floats/elements per cache position
    const int64_t total = n_q * n_heads;
    const detail::OpsTable& ops = detail::ops_table(active_isa());

    pool.run([&](int tid, int nt) {
        thread_local std::vector<float> scores;  // [n_ctx]
        const int64_t max_ctx = pos0 + n_q;
        if (static_cast<int64_t>(scores.size()) < max_ctx)
            scores.resize(static_cast<size_t>(max_ctx));
        float* s = scores.data();
        for (int64_t item = tid; item < total; item += nt) {
            const int64_t t = item / n_heads, h = item % n_heads, g = h / group;
            const int64_t n_ctx = pos0 + t + 1;
            const float* qh = q + item * dim;  // [n_q, n_heads, dim] -> item == t*n_heads + h
            float* oh = out + item * dim;
            if (kv.type == KvType::BF16) {
                const auto* k = static_cast<const detail::bf16*>(kv.k) + g * dim;
                const auto* v = static_cast<const detail::bf16*>(kv.v) + g * dim;
                for (int64_t j = 0; j < n_ctx; ++j)
                    s[j] = scale * ops.dot_bf16(qh, k + j * kv_stride, dim);
                ops.softmax(s, n_ctx);
                for (int64_t d = 0; d < dim; ++d) oh[d] = 0.0f;
                for (int64_t j = 0; j < n_ctx; ++j) ops.axpy_bf16(s[j], v + j * kv_stride, oh, dim);
            } else {
                const auto* k = static_cast<const float*>(kv.k) + g * dim;
                const auto* v = static_cast<const float*>(kv.v) + g * dim;
                for (int64_t j = 0; j < n_ctx; ++j)
                    s[j] = scale * ops.dot_f32(qh, k + j * kv_stride, dim);
                ops.softmax(s, n_ctx);
                for (int64_t d = 0; d < dim; ++d) oh[d] = 0.0f;
                for (int64_t j = 0; j < n_ctx; ++j) ops.axpy_f32(s[j], v + j * kv_stride, oh, dim);
            }
        }
    });
}

}  // namespace warden::kernels
