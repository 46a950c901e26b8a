// AVX-512 (F/BW/VL/DQ) variants of the element-wise / reduction kernels, 16 f32 lanes. Same
// algorithms as ops_avx2.cpp (same exp polynomial, same integer RNE for bf16) so results are
// comparable with the same tolerances. Not using vcvtneps2bf16 for f32->bf16: it flushes
// denormal inputs to zero, which would break bit-exactness with tensor::f32_to_bf16.
// NOTE: compiled everywhere but only exercised on machines with AVX-512 (see tests).
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12 reports false -Wmaybe-uninitialized inside avx512fintrin.h for intrinsics built on
// _mm512_undefined_* (GCC bug 105593); the diagnostic points into the system header, so it
// can only be silenced for the whole file.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include <cstring>

#include "kernels/kernels_internal.h"

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

inline __m512 load_bf16(const bf16* p) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// See exp_ps in ops_avx2.cpp for the derivation and range handling.
inline __m512 exp_ps(__m512 x) {
    const __m512 xc = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(88.0f)),
                                    _mm512_set1_ps(-87.3f));
    const __m512 fx = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)),
                                           _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(fx, _mm512_set1_ps(0.693359375f), xc);
    r = _mm512_fnmadd_ps(fx, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    const __m512 r2 = _mm512_mul_ps(r, r);
    p = _mm512_add_ps(_mm512_fmadd_ps(p, r2, r), _mm512_set1_ps(1.0f));
    const __m512i e = _mm512_slli_epi32(
        _mm512_add_epi32(_mm512_cvtps_epi32(fx), _mm512_set1_epi32(127)), 23);
    const __m512 res = _mm512_mul_ps(p, _mm512_castsi512_ps(e));
    const __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.3f), _CMP_GE_OQ);
    return _mm512_maskz_mov_ps(keep, res);
}

inline float exp_s(float x) { return _mm512_cvtss_f32(exp_ps(_mm512_set1_ps(x))); }

void rmsnorm(const float* x, const float* w, float* y, int64_t n, float eps) {
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m512 v0 = _mm512_loadu_ps(x + i), v1 = _mm512_loadu_ps(x + i + 16);
        a0 = _mm512_fmadd_ps(v0, v0, a0);
        a1 = _mm512_fmadd_ps(v1, v1, a1);
    }
    float ss = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
    for (; i < n; ++i) ss += x[i] * x[i];
    if (n <= 0) return;
    const float inv = 1.0f / __builtin_sqrtf(ss / static_cast<float>(n) + eps);
    const __m512 vi = _mm512_set1_ps(inv);
    i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 v = _mm512_mul_ps(_mm512_loadu_ps(x + i), vi);
        if (w) v = _mm512_mul_ps(v, _mm512_loadu_ps(w + i));
        _mm512_storeu_ps(y + i, v);
    }
    for (; i < n; ++i) y[i] = x[i] * inv * (w ? w[i] : 1.0f);
}

void silu_mul(const float* gate, const float* up, float* out, int64_t n) {
    const __m512 one = _mm512_set1_ps(1.0f);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 g = _mm512_loadu_ps(gate + i);
        const __m512 e = exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), g));
        const __m512 s = _mm512_div_ps(g, _mm512_add_ps(one, e));
        _mm512_storeu_ps(out + i, _mm512_mul_ps(s, _mm512_loadu_ps(up + i)));
    }
    for (; i < n; ++i) out[i] = gate[i] / (1.0f + exp_s(-gate[i])) * up[i];
}

void softmax_stats(float* x, int64_t n, float* max_out, float* sum_out) {
    *max_out = 0.0f;
    *sum_out = 0.0f;
    if (n <= 0) return;
    int64_t i = 0;
    __m512 vm = _mm512_set1_ps(x[0]);
    for (; i + 16 <= n; i += 16) vm = _mm512_max_ps(vm, _mm512_loadu_ps(x + i));
    float mx = _mm512_reduce_max_ps(vm);
    for (; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
    const __m512 m = _mm512_set1_ps(mx);
    __m512 vs = _mm512_setzero_ps();
    i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 e = exp_ps(_mm512_sub_ps(_mm512_loadu_ps(x + i), m));
        _mm512_storeu_ps(x + i, e);
        vs = _mm512_add_ps(vs, e);
    }
    float sum = _mm512_reduce_add_ps(vs);
    for (; i < n; ++i) {
        x[i] = exp_s(x[i] - mx);
        sum += x[i];
    }
    *max_out = mx;
    *sum_out = sum;
    const float inv = 1.0f / sum;
    const __m512 vi = _mm512_set1_ps(inv);
    i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, _mm512_mul_ps(_mm512_loadu_ps(x + i), vi));
    for (; i < n; ++i) x[i] *= inv;
}

void softmax(float* x, int64_t n) {
    float mx, sum;
    softmax_stats(x, n, &mx, &sum);
}

float dot_f32(const float* a, const float* b, int64_t n) {
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
        s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), s1);
    }
    for (; i + 16 <= n; i += 16)
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
    float s = _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
    for (; i < n; ++i) s += a[i] * b[i];
    return s;
}

float dot_bf16(const float* a, const bf16* b, int64_t n) {
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), load_bf16(b + i), s0);
        s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), load_bf16(b + i + 16), s1);
    }
    for (; i + 16 <= n; i += 16) s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), load_bf16(b + i), s0);
    float s = _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
    for (; i < n; ++i) s += a[i] * bf16_to_f32_s(b[i]);
    return s;
}

void axpy_f32(float a, const float* x, float* y, int64_t n) {
    const __m512 va = _mm512_set1_ps(a);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_fmadd_ps(va, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
    for (; i < n; ++i) y[i] += a * x[i];
}

void axpy_bf16(float a, const bf16* x, float* y, int64_t n) {
    const __m512 va = _mm512_set1_ps(a);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_fmadd_ps(va, load_bf16(x + i), _mm512_loadu_ps(y + i)));
    for (; i < n; ++i) y[i] += a * bf16_to_f32_s(x[i]);
}

void f32_to_bf16_row(const float* x, bf16* y, int64_t n) {
    const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
    const __m512i bias = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1),
                  quiet = _mm512_set1_epi32(0x40);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512i u = _mm512_loadu_si512(x + i);
        const __mmask16 is_nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(u, abs_mask), inf);
        const __m512i hi = _mm512_srli_epi32(u, 16);
        const __m512i lsb = _mm512_and_si512(hi, one);
        const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(bias, lsb)), 16);
        const __m512i r = _mm512_mask_blend_epi32(is_nan, rounded, _mm512_or_si512(hi, quiet));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), _mm512_cvtepi32_epi16(r));
    }
    for (; i < n; ++i) y[i] = f32_to_bf16_s(x[i]);
}

void bf16_to_f32_row(const bf16* x, float* y, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, load_bf16(x + i));
    for (; i < n; ++i) y[i] = bf16_to_f32_s(x[i]);
}

}  // namespace

const OpsTable& ops_avx512() {
    static const OpsTable t{rmsnorm,  silu_mul,  softmax,         softmax_stats,   dot_f32,
                            dot_bf16, axpy_f32, axpy_bf16, f32_to_bf16_row, bf16_to_f32_row};
    return t;
}

}  // namespace warden::kernels::detail
