// AVX-512 paged-attention read kernels: the ones attend_chunk spends its time in. With a query
// group (or a single head) attend_chunk decodes each page's rows of a kv head into f32 scratch
// once (`dequant`) and every head reads them there through the F32 entry's `scores` and `accum`
// (paged_attention.cpp), so those three are what this file widens to 16 lanes:
//   dequant: bf16 (zero-extend, shift), f16 (vcvtph2ps), fp8_e4m3 (the weight kernel's widening,
//            e4m3x16_to_f32, after a scan for the NaN codes), int8 (sign-extend, convert);
//   scores:  each row's dot product in two 16-lane fma chains (alternate 16-element blocks), the
//            two added, folded to 8 lanes and 8 rows reduced together by a transpose (hadd) tree;
//   accum:   out[d] += w[j] * row_j[d], one fma chain per element over j in order: the AVX2
//            kernel's arithmetic per element, so the same bits.
// Decoding is exact and bit-identical to the scalar reference (tails and rows holding an e4m3 NaN
// code go to the AVX2 kernels, which are); dot products differ from it only by summation order
// and fma (tests/kv/test_kv_quant.cpp). Every other entry of the table is the AVX2 kernel's.
// For bf16, fp8_e4m3 and int8 the table also has whole-group kernels (KvGroupKernels, below): the
// codes widened once in registers for all heads of the group, no scratch, the same bits.
// On the 2-vCPU Zen 5 VM the AVX2 read path computed well below the bandwidth it was given
// (bench_paged_attention: fp8 KV read at ~9 GB/s, bf16 ~19); these kernels, with the scale
// prefetch in paged_attention.cpp, made decode attention 1.75x (bf16), 2.05x (fp8_e4m3) and 2.07x
// (int8) faster there (docs/KV_QUANT.md, Design: Dequantize in the kernel).
//
// Tested on every machine: tests/kernels/test_paged_attention_avx512_emulated.cpp compiles this
// file against SIMDe (kernels/avx512_compat.h).
#include "kernels/avx512_compat.h"
#include "kernels/paged_attention_internal.h"

#ifndef WARDEN_KV_AVX512_TABLE
#define WARDEN_KV_AVX512_TABLE kv_kernels_avx512
#endif

namespace warden::kernels::detail {
namespace {

// The AVX2 table's kernel for KV type index ti (tails, NaN rows, the formats not widened here).
const KvReadKernels& avx2_kernels(int ti) {
    return kv_kernels_avx2().by_type[ti];
}

constexpr int kF32 = 0, kBf16 = 1, kF16 = 2, kE4m3 = 3, kI8 = 5;

// Lanes 0-7 of the result = the 16-lane sums of v[0..7], a fixed tree per row: the two 256-bit
// halves added, then the AVX2 kernel's hadd transpose.
inline yf reduce8x16(const zf* v) {
    yf h[8];
    for (int r = 0; r < 8; ++r)
        h[r] = WZ(mm256_add_ps)(
            WZ(mm512_castps512_ps256)(v[r]),
            WZ(mm256_castpd_ps)(WZ(mm512_extractf64x4_pd)(WZ(mm512_castps_pd)(v[r]), 1)));
    const yf t0 = WZ(mm256_hadd_ps)(h[0], h[1]), t1 = WZ(mm256_hadd_ps)(h[2], h[3]);
    const yf t2 = WZ(mm256_hadd_ps)(h[4], h[5]), t3 = WZ(mm256_hadd_ps)(h[6], h[7]);
    const yf u0 = WZ(mm256_hadd_ps)(t0, t1), u1 = WZ(mm256_hadd_ps)(t2, t3);
    return WZ(mm256_add_ps)(WZ(mm256_permute2f128_ps)(u0, u1, 0x20),
                            WZ(mm256_permute2f128_ps)(u0, u1, 0x31));
}

// Elements [i, dim) (fewer than 16) of an f32 row, zero-padded.
inline zf load_tail_f32(const float* x, int64_t i, int64_t dim) {
    alignas(64) float buf[kLanes] = {};
    for (int64_t k = 0; k < dim - i; ++k) buf[k] = x[i + k];
    return WZ(mm512_load_ps)(buf);
}

// D: the head dim when it is a compile-time constant (64, 128: loops fully unrolled, no tail), or
// 0 for any dim.
template <int64_t D>
inline zf dot_row(const float* q, zf qtail, const float* r, int64_t dim) {
    if constexpr (D != 0) dim = D;
    zf a0 = WZ(mm512_setzero_ps)(), a1 = WZ(mm512_setzero_ps)();
    int64_t i = 0;
    for (; i + 32 <= dim; i += 32) {
        a0 = fmadd(WZ(mm512_loadu_ps)(q + i), WZ(mm512_loadu_ps)(r + i), a0);
        a1 = fmadd(WZ(mm512_loadu_ps)(q + i + 16), WZ(mm512_loadu_ps)(r + i + 16), a1);
    }
    if (i + 16 <= dim) {
        a0 = fmadd(WZ(mm512_loadu_ps)(q + i), WZ(mm512_loadu_ps)(r + i), a0);
        i += 16;
    }
    if (D == 0 && i < dim) a1 = fmadd(qtail, load_tail_f32(r, i, dim), a1);
    return WZ(mm512_add_ps)(a0, a1);
}

// scores[j] = mult[j] * dot(q, row_j), rows of f32.
template <int64_t D>
void scores_f32_dim(const float* q, const uint8_t* rows, int64_t stride, int64_t n, int64_t dim,
                    const float* mult, float* s) {
    const zf qtail = dim % 16 ? load_tail_f32(q, dim / 16 * 16, dim) : WZ(mm512_setzero_ps)();
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        zf acc[8];
        for (int r = 0; r < 8; ++r)
            acc[r] =
                dot_row<D>(q, qtail, reinterpret_cast<const float*>(rows + (j + r) * stride), dim);
        WZ(mm256_storeu_ps)(s + j, WZ(mm256_mul_ps)(reduce8x16(acc), WZ(mm256_loadu_ps)(mult + j)));
    }
    if (j < n) {
        zf acc[8];
        for (int r = 0; r < 8; ++r)
            acc[r] = j + r < n
                         ? dot_row<D>(q, qtail,
                                      reinterpret_cast<const float*>(rows + (j + r) * stride), dim)
                         : WZ(mm512_setzero_ps)();
        alignas(32) float out[8];
        WZ(mm256_store_ps)(out, reduce8x16(acc));
        for (int64_t r = 0; r < n - j; ++r) s[j + r] = out[r] * mult[j + r];
    }
}

void scores_f32(const float* q, const uint8_t* rows, int64_t stride, int64_t n, int64_t dim,
                const float* mult, float* s) {
    if (dim == 64)
        scores_f32_dim<64>(q, rows, stride, n, dim, mult, s);
    else if (dim == 128)
        scores_f32_dim<128>(q, rows, stride, n, dim, mult, s);
    else
        scores_f32_dim<0>(q, rows, stride, n, dim, mult, s);
}

// out[16K outputs] += sum_j w[j] * row_j: K independent fma chains over the rows.
template <int K>
inline void accum_cols(const float* w, const uint8_t* rows, int64_t stride, int64_t n, float* out) {
    zf o[K];
    for (int k = 0; k < K; ++k) o[k] = WZ(mm512_loadu_ps)(out + 16 * k);
    for (int64_t j = 0; j < n; ++j, rows += stride) {
        const zf wj = WZ(mm512_set1_ps)(w[j]);
        const auto* r = reinterpret_cast<const float*>(rows);
        for (int k = 0; k < K; ++k) o[k] = fmadd(wj, WZ(mm512_loadu_ps)(r + 16 * k), o[k]);
    }
    for (int k = 0; k < K; ++k) WZ(mm512_storeu_ps)(out + 16 * k, o[k]);
}

void accum_f32(const float* w, const uint8_t* rows, int64_t stride, int64_t n, int64_t dim,
               float* out) {
    int64_t d = 0;
    for (; d + 128 <= dim; d += 128) accum_cols<8>(w, rows + d * 4, stride, n, out + d);
    for (; d + 64 <= dim; d += 64) accum_cols<4>(w, rows + d * 4, stride, n, out + d);
    for (; d + 16 <= dim; d += 16) accum_cols<1>(w, rows + d * 4, stride, n, out + d);
    if (d < dim) avx2_kernels(kF32).accum(w, rows + d * 4, stride, n, dim - d, out + d);
}

void dequant_bf16(const uint8_t* row, int64_t dim, float* out) {
    int64_t i = 0;
    for (; i + 16 <= dim; i += 16) WZ(mm512_storeu_ps)(out + i, bf16x16_to_f32(row + 2 * i));
    if (i < dim) avx2_kernels(kBf16).dequant(row + 2 * i, dim - i, out + i);
}

void dequant_f16(const uint8_t* row, int64_t dim, float* out) {
    int64_t i = 0;
    for (; i + 16 <= dim; i += 16) WZ(mm512_storeu_ps)(out + i, f16x16_to_f32(row + 2 * i));
    if (i < dim) avx2_kernels(kF16).dequant(row + 2 * i, dim - i, out + i);
}

// True when the count codes at p hold no NaN code (x.1111.111), which e4m3x16_to_f32 and
// e4m3x16_raw would read as +-480.
inline bool e4m3_finite(const uint8_t* p, int64_t count) {
    const zi m7f = WZ(mm512_set1_epi8)(0x7f);
    int64_t i = 0;
    for (; i + 64 <= count; i += 64) {
        const zi v = WZ(mm512_and_si512)(WZ(mm512_loadu_si512)(p + i), m7f);
        if (WZ(mm512_cmpeq_epi8_mask)(v, m7f) != 0) return false;
    }
    for (; i < count; ++i)
        if ((p[i] & 0x7f) == 0x7f) return false;
    return true;
}

// A run holding a NaN code goes whole to the AVX2 kernel (which decodes it exactly, NaN as NaN);
// so does the tail.
void dequant_e4m3(const uint8_t* row, int64_t dim, float* out) {
    if (!e4m3_finite(row, dim)) {
        avx2_kernels(kE4m3).dequant(row, dim, out);
        return;
    }
    int64_t i = 0;
    for (; i + 16 <= dim; i += 16) WZ(mm512_storeu_ps)(out + i, e4m3x16_to_f32(row + i));
    if (i < dim) avx2_kernels(kE4m3).dequant(row + i, dim - i, out + i);
}

void dequant_i8(const uint8_t* row, int64_t dim, float* out) {
    int64_t i = 0;
    for (; i + 16 <= dim; i += 16) WZ(mm512_storeu_ps)(out + i, i8x16_to_f32(row + i));
    if (i < dim) avx2_kernels(kI8).dequant(row + i, dim - i, out + i);
}

// Whole-group kernels (KvGroupKernels): each page's run of codes widened once, in registers, for
// every head of the group, with no f32 scratch between decoding and use. L says how 16 codes
// become 16 f32 and what the other operand must carry:
//   e4m3: widened without their * 2^120 (e4m3x16_raw); the query (scores) or the weight (accum)
//         carries the 2^120 instead. The product of the two is the product of the value and the
//         query exactly (x * 2^120 is exact for |x| < 2^8, and the fma rounds the exact product
//         once). A NaN code (read as +-480 raw) or an |x| >= 2^8 declines the call;
//   int8, bf16: widened to their exact values, nothing carried, nothing to decline.
// So each head's chains are scores_f32_dim's / accum_f32's on the decoded rows, bit for bit. Head
// dims 64 and 128; at most kGroupHeads heads share one widening (registers), more take turns.
struct GrE4m3 {
    static constexpr int64_t kBytes = 1;
    static constexpr bool kScaled = true;  // x * 2^120 meets the raw widening
    static zf load16(const uint8_t* p) { return e4m3x16_raw(p); }
};
struct GrI8 {
    static constexpr int64_t kBytes = 1;
    static constexpr bool kScaled = false;
    static zf load16(const uint8_t* p) { return i8x16_to_f32(p); }
};
struct GrBf16 {
    static constexpr int64_t kBytes = 2;
    static constexpr bool kScaled = false;
    static zf load16(const uint8_t* p) { return bf16x16_to_f32(p); }
};

// True when every |x[i]| < 2^8 (NaN fails): x * 2^120 is then finite and exact. Runs once per
// page and head group, so 16 lanes at a time.
inline bool below_pow8(const float* x, int64_t n) {
    const zf lim = WZ(mm512_set1_ps)(256.0f);
    const zi abs_mask = WZ(mm512_set1_epi32)(0x7fffffff);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const zf a = WZ(mm512_castsi512_ps)(
            WZ(mm512_and_si512)(WZ(mm512_castps_si512)(WZ(mm512_loadu_ps)(x + i)), abs_mask));
        if (WZ(mm512_cmp_ps_mask)(a, lim, WZC(_CMP_LT_OQ)) != 0xffff) return false;  // NaN: false
    }
    for (; i < n; ++i)
        if (!(x[i] < 256.0f && x[i] > -256.0f)) return false;
    return true;
}

// Heads [0, HC) of qs (the query as L needs it, D floats per head): their scores over rows
// [0, n) (D codes each, L::kBytes bytes per code).
template <class L, int64_t D, int HC>
void group_scores_heads(const float* qs, const uint8_t* rows, int64_t n, const float* mult,
                        float* s, int64_t s_stride) {
    constexpr int kV = static_cast<int>(D / 16);
    for (int64_t j = 0; j < n; j += 8) {
        zf acc[HC][8];
        for (int r = 0; r < 8; ++r) {
            if (j + r >= n) {
                for (int h = 0; h < HC; ++h) acc[h][r] = WZ(mm512_setzero_ps)();
                continue;
            }
            zf x[kV];
            for (int v = 0; v < kV; ++v)
                x[v] = L::load16(rows + ((j + r) * D + 16 * v) * L::kBytes);
            for (int h = 0; h < HC; ++h) {
                zf a0 = WZ(mm512_setzero_ps)(), a1 = WZ(mm512_setzero_ps)();
                for (int v = 0; v < kV; v += 2) {  // dot_row's two chains, the same order
                    a0 = fmadd(WZ(mm512_loadu_ps)(qs + h * D + 16 * v), x[v], a0);
                    a1 = fmadd(WZ(mm512_loadu_ps)(qs + h * D + 16 * v + 16), x[v + 1], a1);
                }
                acc[h][r] = WZ(mm512_add_ps)(a0, a1);
            }
        }
        for (int h = 0; h < HC; ++h) {
            float* sh = s + h * s_stride;
            if (j + 8 <= n) {
                WZ(mm256_storeu_ps)
                (sh + j, WZ(mm256_mul_ps)(reduce8x16(acc[h]), WZ(mm256_loadu_ps)(mult + j)));
            } else {
                alignas(32) float out[8];
                WZ(mm256_store_ps)(out, reduce8x16(acc[h]));
                for (int64_t r = 0; r < n - j; ++r) sh[j + r] = out[r] * mult[j + r];
            }
        }
    }
}

template <class L, int64_t D>
void group_scores_dim(const float* qs, int64_t n_h, const uint8_t* rows, int64_t n,
                      const float* mult, float* s, int64_t s_stride) {
    by_head_groups<kGroupHeads>(n_h, [&]<int HC>(int64_t h0) {
        group_scores_heads<L, D, HC>(qs + h0 * D, rows, n, mult, s + h0 * s_stride, s_stride);
    });
}

template <class L>
bool group_prepare(const float* q, int64_t n_h, int64_t dim, float* qs) {
    return group_queries<L::kScaled>(q, n_h, dim, qs,
                                     [](const float* p, int64_t n) { return below_pow8(p, n); });
}

template <class L>
bool group_scores(const float* qs, int64_t n_h, const uint8_t* rows, int64_t n, int64_t dim,
                  const float* mult, float* s, int64_t s_stride) {
    if (dim != 64 && dim != 128) return false;
    if (L::kScaled && !e4m3_finite(rows, n * dim)) return false;
    if (dim == 64)
        group_scores_dim<L, 64>(qs, n_h, rows, n, mult, s, s_stride);
    else
        group_scores_dim<L, 128>(qs, n_h, rows, n, mult, s, s_stride);
    return true;
}

// Heads [0, HC): out_h += sum_j w_h[j] * row_j, each element one fma chain over j in order.
template <class L, int64_t D, int HC>
void group_accum_heads(const float* w, int64_t w_stride, const uint8_t* rows, int64_t n, float* out,
                       int64_t o_stride) {
    constexpr int kV = static_cast<int>(D / 16);
    zf o[HC][kV];
    for (int h = 0; h < HC; ++h)
        for (int v = 0; v < kV; ++v) o[h][v] = WZ(mm512_loadu_ps)(out + h * o_stride + 16 * v);
    for (int64_t j = 0; j < n; ++j) {
        zf x[kV];
        for (int v = 0; v < kV; ++v) x[v] = L::load16(rows + (j * D + 16 * v) * L::kBytes);
        for (int h = 0; h < HC; ++h) {
            const float wv = w[h * w_stride + j];
            const zf wj = WZ(mm512_set1_ps)(L::kScaled ? wv * kE4m3Pow120 : wv);
            for (int v = 0; v < kV; ++v) o[h][v] = fmadd(wj, x[v], o[h][v]);
        }
    }
    for (int h = 0; h < HC; ++h)
        for (int v = 0; v < kV; ++v) WZ(mm512_storeu_ps)(out + h * o_stride + 16 * v, o[h][v]);
}

template <class L, int64_t D>
void group_accum_dim(const float* w, int64_t w_stride, int64_t n_h, const uint8_t* rows, int64_t n,
                     float* out, int64_t o_stride) {
    // 128-dim heads hold 8 accumulators each: two at a time fit the registers with the row.
    by_head_groups<D == 64 ? kGroupHeads : 2>(n_h, [&]<int HC>(int64_t h0) {
        group_accum_heads<L, D, HC>(w + h0 * w_stride, w_stride, rows, n, out + h0 * o_stride,
                                    o_stride);
    });
}

template <class L>
bool group_accum(const float* w, int64_t w_stride, int64_t n_h, const uint8_t* rows, int64_t n,
                 int64_t dim, float* out, int64_t o_stride) {
    if (dim != 64 && dim != 128) return false;
    if (L::kScaled) {
        for (int64_t h = 0; h < n_h; ++h)
            if (!below_pow8(w + h * w_stride, n)) return false;
        if (!e4m3_finite(rows, n * dim)) return false;
    }
    if (dim == 64)
        group_accum_dim<L, 64>(w, w_stride, n_h, rows, n, out, o_stride);
    else
        group_accum_dim<L, 128>(w, w_stride, n_h, rows, n, out, o_stride);
    return true;
}

}  // namespace

const KvKernelTable& WARDEN_KV_AVX512_TABLE() {
    static const KvKernelTable t = [] {
        KvKernelTable k = kv_kernels_avx2();
        k.by_type[kF32].scores = scores_f32;
        k.by_type[kF32].accum = accum_f32;
        k.by_type[kBf16].dequant = dequant_bf16;
        k.by_type[kF16].dequant = dequant_f16;
        k.by_type[kE4m3].dequant = dequant_e4m3;
        k.by_type[kI8].dequant = dequant_i8;
        k.group[kE4m3] = {group_prepare<GrE4m3>, group_scores<GrE4m3>, group_accum<GrE4m3>};
        k.group[kI8] = {group_prepare<GrI8>, group_scores<GrI8>, group_accum<GrI8>};
        k.group[kBf16] = {group_prepare<GrBf16>, group_scores<GrBf16>, group_accum<GrBf16>};
        return k;
    }();
    return t;
}

}  // namespace warden::kernels::detail
