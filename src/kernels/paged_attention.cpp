// Two passes per (sequence, query token, head) item, like attention.cpp, but walking the
// sequence's pages: scores over the visible prefix page by page, softmax, then the weighted
// sum of V page by page. The page walk costs one table lookup per page, not per position.
// Per page the format's kernel (paged_attention_{scalar,avx2}.cpp) decodes the stored rows in
// registers; the per-(token, head) scales are folded into the score multiplier (K) and the
// softmax weights (V), so no dequantized copy of the cache is ever made. Positions the step
// brings itself (FreshKv) are read from the f32 k_new/v_new instead.
// Items of all sequences are dealt round-robin to the threads so ragged lengths balance.
//
// write_kv quantizes in plain scalar code shared by every ISA, so the stored bytes never
// depend on the machine.
#include "kernels/paged_attention.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/kernels_internal.h"
#include "kernels/paged_attention_internal.h"
#include "tensor/float_convert.h"
#include "tensor/fp8.h"
#include "util/error.h"

namespace warden::kernels {

static_assert(static_cast<int>(KvType::F32) == 0 && static_cast<int>(KvType::BF16) == 1 &&
              static_cast<int>(KvType::F16) == 2 && static_cast<int>(KvType::FP8_E4M3) == 3 &&
              static_cast<int>(KvType::FP8_E5M2) == 4 && static_cast<int>(KvType::INT8) == 5 &&
              detail::kKvTypes == 6);

namespace {

const detail::KvReadKernels& read_kernels(KvType t) {
    // AVX-512 machines use the AVX2 kernels (no separate AVX-512 variant: the read path is
    // bound by memory, not by vector width).
    const detail::KvKernelTable& tab =
        active_isa() == Isa::Scalar ? detail::kv_kernels_scalar() : detail::kv_kernels_avx2();
    return tab.by_type[static_cast<int>(t)];
}

// Smallest bf16 >= x (x finite, >= 0).
uint16_t bf16_round_up(float x) {
    uint32_t u = std::bit_cast<uint32_t>(x);
    if (u & 0xffffu) u = (u & 0xffff0000u) + 0x10000u;
    return static_cast<uint16_t>(u >> 16);
}

// Quantizes one (token, head) row of dim values into `codes`; returns the scale's bf16 bits
// (TokenHead) or 0 (Tensor, or unscaled types).
uint16_t store_row(const PagedKvLayer& kv, const float* x, uint8_t* codes, const detail::OpsTable& ops) {
    const int64_t dim = kv.head_dim;
    switch (kv.type) {
        case KvType::F32:
            std::memcpy(codes, x, static_cast<size_t>(dim) * 4);
            return 0;
        case KvType::BF16: {
            auto* out = reinterpret_cast<detail::bf16*>(codes);
            ops.f32_to_bf16_row(x, out, dim);
            return 0;
        }
        case KvType::F16: {
            for (int64_t i = 0; i < dim; ++i) {
                const float c = std::isnan(x[i]) ? x[i] : std::clamp(x[i], -65504.0f, 65504.0f);
                const tensor::f16_t h = tensor::f32_to_f16(c);
                std::memcpy(codes + 2 * i, &h, 2);
            }
            return 0;
        }
        default: break;
    }
    float s = kv.tensor_scale;
    uint16_t sbits = 0;
    if (kv.scales == KvScales::TokenHead) {
        float amax = 0.0f;
        for (int64_t i = 0; i < dim; ++i)
            if (std::isfinite(x[i])) amax = std::max(amax, std::fabs(x[i]));
        sbits = bf16_round_up(amax / kv_type_qmax(kv.type));
        if (amax > 0.0f && sbits < 0x0080u) sbits = 0x0080u;  // keep 1/s finite: at least 2^-126
        s = tensor::bf16_to_f32(sbits);
    }
    const bool unit = s == 0.0f;  // all finite values are 0: store them as they are
    for (int64_t i = 0; i < dim; ++i) {
        const float y = unit ? x[i] : x[i] / s;
        switch (kv.type) {
            case KvType::FP8_E4M3: codes[i] = tensor::f32_to_fp8_e4m3(y); break;
            case KvType::FP8_E5M2: codes[i] = tensor::f32_to_fp8_e5m2(y); break;
            default: {  // INT8: RNE, saturate at +-127, NaN -> 0
                const float c = std::isnan(y) ? 0.0f : std::clamp(y, -127.0f, 127.0f);
                codes[i] = static_cast<uint8_t>(static_cast<int8_t>(std::nearbyint(c)));
            }
        }
    }
    return sbits;
}

struct Scratch {
    std::vector<float> scores;  // [n_ctx]
    std::vector<float> w;       // [page_size] per-row multipliers of one page
};

void attend_one(const detail::KvReadKernels& rk, const detail::OpsTable& ops, const PagedKvLayer& kv,
                const PagedAttentionSeq& s, int64_t t, int64_t g, const float* qh, float* oh, float scale,
                Scratch& sc) {
    const int64_t dim = kv.head_dim;
    const int64_t row = kv.n_kv_heads * dim;
    const int64_t eb = kv_elem_bytes(kv.type);
    const int64_t row_bytes = row * eb;
    const int64_t n_ctx = s.pos0 + t + 1;
    int64_t fresh_begin = n_ctx;  // positions [fresh_begin, n_ctx) come from k_new/v_new
    if (s.k_new && s.v_new) {
        if (s.fresh == FreshKv::Self) fresh_begin = n_ctx - 1;
        else if (s.fresh == FreshKv::Chunk) fresh_begin = s.pos0;
    }
    const int64_t n_pages = (fresh_begin + kv.page_size - 1) / kv.page_size;
    const bool per_row = kv.has_scale_array();
    const float fixed = kv_type_scaled(kv.type) ? kv.tensor_scale : 1.0f;
    float* scores = sc.scores.data();
    float* w = sc.w.data();

    for (int64_t p = 0; p < n_pages; ++p) {
        const uint8_t* page = kv.base + static_cast<int64_t>(s.page_ids[p]) * kv.page_stride;
        const int64_t j0 = p * kv.page_size, cnt = std::min(fresh_begin, j0 + kv.page_size) - j0;
        if (per_row) {
            const auto* sk = reinterpret_cast<const uint16_t*>(page + kv.k_scale_offset) + g;
            for (int64_t i = 0; i < cnt; ++i) w[i] = scale * tensor::bf16_to_f32(sk[i * kv.n_kv_heads]);
        } else {
            std::fill(w, w + cnt, scale * fixed);
        }
        rk.scores(qh, page + kv.k_offset + g * dim * eb, row_bytes, cnt, dim, w, scores + j0);
    }
    for (int64_t j = fresh_begin; j < n_ctx; ++j)
        scores[j] = scale * ops.dot_f32(qh, s.k_new + (j - s.pos0) * row + g * dim, dim);
    ops.softmax(scores, n_ctx);
    std::fill(oh, oh + dim, 0.0f);
    for (int64_t p = 0; p < n_pages; ++p) {
        const uint8_t* page = kv.base + static_cast<int64_t>(s.page_ids[p]) * kv.page_stride;
        const int64_t j0 = p * kv.page_size, cnt = std::min(fresh_begin, j0 + kv.page_size) - j0;
        if (per_row) {
            const auto* sv = reinterpret_cast<const uint16_t*>(page + kv.v_scale_offset) + g;
            for (int64_t i = 0; i < cnt; ++i) w[i] = scores[j0 + i] * tensor::bf16_to_f32(sv[i * kv.n_kv_heads]);
        } else if (fixed != 1.0f) {
            for (int64_t i = 0; i < cnt; ++i) w[i] = scores[j0 + i] * fixed;
        } else {
            std::copy(scores + j0, scores + j0 + cnt, w);
        }
        rk.accum(w, page + kv.v_offset + g * dim * eb, row_bytes, cnt, dim, oh);
    }
    for (int64_t j = fresh_begin; j < n_ctx; ++j)
        ops.axpy_f32(scores[j], s.v_new + (j - s.pos0) * row + g * dim, oh, dim);
}

void check_layer(const PagedKvLayer& kv) {
    util::check(kv.head_dim > 0 && kv.page_size > 0 && kv.n_kv_heads > 0, "paged attention: bad head dim or page size");
    util::check(!(kv.type == KvType::INT8 && kv.scales == KvScales::Tensor),
                "int8 KV needs per-(token, head) scales (--kv-scales=token-head)");
    util::check(std::isfinite(kv.tensor_scale) && kv.tensor_scale > 0.0f, "KV tensor scale must be positive");
}

}  // namespace

void write_kv(const PagedKvLayer& kv, const int32_t* page_ids, int64_t pos0, int64_t n, const float* k,
              const float* v) {
    check_layer(kv);
    const int64_t dim = kv.head_dim, row = kv.n_kv_heads * dim, eb = kv_elem_bytes(kv.type);
    const detail::OpsTable& ops = detail::ops_table(active_isa());
    const bool per_row = kv.has_scale_array();
    for (int64_t t = 0; t < n; ++t) {
        const int64_t pos = pos0 + t;
        uint8_t* page = kv.base + static_cast<int64_t>(page_ids[pos / kv.page_size]) * kv.page_stride;
        const int64_t slot = pos % kv.page_size;
        for (int64_t g = 0; g < kv.n_kv_heads; ++g) {
            const int64_t at = (slot * row + g * dim) * eb;
            const uint16_t ks = store_row(kv, k + t * row + g * dim, page + kv.k_offset + at, ops);
            const uint16_t vs = store_row(kv, v + t * row + g * dim, page + kv.v_offset + at, ops);
            if (per_row) {
                std::memcpy(page + kv.k_scale_offset + (slot * kv.n_kv_heads + g) * 2, &ks, 2);
                std::memcpy(page + kv.v_scale_offset + (slot * kv.n_kv_heads + g) * 2, &vs, 2);
            }
        }
    }
}

void read_kv_row(const PagedKvLayer& kv, const int32_t* page_ids, int64_t pos, int64_t kv_head, bool value,
                 float* out) {
    check_layer(kv);
    const int64_t dim = kv.head_dim, eb = kv_elem_bytes(kv.type);
    const uint8_t* page = kv.base + static_cast<int64_t>(page_ids[pos / kv.page_size]) * kv.page_stride;
    const int64_t slot = pos % kv.page_size;
    const uint8_t* codes = page + (value ? kv.v_offset : kv.k_offset) + (slot * kv.n_kv_heads + kv_head) * dim * eb;
    detail::kv_kernels_scalar().by_type[static_cast<int>(kv.type)].dequant(codes, dim, out);
    float s = kv_type_scaled(kv.type) ? kv.tensor_scale : 1.0f;
    if (kv.has_scale_array()) {
        uint16_t b;
        std::memcpy(&b, page + (value ? kv.v_scale_offset : kv.k_scale_offset) + (slot * kv.n_kv_heads + kv_head) * 2, 2);
        s = tensor::bf16_to_f32(b);
    }
    if (s != 1.0f)
        for (int64_t i = 0; i < dim; ++i) out[i] *= s;
}

void paged_attention(std::span<const PagedAttentionSeq> seqs, int64_t n_heads, const PagedKvLayer& kv, float scale,
                     util::ThreadPool& pool) {
    util::check(kv.n_kv_heads > 0 && n_heads > 0 && n_heads % kv.n_kv_heads == 0,
                "paged attention: n_heads must be a positive multiple of n_kv_heads");
    check_layer(kv);
    const int64_t dim = kv.head_dim;
    const int64_t group = n_heads / kv.n_kv_heads;
    // Item ranges per sequence: items [first[i], first[i+1]) belong to sequence i.
    std::vector<int64_t> first(seqs.size() + 1, 0);
    int64_t max_ctx = 0;
    for (size_t i = 0; i < seqs.size(); ++i) {
        util::check(seqs[i].n_q >= 0 && seqs[i].pos0 >= 0, "paged attention: negative length");
        first[i + 1] = first[i] + seqs[i].n_q * n_heads;
        max_ctx = std::max(max_ctx, seqs[i].pos0 + seqs[i].n_q);
    }
    const int64_t total = first.back();
    if (total == 0) return;
    const detail::OpsTable& ops = detail::ops_table(active_isa());
    const detail::KvReadKernels& rk = read_kernels(kv.type);
    const int64_t w_len = std::min(max_ctx, kv.page_size);

    pool.run([&](int tid, int nt) {
        thread_local Scratch sc;
        if (static_cast<int64_t>(sc.scores.size()) < max_ctx) sc.scores.resize(static_cast<size_t>(max_ctx));
        if (static_cast<int64_t>(sc.w.size()) < w_len) sc.w.resize(static_cast<size_t>(w_len));
        size_t si = 0;
        for (int64_t item = tid; item < total; item += nt) {
            while (item >= first[si + 1]) ++si;
            const PagedAttentionSeq& s = seqs[si];
            const int64_t local = item - first[si];
            const int64_t t = local / n_heads, h = local % n_heads, g = h / group;
            attend_one(rk, ops, kv, s, t, g, s.q + local * dim, s.out + local * dim, scale, sc);
        }
    });
}

}  // namespace warden::kernels
