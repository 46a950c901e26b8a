// AVX2 + FMA variants of the element-wise / reduction kernels (8 f32 lanes). Tails shorter
// than a vector fall back to scalar code in this file (see the ODR note in kernels_internal.h
// for why nothing from shared inline headers is used here).
#include <immintrin.h>

#include <cstring>
#include <limits>

#include "kernels/kernels_internal.h"

namespace warden::kernels::detail {
namespace {

inline float bf16_to_f32_s(bf16 h) {
    const uint32_t u = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

// Same rule as tensor::f32_to_bf16 (RNE, NaN kept quiet); duplicated on purpose, see above.
inline bf16 f32_to_bf16_s(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<bf16>((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return static_cast<bf16>(u >> 16);
}

inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

inline float hmax(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// bf16 -> f32 is exact: zero-extend to 32 bits and shift into the high half.
inline __m256 load_bf16(const bf16* p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

// Cephes-style expf: exp(x) = 2^n * exp(r), r = x - n*ln2 in [-ln2/2, ln2/2] (ln2 split in two
// parts so r is exact), degree-5 minimax polynomial for exp(r); ~1-2 ulp over the whole
// range. Inputs are clamped so 2^n stays a normal float; below -87.3 the result is flushed
// to 0 (true value < 1.2e-38, irrelevant for softmax/silu), above 88 it saturates.
inline __m256 exp_ps(__m256 x) {
    const __m256 xc =
        _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(88.0f)), _mm256_set1_ps(-87.3f));
    const __m256 fx = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), xc);
    r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    const __m256 r2 = _mm256_mul_ps(r, r);
    p = _mm256_add_ps(_mm256_fmadd_ps(p, r2, r), _mm256_set1_ps(1.0f));
    const __m256i e =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127)), 23);
    const __m256 res = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
    const __m256 keep = _mm256_cmp_ps(x, _mm256_set1_ps(-87.3f), _CMP_GE_OQ);
    return _mm256_and_ps(res, keep);
}

// Scalar tail helper with the same formula so a row's tail matches its body.
inline float exp_s(float x) {
    alignas(32) float buf[8] = {x};
    _mm256_store_ps(buf, exp_ps(_mm256_load_ps(buf)));
    return buf[0];
}

void rmsnorm(const float* x, const float* w, float* y, int64_t n, float eps) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256 v0 = _mm256_loadu_ps(x + i), v1 = _mm256_loadu_ps(x + i + 8);
        a0 = _mm256_fmadd_ps(v0, v0, a0);
        a1 = _mm256_fmadd_ps(v1, v1, a1);
    }
    float ss = hsum(_mm256_add_ps(a0, a1));
    for (; i < n; ++i) ss += x[i] * x[i];
    if (n <= 0) return;
    const float inv = 1.0f / __builtin_sqrtf(ss / static_cast<float>(n) + eps);
    const __m256 vi = _mm256_set1_ps(inv);
    i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), vi);
        if (w) v = _mm256_mul_ps(v, _mm256_loadu_ps(w + i));
        _mm256_storeu_ps(y + i, v);
    }
    for (; i < n; ++i) y[i] = x[i] * inv * (w ? w[i] : 1.0f);
}

void silu_mul(const float* gate, const float* up, float* out, int64_t n) {
    const __m256 one = _mm256_set1_ps(1.0f);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 g = _mm256_loadu_ps(gate + i);
        const __m256 e = exp_ps(_mm256_sub_ps(_mm256_setzero_ps(), g));
        const __m256 s = _mm256_div_ps(g, _mm256_add_ps(one, e));
        _mm256_storeu_ps(out + i, _mm256_mul_ps(s, _mm256_loadu_ps(up + i)));
    }
    for (; i < n; ++i) out[i] = gate[i] / (1.0f + exp_s(-gate[i])) * up[i];
}

void softmax_stats(float* x, int64_t n, float* max_out, float* sum_out) {
    *max_out = 0.0f;
    *sum_out = 0.0f;
    if (n <= 0) return;
    int64_t i = 0;
    __m256 vm = _mm256_set1_ps(x[0]);
    for (; i + 8 <= n; i += 8) vm = _mm256_max_ps(vm, _mm256_loadu_ps(x + i));
    float mx = hmax(vm);
    for (; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
    const __m256 m = _mm256_set1_ps(mx);
    __m256 vs = _mm256_setzero_ps();
    i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 e = exp_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), m));
        _mm256_storeu_ps(x + i, e);
        vs = _mm256_add_ps(vs, e);
    }
    float sum = hsum(vs);
    for (; i < n; ++i) {
        x[i] = exp_s(x[i] - mx);
        sum += x[i];
    }
    *max_out = mx;
    *sum_out = sum;
    const float inv = 1.0f / sum;
    const __m256 vi = _mm256_set1_ps(inv);
    i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), vi));
    for (; i < n; ++i) x[i] *= inv;
}

void softmax(float* x, int64_t n) {
    float mx, sum;
    softmax_stats(x, n, &mx, &sum);
}

float dot_f32(const float* a, const float* b, int64_t n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps(), s2 = _mm256_setzero_ps(),
           s3 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {  // four chains hide the FMA latency
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
        s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), s2);
        s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), s3);
    }
    for (; i + 8 <= n; i += 8)
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    float s = hsum(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    for (; i < n; ++i) s += a[i] * b[i];
    return s;
}

float dot_bf16(const float* a, const bf16* b, int64_t n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps(), s2 = _mm256_setzero_ps(),
           s3 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), load_bf16(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), load_bf16(b + i + 8), s1);
        s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), load_bf16(b + i + 16), s2);
        s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), load_bf16(b + i + 24), s3);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), load_bf16(b + i), s0);
    float s = hsum(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    for (; i < n; ++i) s += a[i] * bf16_to_f32_s(b[i]);
    return s;
}

void axpy_f32(float a, const float* x, float* y, int64_t n) {
    const __m256 va = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i,
                         _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; ++i) y[i] += a * x[i];
}

void axpy_bf16(float a, const bf16* x, float* y, int64_t n) {
    const __m256 va = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, load_bf16(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; ++i) y[i] += a * bf16_to_f32_s(x[i]);
}

// Integer RNE on the bit pattern, identical to the scalar rule; NaNs take the quiet path.
void f32_to_bf16_row(const float* x, bf16* y, int64_t n) {
    const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
    const __m256i bias = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1),
                  quiet = _mm256_set1_epi32(0x40);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
        const __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf);
        const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), one);
        const __m256i rounded =
            _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(bias, lsb)), 16);
        const __m256i nan_v = _mm256_or_si256(_mm256_srli_epi32(u, 16), quiet);
        const __m256i r = _mm256_blendv_epi8(rounded, nan_v, is_nan);
        // Values are < 2^16, so the unsigned-saturating pack is exact; it packs per 128-bit
        // lane, hence the cross-lane permute to restore order.
        const __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), _mm256_castsi256_si128(p));
    }
    for (; i < n; ++i) y[i] = f32_to_bf16_s(x[i]);
}

void bf16_to_f32_row(const bf16* x, float* y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, load_bf16(x + i));
    for (; i < n; ++i) y[i] = bf16_to_f32_s(x[i]);
}

// kernels::argmax. Two accumulators (even and odd blocks of 8), each keeping per lane the
// largest value seen and the first index that had it: a strict > never lets in a NaN or a later
// equal value. Lanes start at -inf with index -1; argmax_merge (ops_scalar.cpp) then takes the
// first index of the largest candidate and the tail.
int64_t argmax(const float* x, int64_t n) {
    if (n <= 1 || x[0] != x[0] || n > INT32_MAX) return argmax_scalar(x, n);
    const __m256 neg_inf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
    __m256 m0 = neg_inf, m1 = neg_inf;
    __m256i i0 = _mm256_set1_epi32(-1), i1 = i0;
    __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i eight = _mm256_set1_epi32(8), sixteen = _mm256_set1_epi32(16);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + 8);
        const __m256 ga = _mm256_cmp_ps(a, m0, _CMP_GT_OQ), gb = _mm256_cmp_ps(b, m1, _CMP_GT_OQ);
        m0 = _mm256_blendv_ps(m0, a, ga);
        m1 = _mm256_blendv_ps(m1, b, gb);
        i0 = _mm256_castps_si256(
            _mm256_blendv_ps(_mm256_castsi256_ps(i0), _mm256_castsi256_ps(idx), ga));
        i1 = _mm256_castps_si256(_mm256_blendv_ps(
            _mm256_castsi256_ps(i1), _mm256_castsi256_ps(_mm256_add_epi32(idx, eight)), gb));
        idx = _mm256_add_epi32(idx, sixteen);
    }
    alignas(32) float mv[16];
    alignas(32) int32_t iv[16];
    _mm256_store_ps(mv, m0);
    _mm256_store_ps(mv + 8, m1);
    _mm256_store_si256(reinterpret_cast<__m256i*>(iv), i0);
    _mm256_store_si256(reinterpret_cast<__m256i*>(iv + 8), i1);
    return argmax_merge(mv, iv, 16, x, i, n);
}

}  // namespace

const OpsTable& ops_avx2() {
    static const OpsTable t{rmsnorm,         silu_mul,        softmax,  softmax_stats,
                            dot_f32,         dot_bf16,        axpy_f32, axpy_bf16,
                            f32_to_bf16_row, bf16_to_f32_row, argmax};
    return t;
}

}  // namespace warden::kernels::detail
