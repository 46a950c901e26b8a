#include "model/transformer.h"

#include <cmath>
#include <cstring>

#include "kernels/attention.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "util/error.h"

namespace warden::model {

Transformer::Transformer(const Model& model, util::ThreadPool& pool) : model_(model), pool_(pool) {}

void Transformer::ensure_scratch(int64_t n) {
    if (n <= scratch_n_) return;
    const ModelConfig& c = model_.config;
    const auto N = static_cast<size_t>(n);
    x_.resize(N * c.d_model);
    xb_.resize(N * c.d_model);
    q_.resize(N * c.n_heads * c.head_dim);
    k_.resize(N * c.n_kv_heads * c.head_dim);
    v_.resize(N * c.n_kv_heads * c.head_dim);
    att_.resize(N * c.n_heads * c.head_dim);
    proj_.resize(N * c.d_model);
    gate_.resize(N * c.d_ff);
    up_.resize(N * c.d_ff);
    scratch_n_ = n;
}

// Rotates the first rope_dim dims of every head of x ([n, n_heads, head_dim]).
void Transformer::rope(float* x, int64_t n, int64_t n_heads, int64_t pos0) const {
    const ModelConfig& c = model_.config;
    const int64_t half = c.rope_dim / 2;
    std::vector<float> cs(static_cast<size_t>(2 * half));
    for (int64_t t = 0; t < n; ++t) {
        const double pos = static_cast<double>(pos0 + t) / c.rope_linear_factor;
        for (int64_t i = 0; i < half; ++i) {
            const double a = pos * static_cast<double>(c.rope_inv_freq[static_cast<size_t>(i)]);
            cs[static_cast<size_t>(2 * i)] = static_cast<float>(std::cos(a));
            cs[static_cast<size_t>(2 * i + 1)] = static_cast<float>(std::sin(a));
        }
        for (int64_t h = 0; h < n_heads; ++h) {
            float* v = x + (t * n_heads + h) * c.head_dim;
            for (int64_t i = 0; i < half; ++i) {
                const float co = cs[static_cast<size_t>(2 * i)], si = cs[static_cast<size_t>(2 * i + 1)];
                // NeoX pairs dim i with i + half; interleaved pairs 2i with 2i + 1.
                const int64_t a = c.rope_style == RopeStyle::NeoX ? i : 2 * i;
                const int64_t b = c.rope_style == RopeStyle::NeoX ? i + half : 2 * i + 1;
                const float x0 = v[a], x1 = v[b];
                v[a] = x0 * co - x1 * si;
                v[b] = x0 * si + x1 * co;
            }
        }
    }
}

void Transformer::forward(const int32_t* tokens, int64_t n, ContiguousKvCache& cache, float* logits,
                          bool all_logits) {
    util::check(n > 0, "forward: no tokens");
    util::check(cache.n_tokens() + n <= cache.capacity(),
                "sequence of " + std::to_string(cache.n_tokens() + n) + " tokens exceeds the context of " +
                    std::to_string(cache.capacity()));
    const int64_t vocab = model_.config.vocab_size;
    for (int64_t i = 0; i < n; ++i)
        util::check(tokens[i] >= 0 && tokens[i] < vocab,
                    "token id " + std::to_string(tokens[i]) + " is outside the vocabulary (size " +
                        std::to_string(vocab) + ")");
    for (int64_t off = 0; off < n; off += kMaxChunk) {
        const int64_t m = std::min(kMaxChunk, n - off);
        const bool last = off + m == n;
        float* out = all_logits ? logits + off * vocab : (last ? logits : nullptr);
        forward_chunk(tokens + off, m, cache, out, all_logits);
    }
}

void Transformer::forward_chunk(const int32_t* tokens, int64_t n, ContiguousKvCache& cache, float* logits,
                                bool all_logits) {
    const ModelConfig& c = model_.config;
    const ModelWeights& w = model_.weights;
    ensure_scratch(n);
    const int64_t d = c.d_model, hd = c.head_dim;
    const int64_t pos0 = cache.n_tokens();
    const float att_scale = 1.0f / std::sqrt(static_cast<float>(hd));

    for (int64_t t = 0; t < n; ++t) w.token_embd.row_f32(tokens[t], x_.data() + t * d);

    auto add_bias = [n](float* y, const std::vector<float>& b) {
        if (b.empty()) return;
        const auto m = static_cast<int64_t>(b.size());
        for (int64_t t = 0; t < n; ++t)
            for (int64_t i = 0; i < m; ++i) y[t * m + i] += b[static_cast<size_t>(i)];
    };
    auto head_norm = [&](float* y, int64_t n_heads, const std::vector<float>& g) {
        for (int64_t r = 0; r < n * n_heads; ++r) kernels::rmsnorm(y + r * hd, g.data(), y + r * hd, hd, c.rms_eps);
    };

    for (int64_t l = 0; l < c.n_layers; ++l) {
        const LayerWeights& L = w.layers[static_cast<size_t>(l)];
        for (int64_t t = 0; t < n; ++t)
            kernels::rmsnorm(x_.data() + t * d, L.attn_norm.data(), xb_.data() + t * d, d, c.rms_eps);
        kernels::matmul(L.wq.view(), xb_.data(), n, q_.data(), pool_);
        kernels::matmul(L.wk.view(), xb_.data(), n, k_.data(), pool_);
        kernels::matmul(L.wv.view(), xb_.data(), n, v_.data(), pool_);
        add_bias(q_.data(), L.bq);
        add_bias(k_.data(), L.bk);
        add_bias(v_.data(), L.bv);
        if (c.qk_norm) {
            head_norm(q_.data(), c.n_heads, L.q_norm);
            head_norm(k_.data(), c.n_kv_heads, L.k_norm);
        }
        rope(q_.data(), n, c.n_heads, pos0);
        rope(k_.data(), n, c.n_kv_heads, pos0);
        cache.write(l, pos0, n, k_.data(), v_.data());
        kernels::attention(q_.data(), n, c.n_heads, pos0, cache.view(l), att_scale, att_.data(), pool_);
        kernels::matmul(L.wo.view(), att_.data(), n, proj_.data(), pool_);
        for (int64_t i = 0; i < n * d; ++i) x_[static_cast<size_t>(i)] += proj_[static_cast<size_t>(i)];

        for (int64_t t = 0; t < n; ++t)
            kernels::rmsnorm(x_.data() + t * d, L.ffn_norm.data(), xb_.data() + t * d, d, c.rms_eps);
        kernels::matmul(L.w_gate.view(), xb_.data(), n, gate_.data(), pool_);
        kernels::matmul(L.w_up.view(), xb_.data(), n, up_.data(), pool_);
        kernels::silu_mul(gate_.data(), up_.data(), gate_.data(), n * c.d_ff);
        kernels::matmul(L.w_down.view(), gate_.data(), n, proj_.data(), pool_);
        for (int64_t i = 0; i < n * d; ++i) x_[static_cast<size_t>(i)] += proj_[static_cast<size_t>(i)];
    }
    cache.set_n_tokens(pos0 + n);

    if (!logits) return;
    const int64_t first = all_logits ? 0 : n - 1;
    const int64_t m = n - first;
    for (int64_t t = first; t < n; ++t)
        kernels::rmsnorm(x_.data() + t * d, w.output_norm.data(), xb_.data() + (t - first) * d, d, c.rms_eps);
    kernels::matmul(w.output.view(), xb_.data(), m, logits, pool_);
}

}  // namespace warden::model
