// AVX-512 (F/BW/VL/DQ) variants of the element-wise / reduction kernels, 16 f32 lanes. Same
// algorithms as ops_avx2.cpp (same exp polynomial, same integer RNE for bf16) so results are
// comparable with the same tolerances. Not using vcvtneps2bf16 for f32->bf16: it flushes
// denormal inputs to zero, which would break bit-exactness with tensor::f32_to_bf16.
// Tested on every machine: tests/kernels/test_ops_avx512_emulated.cpp compiles this file against
// SIMDe's portable intrinsics (kernels/avx512_compat.h) and tests/kernels/test_ops.cpp compares
// that table with the scalar one, as it does the native table on AVX-512 machines.
#include <cstring>
#include <limits>

#include "kernels/avx512_compat.h"
#include "kernels/kernels_internal.h"

#ifndef WARDEN_OPS_AVX512_ENTRY
#define WARDEN_OPS_AVX512_ENTRY ops_avx512
#endif

namespace warden::kernels::detail {
namespace {

inline float bf16_to_f32_s(bf16 h) {
    const uint32_t u = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

inline bf16 f32_to_bf16_s(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<bf16>((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return static_cast<bf16>(u >> 16);
}

inline zf load_bf16(const bf16* p) {
    return bf16x16_to_f32(p);
}

// See exp_ps in ops_avx2.cpp for the derivation and range handling.
inline zf exp_ps(zf x) {
    const zf xc =
        WZ(mm512_max_ps)(WZ(mm512_min_ps)(x, WZ(mm512_set1_ps)(88.0f)), WZ(mm512_set1_ps)(-87.3f));
    const zf fx =
        WZ(mm512_roundscale_ps)(WZ(mm512_mul_ps)(xc, WZ(mm512_set1_ps)(1.44269504088896341f)),
                                WZC(_MM_FROUND_TO_NEAREST_INT) | WZC(_MM_FROUND_NO_EXC));
    zf r = fnmadd(fx, WZ(mm512_set1_ps)(0.693359375f), xc);
    r = fnmadd(fx, WZ(mm512_set1_ps)(-2.12194440e-4f), r);
    zf p = WZ(mm512_set1_ps)(1.9875691500e-4f);
    p = fmadd(p, r, WZ(mm512_set1_ps)(1.3981999507e-3f));
    p = fmadd(p, r, WZ(mm512_set1_ps)(8.3334519073e-3f));
    p = fmadd(p, r, WZ(mm512_set1_ps)(4.1665795894e-2f));
    p = fmadd(p, r, WZ(mm512_set1_ps)(1.6666665459e-1f));
    p = fmadd(p, r, WZ(mm512_set1_ps)(5.0000001201e-1f));
    const zf r2 = WZ(mm512_mul_ps)(r, r);
    p = WZ(mm512_add_ps)(fmadd(p, r2, r), WZ(mm512_set1_ps)(1.0f));
    const zi e =
        WZ(mm512_slli_epi32)(WZ(mm512_add_epi32)(f32_to_i32(fx), WZ(mm512_set1_epi32)(127)), 23);
    const zf res = WZ(mm512_mul_ps)(p, WZ(mm512_castsi512_ps)(e));
    const mask16 keep = WZ(mm512_cmp_ps_mask)(x, WZ(mm512_set1_ps)(-87.3f), WZC(_CMP_GE_OQ));
    return WZ(mm512_maskz_mov_ps)(keep, res);
}

inline float exp_s(float x) {
    return WZ(mm_cvtss_f32)(WZ(mm512_castps512_ps128)(exp_ps(WZ(mm512_set1_ps)(x))));
}

void rmsnorm(const float* x, const float* w, float* y, int64_t n, float eps) {
    zf a0 = WZ(mm512_setzero_ps)(), a1 = WZ(mm512_setzero_ps)();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const zf v0 = WZ(mm512_loadu_ps)(x + i), v1 = WZ(mm512_loadu_ps)(x + i + 16);
        a0 = fmadd(v0, v0, a0);
        a1 = fmadd(v1, v1, a1);
    }
    float ss = reduce_add(WZ(mm512_add_ps)(a0, a1));
    for (; i < n; ++i) ss += x[i] * x[i];
    if (n <= 0) return;
    const float inv = 1.0f / __builtin_sqrtf(ss / static_cast<float>(n) + eps);
    const zf vi = WZ(mm512_set1_ps)(inv);
    i = 0;
    for (; i + 16 <= n; i += 16) {
        zf v = WZ(mm512_mul_ps)(WZ(mm512_loadu_ps)(x + i), vi);
        if (w) v = WZ(mm512_mul_ps)(v, WZ(mm512_loadu_ps)(w + i));
        WZ(mm512_storeu_ps)(y + i, v);
    }
    for (; i < n; ++i) y[i] = x[i] * inv * (w ? w[i] : 1.0f);
}

void silu_mul(const float* gate, const float* up, float* out, int64_t n) {
    const zf one = WZ(mm512_set1_ps)(1.0f);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const zf g = WZ(mm512_loadu_ps)(gate + i);
        const zf e = exp_ps(WZ(mm512_sub_ps)(WZ(mm512_setzero_ps)(), g));
        const zf s = WZ(mm512_div_ps)(g, WZ(mm512_add_ps)(one, e));
        WZ(mm512_storeu_ps)(out + i, WZ(mm512_mul_ps)(s, WZ(mm512_loadu_ps)(up + i)));
    }
    for (; i < n; ++i) out[i] = gate[i] / (1.0f + exp_s(-gate[i])) * up[i];
}

void softmax_stats(float* x, int64_t n, float* max_out, float* sum_out) {
    *max_out = 0.0f;
    *sum_out = 0.0f;
    if (n <= 0) return;
    int64_t i = 0;
    zf vm = WZ(mm512_set1_ps)(x[0]);
    for (; i + 16 <= n; i += 16) vm = WZ(mm512_max_ps)(vm, WZ(mm512_loadu_ps)(x + i));
    float mx = reduce_max(vm);
    for (; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
    const zf m = WZ(mm512_set1_ps)(mx);
    zf vs = WZ(mm512_setzero_ps)();
    i = 0;
    for (; i + 16 <= n; i += 16) {
        const zf e = exp_ps(WZ(mm512_sub_ps)(WZ(mm512_loadu_ps)(x + i), m));
        WZ(mm512_storeu_ps)(x + i, e);
        vs = WZ(mm512_add_ps)(vs, e);
    }
    float sum = reduce_add(vs);
    for (; i < n; ++i) {
        x[i] = exp_s(x[i] - mx);
        sum += x[i];
    }
    *max_out = mx;
    *sum_out = sum;
    const float inv = 1.0f / sum;
    const zf vi = WZ(mm512_set1_ps)(inv);
    i = 0;
    for (; i + 16 <= n; i += 16)
        WZ(mm512_storeu_ps)(x + i, WZ(mm512_mul_ps)(WZ(mm512_loadu_ps)(x + i), vi));
    for (; i < n; ++i) x[i] *= inv;
}

void softmax(float* x, int64_t n) {
    float mx, sum;
    softmax_stats(x, n, &mx, &sum);
}

float dot_f32(const float* a, const float* b, int64_t n) {
    zf s0 = WZ(mm512_setzero_ps)(), s1 = WZ(mm512_setzero_ps)();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = fmadd(WZ(mm512_loadu_ps)(a + i), WZ(mm512_loadu_ps)(b + i), s0);
        s1 = fmadd(WZ(mm512_loadu_ps)(a + i + 16), WZ(mm512_loadu_ps)(b + i + 16), s1);
    }
    for (; i + 16 <= n; i += 16)
        s0 = fmadd(WZ(mm512_loadu_ps)(a + i), WZ(mm512_loadu_ps)(b + i), s0);
    float s = reduce_add(WZ(mm512_add_ps)(s0, s1));
    for (; i < n; ++i) s += a[i] * b[i];
    return s;
}

float dot_bf16(const float* a, const bf16* b, int64_t n) {
    zf s0 = WZ(mm512_setzero_ps)(), s1 = WZ(mm512_setzero_ps)();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = fmadd(WZ(mm512_loadu_ps)(a + i), load_bf16(b + i), s0);
        s1 = fmadd(WZ(mm512_loadu_ps)(a + i + 16), load_bf16(b + i + 16), s1);
    }
    for (; i + 16 <= n; i += 16) s0 = fmadd(WZ(mm512_loadu_ps)(a + i), load_bf16(b + i), s0);
    float s = reduce_add(WZ(mm512_add_ps)(s0, s1));
    for (; i < n; ++i) s += a[i] * bf16_to_f32_s(b[i]);
    return s;
}

void axpy_f32(float a, const float* x, float* y, int64_t n) {
    const zf va = WZ(mm512_set1_ps)(a);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        WZ(mm512_storeu_ps)(y + i, fmadd(va, WZ(mm512_loadu_ps)(x + i), WZ(mm512_loadu_ps)(y + i)));
    for (; i < n; ++i) y[i] += a * x[i];
}

void axpy_bf16(float a, const bf16* x, float* y, int64_t n) {
    const zf va = WZ(mm512_set1_ps)(a);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        WZ(mm512_storeu_ps)(y + i, fmadd(va, load_bf16(x + i), WZ(mm512_loadu_ps)(y + i)));
    for (; i < n; ++i) y[i] += a * bf16_to_f32_s(x[i]);
}

void f32_to_bf16_row(const float* x, bf16* y, int64_t n) {
    const zi abs_mask = WZ(mm512_set1_epi32)(0x7fffffff), inf = WZ(mm512_set1_epi32)(0x7f800000);
    const zi bias = WZ(mm512_set1_epi32)(0x7fff), one = WZ(mm512_set1_epi32)(1),
             quiet = WZ(mm512_set1_epi32)(0x40);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const zi u = WZ(mm512_loadu_si512)(x + i);
        const mask16 is_nan = WZ(mm512_cmpgt_epi32_mask)(WZ(mm512_and_si512)(u, abs_mask), inf);
        const zi hi = WZ(mm512_srli_epi32)(u, 16);
        const zi lsb = WZ(mm512_and_si512)(hi, one);
        const zi rounded =
            WZ(mm512_srli_epi32)(WZ(mm512_add_epi32)(u, WZ(mm512_add_epi32)(bias, lsb)), 16);
        const zi r = WZ(mm512_mask_blend_epi32)(is_nan, rounded, WZ(mm512_or_si512)(hi, quiet));
        store_low16(y + i, r);
    }
    for (; i < n; ++i) y[i] = f32_to_bf16_s(x[i]);
}

void bf16_to_f32_row(const bf16* x, float* y, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) WZ(mm512_storeu_ps)(y + i, load_bf16(x + i));
    for (; i < n; ++i) y[i] = bf16_to_f32_s(x[i]);
}

// kernels::argmax, as in ops_avx2.cpp with two accumulators of 16 lanes: per lane the largest
// value seen and its first index (strict >: no NaN, no later equal value), lanes starting at
// -inf with index -1; then argmax_merge.
int64_t argmax(const float* x, int64_t n) {
    if (n <= 1 || x[0] != x[0] || n > INT32_MAX) return argmax_scalar(x, n);
    const zf neg_inf = WZ(mm512_set1_ps)(-std::numeric_limits<float>::infinity());
    zf m0 = neg_inf, m1 = neg_inf;
    zi i0 = WZ(mm512_set1_epi32)(-1), i1 = i0;
    zi idx = WZ(mm512_setr_epi32)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const zi sixteen = WZ(mm512_set1_epi32)(16), thirty_two = WZ(mm512_set1_epi32)(32);
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const zf a = WZ(mm512_loadu_ps)(x + i), b = WZ(mm512_loadu_ps)(x + i + 16);
        const mask16 ga = WZ(mm512_cmp_ps_mask)(a, m0, WZC(_CMP_GT_OQ));
        const mask16 gb = WZ(mm512_cmp_ps_mask)(b, m1, WZC(_CMP_GT_OQ));
        m0 = WZ(mm512_mask_mov_ps)(m0, ga, a);
        m1 = WZ(mm512_mask_mov_ps)(m1, gb, b);
        i0 = WZ(mm512_mask_mov_epi32)(i0, ga, idx);
        i1 = WZ(mm512_mask_mov_epi32)(i1, gb, WZ(mm512_add_epi32)(idx, sixteen));
        idx = WZ(mm512_add_epi32)(idx, thirty_two);
    }
    alignas(64) float mv[32];
    alignas(64) int32_t iv[32];
    WZ(mm512_store_ps)(mv, m0);
    WZ(mm512_store_ps)(mv + 16, m1);
    WZ(mm512_store_si512)(iv, i0);
    WZ(mm512_store_si512)(iv + 16, i1);
    return argmax_merge(mv, iv, 32, x, i, n);
}

}  // namespace

const OpsTable& WARDEN_OPS_AVX512_ENTRY() {
    static const OpsTable t{rmsnorm,         silu_mul,        softmax,  softmax_stats,
                            dot_f32,         dot_bf16,        axpy_f32, axpy_bf16,
                            f32_to_bf16_row, bf16_to_f32_row, argmax};
    return t;
}

}  // namespace warden::kernels::detail
