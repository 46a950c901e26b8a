#include "model/mla.h"

#include <cmath>
#include <cstring>

#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "util/error.h"

namespace warden::model {

namespace {

// Rotates the rope_dim values at v (one head's rope part) with the row's cos/sin table.
void rope_part(float* v, const float* cs, int64_t rope_dim, RopeStyle style) {
    const int64_t half = rope_dim / 2;
    for (int64_t i = 0; i < half; ++i) {
        const float co = cs[2 * i], si = cs[2 * i + 1];
        const int64_t a = style == RopeStyle::NeoX ? i : 2 * i;
        const int64_t b = style == RopeStyle::NeoX ? i + half : 2 * i + 1;
        const float x0 = v[a], x1 = v[b];
        v[a] = x0 * co - x1 * si;
        v[b] = x0 * si + x1 * co;
    }
}

}  // namespace

void MlaAttention::forward(const ModelConfig& c, const MlaWeights& w, const float* x, int64_t n,
                           const float* rope_cs, std::span<const MlaSeq> seqs,
                           const kernels::PagedKvLayer& kv, kernels::FreshKv fresh, float* out,
                           util::ThreadPool& pool) {
    const MlaConfig& m = c.mla;
    const int64_t H = c.n_heads, R = c.rope_dim, Dn = m.nope_dim, Dv = m.v_dim, L = m.kv_lora_rank;
    const int64_t qk = Dn + R, row = L + R;
    util::check(kv.n_kv_heads == 1 && kv.head_dim == row,
                "MLA: the KV cache must hold one row of kv_lora_rank + rope values per token");
    const auto N = static_cast<size_t>(n);
    q_.resize(N * static_cast<size_t>(H * qk));
    kv_.resize(N * static_cast<size_t>(row));
    qabs_.resize(N * static_cast<size_t>(H * row));
    lat_.resize(N * static_cast<size_t>(H * L));
    // Per-head inputs and outputs of the absorbed matmuls, head-major [H, n, width].
    tmp_.resize(N * static_cast<size_t>(H * std::max(Dn, L)));
    tmp2_.resize(N * static_cast<size_t>(H * std::max(L, Dv)));
    att_.resize(N * static_cast<size_t>(H * Dv));

    // Queries [n, H, nope + rope] and the latent + rope key [n, L + R]. q_a (or q) and kv_a share
    // x: one kernels::matmul_multi call, one dispatch.
    if (observer) {
        observer->observe(m.q_lora_rank > 0 ? w.wq_a : w.wq, x, n);
        observer->observe(w.wkv_a, x, n);
    }
    if (m.q_lora_rank > 0) qa_.resize(N * static_cast<size_t>(m.q_lora_rank));
    {
        const kernels::MatmulOut o[2] = {m.q_lora_rank > 0
                                             ? kernels::MatmulOut{&w.wq_a.view(), qa_.data()}
                                             : kernels::MatmulOut{&w.wq.view(), q_.data()},
                                         {&w.wkv_a.view(), kv_.data()}};
        kernels::matmul_multi(o, x, n, pool);
    }
    if (m.q_lora_rank > 0) {
        for (int64_t t = 0; t < n; ++t)
            kernels::rmsnorm(qa_.data() + t * m.q_lora_rank, w.q_a_norm.data(),
                             qa_.data() + t * m.q_lora_rank, m.q_lora_rank, kMlaNormEps);
        if (observer) observer->observe(w.wq_b, qa_.data(), n);
        kernels::matmul(w.wq_b.view(), qa_.data(), n, q_.data(), pool);
    }
    // Normed latent, rotated keys and queries.
    for (int64_t t = 0; t < n; ++t) {
        float* r = kv_.data() + t * row;
        kernels::rmsnorm(r, w.kv_a_norm.data(), r, L, kMlaNormEps);
        rope_part(r + L, rope_cs + t * R, R, c.rope_style);
        for (int64_t h = 0; h < H; ++h)
            rope_part(q_.data() + (t * H + h) * qk + Dn, rope_cs + t * R, R, c.rope_style);
    }
    // Absorbed queries [n, H, L + R]: W_kb_h^T q_nope_h, then q_rope_h. Every head's matmul has
    // its own input, so all H go to the pool as one kernels::matmul_grouped call (one dispatch
    // and barrier instead of H).
    for (int64_t h = 0; h < H; ++h)
        for (int64_t t = 0; t < n; ++t)
            std::memcpy(tmp_.data() + (h * n + t) * Dn, q_.data() + (t * H + h) * qk,
                        static_cast<size_t>(Dn) * sizeof(float));
    per_head_matmuls(w.wk_b_t, tmp_.data(), Dn, n, tmp2_.data(), L, pool);
    for (int64_t h = 0; h < H; ++h)
        for (int64_t t = 0; t < n; ++t) {
            float* dst = qabs_.data() + (t * H + h) * row;
            std::memcpy(dst, tmp2_.data() + (h * n + t) * L,
                        static_cast<size_t>(L) * sizeof(float));
            std::memcpy(dst + L, q_.data() + (t * H + h) * qk + Dn,
                        static_cast<size_t>(R) * sizeof(float));
        }

    std::vector<kernels::MlaAttentionSeq> att_seqs;
    att_seqs.reserve(seqs.size());
    for (const MlaSeq& s : seqs) {
        if (!s.alive) {
            std::fill(lat_.begin() + s.row0 * H * L, lat_.begin() + (s.row0 + s.n) * H * L, 0.0f);
            continue;
        }
        const float* rows = kv_.data() + s.row0 * row;
        // One K row per token; the k_only layout has v_offset == k_offset, so the V copy write_kv
        // makes lands on the same bytes with the same values.
        kernels::write_kv(kv, s.page_ids, s.pos0, s.n, rows, rows);
        att_seqs.push_back({qabs_.data() + s.row0 * H * row, lat_.data() + s.row0 * H * L, s.n,
                            s.pos0, s.page_ids, rows, fresh});
    }
    // attn_scale_factor: DeepSeek's yarn mscale(factor, mscale_all_dim)^2 (1 without yarn).
    const float scale = c.attn_scale_factor / std::sqrt(static_cast<float>(qk));
    kernels::mla_attention(att_seqs, H, L, kv, scale, pool);

    // Values: out_h = W_vb_h lat_h -> att [n, H, Dv] (all heads in one dispatch); then o_proj.
    for (int64_t h = 0; h < H; ++h)
        for (int64_t t = 0; t < n; ++t)
            std::memcpy(tmp_.data() + (h * n + t) * L, lat_.data() + (t * H + h) * L,
                        static_cast<size_t>(L) * sizeof(float));
    per_head_matmuls(w.wv_b, tmp_.data(), L, n, tmp2_.data(), Dv, pool);
    for (int64_t h = 0; h < H; ++h)
        for (int64_t t = 0; t < n; ++t)
            std::memcpy(att_.data() + (t * H + h) * Dv, tmp2_.data() + (h * n + t) * Dv,
                        static_cast<size_t>(Dv) * sizeof(float));
    if (observer) observer->observe(w.wo, att_.data(), n);
    kernels::matmul(w.wo.view(), att_.data(), n, out, pool);
}

void MlaAttention::per_head_matmuls(const std::vector<Matrix>& w, const float* in, int64_t in_width,
                                    int64_t n, float* out, int64_t out_width,
                                    util::ThreadPool& pool) {
    const size_t H = w.size();
    outs_.resize(H);
    groups_.resize(H);
    for (size_t h = 0; h < H; ++h) {
        const auto hh = static_cast<int64_t>(h);
        outs_[h] = {&w[h].view(), out + hh * n * out_width};
        groups_[h] = {std::span(outs_.data() + h, 1), in + hh * n * in_width, n};
    }
    kernels::matmul_grouped(groups_, pool);
}

int64_t kv_bytes_per_token(const ModelConfig& c, int64_t elem_bytes) {
    const KvShape s = c.kv_shape();
    return c.n_layers * (s.k_only ? 1 : 2) * s.n_kv_heads * s.head_dim * elem_bytes;
}

int64_t kv_bytes_per_token_uncompressed(const ModelConfig& c, int64_t elem_bytes) {
    const int64_t v_dim = c.mla.enabled() ? c.mla.v_dim : c.head_dim;
    return c.n_layers * c.n_kv_heads * (c.head_dim + v_dim) * elem_bytes;
}

std::unique_ptr<MlaWeights> load_mla_weights(const ModelConfig& c, const MoeTensorLoader& load) {
    const MlaConfig& m = c.mla;
    const int64_t d = c.d_model, H = c.n_heads, R = c.rope_dim, Dn = m.nope_dim, Dv = m.v_dim,
                  L = m.kv_lora_rank;
    auto w = std::make_unique<MlaWeights>();
    if (m.q_lora_rank > 0) {
        w->wq_a = load.matrix("self_attn.q_a_proj.weight", m.q_lora_rank, d);
        w->q_a_norm = load.vec("self_attn.q_a_layernorm.weight", m.q_lora_rank);
        w->wq_b = load.matrix("self_attn.q_b_proj.weight", H * (Dn + R), m.q_lora_rank);
    } else {
        w->wq = load.matrix("self_attn.q_proj.weight", H * (Dn + R), d);
    }
    w->wkv_a = load.matrix("self_attn.kv_a_proj_with_mqa.weight", L + R, d);
    w->kv_a_norm = load.vec("self_attn.kv_a_layernorm.weight", L);
    w->wo = load.matrix("self_attn.o_proj.weight", d, H * Dv);
    if (load.has && load.f32 && load.has("self_attn.k_b_proj.weight")) {
        // llama.cpp's split form (GGUF attn_k_b / attn_v_b): k_b [H, L, nope] holds W_kb_h^T,
        // v_b [H, v, L] holds W_vb_h.
        const auto kb = load.f32("self_attn.k_b_proj.weight", {H, L, Dn});
        const auto vb = load.f32("self_attn.v_b_proj.weight", {H, Dv, L});
        for (int64_t h = 0; h < H; ++h) {
            w->wk_b_t.push_back(load.pack(L, Dn, kb.data() + h * L * Dn));
            w->wv_b.push_back(load.pack(Dv, L, vb.data() + h * Dv * L));
        }
        return w;
    }
    // kv_b_proj [H * (nope + v), L]: per head nope key rows, then v rows.
    const Matrix kvb = load.matrix_f32("self_attn.kv_b_proj.weight", H * (Dn + Dv), L);
    std::vector<float> rowbuf(static_cast<size_t>(L)), kt(static_cast<size_t>(L * Dn)),
        vb(static_cast<size_t>(Dv * L));
    for (int64_t h = 0; h < H; ++h) {
        for (int64_t i = 0; i < Dn; ++i) {
            kvb.row_f32(h * (Dn + Dv) + i, rowbuf.data());
            for (int64_t j = 0; j < L; ++j)
                kt[static_cast<size_t>(j * Dn + i)] = rowbuf[static_cast<size_t>(j)];
        }
        for (int64_t i = 0; i < Dv; ++i) kvb.row_f32(h * (Dn + Dv) + Dn + i, vb.data() + i * L);
        w->wk_b_t.push_back(load.pack(L, Dn, kt.data()));
        w->wv_b.push_back(load.pack(Dv, L, vb.data()));
    }
    return w;
}

}  // namespace warden::model
