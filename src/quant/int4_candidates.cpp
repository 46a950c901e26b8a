#include "quant/int4_candidates.h"

#include <algorithm>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#if defined(__GNUC__) && !defined(__clang__)
// GCC 12 reports false -Wmaybe-uninitialized inside avx512fintrin.h for intrinsics built on
// _mm512_undefined_* (GCC bug 105593), pointing into the system header: silenced for the file.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include "kernels/cpu_features.h"
#include "tensor/float_convert.h"

namespace warden::quant {

namespace {

// The reference: eight lanes per candidate, lane k summing elements k, k + 8, ... in order. The
// SIMD versions below do exactly these operations per lane.
inline float round_clamped(float v, float lo, float hi) {
    return (std::min(hi, std::max(lo, v)) + kRoundMagic) - kRoundMagic;
}
inline float sum8(const float* a) {
    return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

float error_ref(const float* x, const float* wt, int64_t G, float d, float m, float lo, float hi) {
    const float id = 1.0f / d;
    float acc[8] = {};
    for (int64_t i = 0; i < G; i += 8)
        for (int k = 0; k < 8; ++k) {
            const float r = round_clamped((x[i + k] - m) * id, lo, hi);
            const float e = x[i + k] - (r * d + m);
            acc[k] += wt[i + k] * e * e;
        }
    return sum8(acc);
}

void reduce_refit(const float* sxl, const float* sll, float* a, float* b) {
    float sa = 0.0f, sb = 0.0f;
    for (int k = 0; k < 8; ++k) {
        sa += sxl[k];
        sb += sll[k];
    }
    *a = sa;
    *b = sb;
}

void refit_ref(const float* x, const float* wt, int64_t G, float is, float* a, float* b) {
    float sxl[8] = {}, sll[8] = {};
    for (int64_t i = 0; i < G; i += 8)
        for (int k = 0; k < 8; ++k) {
            const float r = round_clamped(x[i + k] * is, -8.0f, 7.0f);
            sxl[k] += wt[i + k] * x[i + k] * r;
            sll[k] += wt[i + k] * r * r;
        }
    reduce_refit(sxl, sll, a, b);
}

void sums_from(const float* l1, const float* l2, const float* lx, double* s) {
    s[0] = s[1] = s[2] = 0.0;
    for (int k = 0; k < 8; ++k) {
        s[0] += l1[k];
        s[1] += l2[k];
        s[2] += lx[k];
    }
}

void asym_sums_ref(const float* x, const float* wt, int64_t G, float mn, float is, double* s) {
    float l1[8] = {}, l2[8] = {}, lx[8] = {};
    for (int64_t i = 0; i < G; i += 8)
        for (int k = 0; k < 8; ++k) {
            const float r = round_clamped((x[i + k] - mn) * is, 0.0f, 15.0f), wr = wt[i + k] * r;
            l1[k] += wr;
            l2[k] += wr * r;
            lx[k] += wr * x[i + k];
        }
    sums_from(l1, l2, lx, s);
}

inline __attribute__((always_inline)) void int8_errors_lanes(const float* x, const float* imp,
                                                             int64_t n, const float* d,
                                                             double* err) {
    float id[8];
    double acc[8] = {};
    for (int c = 0; c < 8; ++c) id[c] = 1.0f / d[c];
    for (int64_t i = 0; i < n; ++i) {
        const double xi = x[i], wi = imp ? imp[i] : 1.0f;
        for (int c = 0; c < 8; ++c) {
            const float r = round_clamped(x[i] * id[c], -127.0f, 127.0f);
            const double e = xi - static_cast<double>(r * d[c]);
            acc[c] += e * e * wi;
        }
    }
    std::copy(acc, acc + 8, err);
}

void int8_errors_base(const float* x, const float* imp, int64_t n, const float* d, double* err) {
    int8_errors_lanes(x, imp, n, d, err);
}

#if defined(__x86_64__)
__attribute__((target("avx2"))) void int8_errors_avx2(const float* x, const float* imp, int64_t n,
                                                      const float* d, double* err) {
    int8_errors_lanes(x, imp, n, d, err);
}

__attribute__((target("avx512f,avx512dq,avx2"))) void int8_errors_avx512(const float* x,
                                                                         const float* imp,
                                                                         int64_t n, const float* d,
                                                                         double* err) {
    const __m256 vd = _mm256_loadu_ps(d), vid = _mm256_div_ps(_mm256_set1_ps(1.0f), vd),
                 lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f),
                 mg = _mm256_set1_ps(kRoundMagic);
    __m512d acc = _mm512_setzero_pd();
    for (int64_t i = 0; i < n; ++i) {
        const __m256 r = _mm256_sub_ps(
            _mm256_add_ps(
                _mm256_min_ps(hi, _mm256_max_ps(lo, _mm256_mul_ps(_mm256_set1_ps(x[i]), vid))), mg),
            mg);
        const __m512d e =
            _mm512_sub_pd(_mm512_set1_pd(x[i]), _mm512_cvtps_pd(_mm256_mul_ps(r, vd)));
        acc = _mm512_add_pd(
            acc, _mm512_mul_pd(_mm512_mul_pd(e, e), _mm512_set1_pd(imp ? imp[i] : 1.0f)));
    }
    _mm512_storeu_pd(err, acc);
}

// No "fma" in these targets: a multiply and an add stay two roundings, as in the reference.

__attribute__((target("avx2"))) inline __m256 round_clamped8(__m256 v, __m256 lo, __m256 hi) {
    const __m256 mg = _mm256_set1_ps(kRoundMagic);
    return _mm256_sub_ps(_mm256_add_ps(_mm256_min_ps(hi, _mm256_max_ps(lo, v)), mg), mg);
}

__attribute__((target("avx2"))) float error_avx2(const float* x, const float* wt, int64_t G,
                                                 float d, float m, float lo, float hi) {
    const __m256 vid = _mm256_set1_ps(1.0f / d), vd = _mm256_set1_ps(d), vm = _mm256_set1_ps(m),
                 vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < G; i += 8) {
        const __m256 xv = _mm256_loadu_ps(x + i);
        const __m256 r = round_clamped8(_mm256_mul_ps(_mm256_sub_ps(xv, vm), vid), vlo, vhi);
        const __m256 e = _mm256_sub_ps(xv, _mm256_add_ps(_mm256_mul_ps(r, vd), vm));
        acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(wt + i), e), e));
    }
    alignas(32) float a[8];
    _mm256_store_ps(a, acc);
    return sum8(a);
}

__attribute__((target("avx2"))) void refit_avx2(const float* x, const float* wt, int64_t G,
                                                float is, float* sa, float* sb) {
    const __m256 vis = _mm256_set1_ps(is), lo = _mm256_set1_ps(-8.0f), hi = _mm256_set1_ps(7.0f);
    __m256 p = _mm256_setzero_ps(), q = p;
    for (int64_t i = 0; i < G; i += 8) {
        const __m256 xv = _mm256_loadu_ps(x + i), wv = _mm256_loadu_ps(wt + i);
        const __m256 r = round_clamped8(_mm256_mul_ps(xv, vis), lo, hi);
        p = _mm256_add_ps(p, _mm256_mul_ps(_mm256_mul_ps(wv, xv), r));
        q = _mm256_add_ps(q, _mm256_mul_ps(_mm256_mul_ps(wv, r), r));
    }
    alignas(32) float a[8], b[8];
    _mm256_store_ps(a, p);
    _mm256_store_ps(b, q);
    reduce_refit(a, b, sa, sb);
}

__attribute__((target("avx2"))) void asym_sums_avx2(const float* x, const float* wt, int64_t G,
                                                    float mn, float is, double* s) {
    const __m256 vis = _mm256_set1_ps(is), vmn = _mm256_set1_ps(mn), lo = _mm256_setzero_ps(),
                 hi = _mm256_set1_ps(15.0f);
    __m256 p = _mm256_setzero_ps(), q = p, u = p;
    for (int64_t i = 0; i < G; i += 8) {
        const __m256 xv = _mm256_loadu_ps(x + i);
        const __m256 r = round_clamped8(_mm256_mul_ps(_mm256_sub_ps(xv, vmn), vis), lo, hi);
        const __m256 wr = _mm256_mul_ps(_mm256_loadu_ps(wt + i), r);
        p = _mm256_add_ps(p, wr);
        q = _mm256_add_ps(q, _mm256_mul_ps(wr, r));
        u = _mm256_add_ps(u, _mm256_mul_ps(wr, xv));
    }
    alignas(32) float a[8], b[8], c[8];
    _mm256_store_ps(a, p);
    _mm256_store_ps(b, q);
    _mm256_store_ps(c, u);
    sums_from(a, b, c, s);
}

// AVX-512: two candidates per register, lanes 0-7 the first and 8-15 the second, each half the
// eight lanes of the reference.
#define WARDEN_AVX512_TARGET __attribute__((target("avx512f,avx512dq,avx2")))

WARDEN_AVX512_TARGET inline __m512 pair(float a, float b) {
    return _mm512_insertf32x8(_mm512_set1_ps(a), _mm256_set1_ps(b), 1);
}
WARDEN_AVX512_TARGET inline __m512 both(const float* p) {
    return _mm512_broadcast_f32x8(_mm256_loadu_ps(p));
}
WARDEN_AVX512_TARGET inline __m512 round_clamped16(__m512 v, __m512 lo, __m512 hi) {
    const __m512 mg = _mm512_set1_ps(kRoundMagic);
    return _mm512_sub_ps(_mm512_add_ps(_mm512_min_ps(hi, _mm512_max_ps(lo, v)), mg), mg);
}

// P pairs of candidates from c on, interleaved so their dependency chains overlap.
template <int P>
WARDEN_AVX512_TARGET inline void errors_pairs(const float* x, const float* wt, int64_t G,
                                              const float* d, const float* m, __m512 vlo,
                                              __m512 vhi, float* err) {
    __m512 vid[P], vd[P], vm[P], acc[P];
    for (int p = 0; p < P; ++p) {
        vid[p] = pair(1.0f / d[2 * p], 1.0f / d[2 * p + 1]);
        vd[p] = pair(d[2 * p], d[2 * p + 1]);
        vm[p] = pair(m[2 * p], m[2 * p + 1]);
        acc[p] = _mm512_setzero_ps();
    }
    for (int64_t i = 0; i < G; i += 8) {
        const __m512 xv = both(x + i), wv = both(wt + i);
        for (int p = 0; p < P; ++p) {
            const __m512 r =
                round_clamped16(_mm512_mul_ps(_mm512_sub_ps(xv, vm[p]), vid[p]), vlo, vhi);
            const __m512 e = _mm512_sub_ps(xv, _mm512_add_ps(_mm512_mul_ps(r, vd[p]), vm[p]));
            acc[p] = _mm512_add_ps(acc[p], _mm512_mul_ps(_mm512_mul_ps(wv, e), e));
        }
    }
    for (int p = 0; p < P; ++p) {
        // sum8 of each half in registers: the same tree of additions (a + b == b + a exactly).
        __m512 t = _mm512_add_ps(acc[p], _mm512_permute_ps(acc[p], 0xB1));  // a0 + a1, a2 + a3
        t = _mm512_add_ps(t, _mm512_permute_ps(t, 0x4E));                   // (a0 + a1) + (a2 + a3)
        t = _mm512_add_ps(t, _mm512_shuffle_f32x4(t, t, 0xB1));             // + ((a4 + a5) + ...)
        err[2 * p] = _mm512_cvtss_f32(t);
        err[2 * p + 1] = _mm_cvtss_f32(_mm512_extractf32x4_ps(t, 2));
    }
}

WARDEN_AVX512_TARGET void errors_avx512(const float* x, const float* wt, int64_t G, const float* d,
                                        const float* m, int nc, float lo, float hi, float* err) {
    const __m512 vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi);
    int c = 0;
    for (; c + 8 <= nc; c += 8) errors_pairs<4>(x, wt, G, d + c, m + c, vlo, vhi, err + c);
    for (; c + 2 <= nc; c += 2) errors_pairs<1>(x, wt, G, d + c, m + c, vlo, vhi, err + c);
    if (c < nc) err[c] = error_avx2(x, wt, G, d[c], m[c], lo, hi);
}

template <int P>
WARDEN_AVX512_TARGET inline void refits_pairs(const float* x, const float* wt, int64_t G,
                                              const float* is, float* sa, float* sb) {
    const __m512 lo = _mm512_set1_ps(-8.0f), hi = _mm512_set1_ps(7.0f);
    __m512 vis[P], ps[P], qs[P];
    for (int p = 0; p < P; ++p) {
        vis[p] = pair(is[2 * p], is[2 * p + 1]);
        ps[p] = qs[p] = _mm512_setzero_ps();
    }
    for (int64_t i = 0; i < G; i += 8) {
        const __m512 xv = both(x + i), wv = both(wt + i), wx = _mm512_mul_ps(wv, xv);
        for (int p = 0; p < P; ++p) {
            const __m512 r = round_clamped16(_mm512_mul_ps(xv, vis[p]), lo, hi);
            ps[p] = _mm512_add_ps(ps[p], _mm512_mul_ps(wx, r));
            qs[p] = _mm512_add_ps(qs[p], _mm512_mul_ps(_mm512_mul_ps(wv, r), r));
        }
    }
    for (int p = 0; p < P; ++p) {
        alignas(64) float a[16], b[16];
        _mm512_store_ps(a, ps[p]);
        _mm512_store_ps(b, qs[p]);
        reduce_refit(a, b, sa + 2 * p, sb + 2 * p);
        reduce_refit(a + 8, b + 8, sa + 2 * p + 1, sb + 2 * p + 1);
    }
}

WARDEN_AVX512_TARGET void refits_avx512(const float* x, const float* wt, int64_t G, const float* is,
                                        int nc, float* sa, float* sb) {
    int c = 0;
    for (; c + 8 <= nc; c += 8) refits_pairs<4>(x, wt, G, is + c, sa + c, sb + c);
    for (; c + 2 <= nc; c += 2) refits_pairs<1>(x, wt, G, is + c, sa + c, sb + c);
    if (c < nc) refit_avx2(x, wt, G, is[c], sa + c, sb + c);
}

WARDEN_AVX512_TARGET void asym_sums_avx512(const float* x, const float* wt, int64_t G, float mn,
                                           const float* is, int nc, double* s) {
    const __m512 vmn = _mm512_set1_ps(mn), lo = _mm512_setzero_ps(), hi = _mm512_set1_ps(15.0f);
    int c = 0;
    for (; c + 1 < nc; c += 2) {
        const __m512 vis = pair(is[c], is[c + 1]);
        __m512 p = _mm512_setzero_ps(), q = p, u = p;
        for (int64_t i = 0; i < G; i += 8) {
            const __m512 xv = both(x + i);
            const __m512 r = round_clamped16(_mm512_mul_ps(_mm512_sub_ps(xv, vmn), vis), lo, hi);
            const __m512 wr = _mm512_mul_ps(both(wt + i), r);
            p = _mm512_add_ps(p, wr);
            q = _mm512_add_ps(q, _mm512_mul_ps(wr, r));
            u = _mm512_add_ps(u, _mm512_mul_ps(wr, xv));
        }
        alignas(64) float a[16], b[16], e[16];
        _mm512_store_ps(a, p);
        _mm512_store_ps(b, q);
        _mm512_store_ps(e, u);
        sums_from(a, b, e, s + 3 * c);
        sums_from(a + 8, b + 8, e + 8, s + 3 * c + 3);
    }
    if (c < nc) asym_sums_avx2(x, wt, G, mn, is[c], s + 3 * c);
}
#undef WARDEN_AVX512_TARGET

__attribute__((target("avx2,f16c"))) void round_f16_avx2(const float* v, int n, uint16_t* h,
                                                         float* back) {
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m128i hv =
            _mm256_cvtps_ph(_mm256_loadu_ps(v + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(h + i), hv);
        _mm256_storeu_ps(back + i, _mm256_cvtph_ps(hv));
    }
    for (; i < n; ++i) {
        h[i] = tensor::f32_to_f16(v[i]);
        back[i] = tensor::f16_to_f32(h[i]);
    }
}

bool use_avx512() {
    return kernels::active_isa() >= kernels::Isa::AVX512;
}
bool use_avx2() {
    return kernels::active_isa() >= kernels::Isa::AVX2;
}
#else
bool use_avx512() {
    return false;
}
bool use_avx2() {
    return false;
}
#endif

}  // namespace

void int4_round_scales(const float* v, int n, bool bf16, uint16_t* h, float* back) {
    if (bf16) {
        for (int i = 0; i < n; ++i) {
            h[i] = tensor::f32_to_bf16(v[i]);
            back[i] = tensor::bf16_to_f32(h[i]);
        }
        return;
    }
#if defined(__x86_64__)
    if (use_avx2()) return round_f16_avx2(v, n, h, back);
#endif
    for (int i = 0; i < n; ++i) {
        h[i] = tensor::f32_to_f16(v[i]);
        back[i] = tensor::f16_to_f32(h[i]);
    }
}

void int4_group_errors(const float* x, const float* wt, int64_t G, const float* d, const float* m,
                       int nc, float lo, float hi, float* err) {
#if defined(__x86_64__)
    if (use_avx512()) return errors_avx512(x, wt, G, d, m, nc, lo, hi, err);
    if (use_avx2()) {
        for (int c = 0; c < nc; ++c) err[c] = error_avx2(x, wt, G, d[c], m[c], lo, hi);
        return;
    }
#endif
    for (int c = 0; c < nc; ++c) err[c] = error_ref(x, wt, G, d[c], m[c], lo, hi);
}

void int8_clip_errors(const float* x, const float* imp, int64_t n, const float* d, int nc,
                      double* err) {
    float dd[8];
    double all[8];
    for (int c = 0; c < 8; ++c) dd[c] = d[std::min(c, nc - 1)];  // spare lanes repeat the last
#if defined(__x86_64__)
    if (use_avx512())
        int8_errors_avx512(x, imp, n, dd, all);
    else if (use_avx2())
        int8_errors_avx2(x, imp, n, dd, all);
    else
#endif
        int8_errors_base(x, imp, n, dd, all);
    std::copy(all, all + nc, err);
}

void int4_group_codes(const float* x, int64_t G, float d, float m, float lo, float hi, float* l) {
    const float id = 1.0f / d;
    for (int64_t i = 0; i < G; ++i) l[i] = round_clamped((x[i] - m) * id, lo, hi);
}

void int4_refit_sums(const float* x, const float* wt, int64_t G, const float* is, int nc,
                     float* sxl, float* sll) {
#if defined(__x86_64__)
    if (use_avx512()) return refits_avx512(x, wt, G, is, nc, sxl, sll);
    if (use_avx2()) {
        for (int c = 0; c < nc; ++c) refit_avx2(x, wt, G, is[c], sxl + c, sll + c);
        return;
    }
#endif
    for (int c = 0; c < nc; ++c) refit_ref(x, wt, G, is[c], sxl + c, sll + c);
}

void int4_asym_sums(const float* x, const float* wt, int64_t G, float mn, const float* is, int nc,
                    double* s) {
#if defined(__x86_64__)
    if (use_avx512()) return asym_sums_avx512(x, wt, G, mn, is, nc, s);
    if (use_avx2()) {
        for (int c = 0; c < nc; ++c) asym_sums_avx2(x, wt, G, mn, is[c], s + 3 * c);
        return;
    }
#endif
    for (int c = 0; c < nc; ++c) asym_sums_ref(x, wt, G, mn, is[c], s + 3 * c);
}

}  // namespace warden::quant
