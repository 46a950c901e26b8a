#include "kernels/mla_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "util/assert.h"
#include "util/error.h"

namespace warden::kernels {

void mla_attention(std::span<const MlaAttentionSeq> seqs, int64_t n_heads, int64_t latent_dim,
                   const PagedKvLayer& kv, float scale, util::ThreadPool& pool) {
    util::check(kv.n_kv_heads == 1,
                "MLA attention: the latent cache has one KV row per token (n_kv_heads 1)");
    util::check(latent_dim > 0 && latent_dim < kv.head_dim,
                "MLA attention: latent width must be below the row width");
    util::check(n_heads > 0, "MLA attention: no heads");
    const int64_t D = kv.head_dim, L = latent_dim;
    std::vector<float> ctx;  // [pos0 + n_q, D] this sequence's cached rows, dequantized once
    for (const MlaAttentionSeq& s : seqs) {
        WARDEN_ASSERT(s.n_q >= 0 && s.pos0 >= 0, "MLA attention: negative length");
        if (s.n_q == 0) continue;
        const int64_t n_ctx = s.pos0 + s.n_q;
        ctx.resize(static_cast<size_t>(n_ctx * D));
        for (int64_t p = 0; p < n_ctx; ++p)
            read_kv_row(kv, s.page_ids, p, 0, false, ctx.data() + p * D);
        const bool fresh_self = s.kv_new && s.fresh == FreshKv::Self;
        const bool fresh_chunk = s.kv_new && s.fresh == FreshKv::Chunk;
        pool.parallel_for(s.n_q * n_heads, 1, [&](int64_t i0, int64_t i1) {
            std::vector<float> w(static_cast<size_t>(n_ctx));
            for (int64_t item = i0; item < i1; ++item) {
                const int64_t t = item / n_heads, h = item % n_heads, last = s.pos0 + t;
                const float* q = s.q + (t * n_heads + h) * D;
                auto row = [&](int64_t p) -> const float* {
                    if ((fresh_self && p == last) || (fresh_chunk && p >= s.pos0))
                        return s.kv_new + (p - s.pos0) * D;
                    return ctx.data() + p * D;
                };
                float mx = -INFINITY;
                for (int64_t p = 0; p <= last; ++p) {
                    const float* k = row(p);
                    float acc = 0.0f;
                    for (int64_t i = 0; i < D; ++i) acc += q[i] * k[i];
                    w[static_cast<size_t>(p)] = acc * scale;
                    mx = std::max(mx, w[static_cast<size_t>(p)]);
                }
                float sum = 0.0f;
                for (int64_t p = 0; p <= last; ++p)
                    sum += (w[static_cast<size_t>(p)] = std::exp(w[static_cast<size_t>(p)] - mx));
                const float inv = 1.0f / sum;
                float* out = s.out + (t * n_heads + h) * L;
                std::fill(out, out + L, 0.0f);
                for (int64_t p = 0; p <= last; ++p) {
                    const float a = w[static_cast<size_t>(p)] * inv;
                    const float* c = row(p);
                    for (int64_t i = 0; i < L; ++i) out[i] += a * c[i];
                }
            }
        });
    }
}

void mla_attention_reference(const float* q, float* out, int64_t n_q, int64_t pos0,
                             const float* keys, int64_t n_heads, int64_t latent_dim,
                             int64_t row_dim, float scale) {
    for (int64_t t = 0; t < n_q; ++t)
        for (int64_t h = 0; h < n_heads; ++h) {
            const float* qh = q + (t * n_heads + h) * row_dim;
            const int64_t n = pos0 + t + 1;
            std::vector<double> sc(static_cast<size_t>(n));
            double mx = -INFINITY;
            for (int64_t p = 0; p < n; ++p) {
                double a = 0;
                for (int64_t i = 0; i < row_dim; ++i)
                    a += static_cast<double>(qh[i]) * keys[p * row_dim + i];
                sc[static_cast<size_t>(p)] = a * scale;
                mx = std::max(mx, sc[static_cast<size_t>(p)]);
            }
            double z = 0;
            for (auto& v : sc) z += (v = std::exp(v - mx));
            for (int64_t i = 0; i < latent_dim; ++i) {
                double a = 0;
                for (int64_t p = 0; p < n; ++p)
                    a += sc[static_cast<size_t>(p)] * keys[p * row_dim + i];
                out[(t * n_heads + h) * latent_dim + i] = static_cast<float>(a / z);
            }
        }
}

}  // namespace warden::kernels
