#include "quant/kquant_candidates.h"

#include <algorithm>
#include <limits>

#include "kernels/cpu_features.h"
#include "kernels/x86_intrinsics.h"

namespace warden::quant {

namespace {

// The reference, one lane per candidate. Inlined into a baseline and an AVX2 entry point, where
// the compiler vectorizes across the lanes (each lane's operations and order unchanged).
#define WARDEN_LANES_INLINE inline __attribute__((always_inline))

WARDEN_LANES_INLINE void sym_sums_ref(const float* x, const float* w, int n, const float* is,
                                      int nmax, float* slx, float* sl2) {
    float a[kSymLanes] = {}, b[kSymLanes] = {};
    for (int i = 0; i < n; ++i) {
        const float xi = x[i], wi = w[i];
        for (int c = 0; c < kSymLanes; ++c) {
            const auto l =
                static_cast<float>(std::clamp(round_int_magic(is[c] * xi), -nmax, nmax - 1));
            a[c] += wi * xi * l;
            b[c] += wi * l * l;
        }
    }
    std::copy(a, a + kSymLanes, slx);
    std::copy(b, b + kSymLanes, sl2);
}

WARDEN_LANES_INLINE void asym_sums_ref(const float* x, const float* w, int n, float lo,
                                       const float* is, int nmax, float* sl, float* sl2, float* sxl,
                                       float* codes) {
    float a[kLanes] = {}, b[kLanes] = {}, e[kLanes] = {};
    for (int i = 0; i < n; ++i) {
        const float xi = x[i], wi = w[i], d = xi - lo;
        for (int c = 0; c < kLanes; ++c) {
            const auto q = static_cast<float>(std::clamp(round_int_magic(is[c] * d), 0, nmax));
            if (codes) codes[kLanes * i + c] = q;
            a[c] += wi * q;
            b[c] += wi * q * q;
            e[c] += wi * q * xi;
        }
    }
    std::copy(a, a + kLanes, sl);
    std::copy(b, b + kLanes, sl2);
    std::copy(e, e + kLanes, sxl);
}

WARDEN_LANES_INLINE void asym_grid_errors_ref(const float* x, const float* w, int n, float lo,
                                              const float* is, int nmax, const float* scale,
                                              const float* min, float* err) {
    float a[kLanes] = {};
    for (int i = 0; i < n; ++i) {
        const float xi = x[i], wi = w[i], d = xi - lo;
        for (int c = 0; c < kLanes; ++c) {
            const auto q = static_cast<float>(std::clamp(round_int_magic(is[c] * d), 0, nmax));
            const float e = scale[c] * q + min[c] - xi;
            a[c] += wi * e * e;
        }
    }
    std::copy(a, a + kLanes, err);
}

WARDEN_LANES_INLINE void q4k_neighbour_errors_ref(const float* xt, const float* wt, float d,
                                                  float dmin, const int* sc, const int* mn,
                                                  int nmax, float* err) {
    for (int j = 0; j < 8; ++j)
        for (int k = 0; k < 9; ++k) {
            const float s = d * static_cast<float>(sc[j] + k / 3 - 1),
                        m = dmin * static_cast<float>(mn[j] + k % 3 - 1);
            const float inv = s > 0 ? 1.f / s : 0.f;
            float a = 0;
            for (int i = 0; i < 32; ++i) {
                const float xi = xt[8 * i + j];
                const auto q =
                    static_cast<float>(std::clamp(round_int_magic((xi + m) * inv), 0, nmax));
                const float e = s * q - m - xi;
                a += wt[8 * i + j] * e * e;
            }
            err[9 * j + k] = a;
        }
}

WARDEN_LANES_INLINE void q6k_neighbour_errors_ref(const float* xt, const float* wt, float d,
                                                  const int* sc, float* err) {
    for (int j = 0; j < 16; ++j)
        for (int k = 0; k < 3; ++k) {
            const float step = d * static_cast<float>(sc[j] - 1 + k);
            const float inv = step != 0 ? 1.f / step : 0.f;
            float e = 0;
            for (int i = 0; i < 16; ++i) {
                const float xi = xt[16 * i + j];
                const float l = static_cast<float>(std::clamp(round_int_magic(xi * inv), -32, 31));
                const float r = step * l - xi;
                e += wt[16 * i + j] * r * r;
            }
            err[3 * j + k] = e;
        }
}

uint32_t asym_fits_ref(const float* is, const float* slf, const float* sl2f, const float* sxlf,
                       int first, int nsteps, double sw, double sx, float lo, bool min_le_zero,
                       float* scale, float* mn) {
    uint32_t mask = 0;
    for (int c = 0; c < kLanes; ++c) {
        const int step = first + c;
        float fs = 1.f / is[c], fm = lo;
        bool ok = step < nsteps;
        if (ok && step >= 0) {
            const double sl = slf[c], sl2 = sl2f[c], sxl = sxlf[c];
            const double det = sw * sl2 - sl * sl;
            if (det <= 0) {
                ok = false;
            } else {
                fs = static_cast<float>((sw * sxl - sx * sl) / det);
                fm = static_cast<float>((sl2 * sx - sl * sxl) / det);
                if (min_le_zero && fm > 0) {
                    fm = 0;
                    fs = sl2 > 0 ? static_cast<float>(sxl / sl2) : 0.f;
                }
                if (fs <= 0) ok = false;
            }
        }
        scale[c] = ok ? fs : 0.f;
        mn[c] = ok ? fm : 0.f;
        mask |= static_cast<uint32_t>(ok) << c;
    }
    return mask;
}

WARDEN_LANES_INLINE int sym_best_ref(const float* slx, const float* sl2, int nc) {
    double best_gain = -1;
    int bc = -1;
    for (int c = 0; c < nc; ++c) {
        if (sl2[c] <= 0) continue;
        const double gain = static_cast<double>(slx[c]) * slx[c] / sl2[c];
        if (gain > best_gain) {
            best_gain = gain;
            bc = c;
        }
    }
    return bc;
}

#if defined(__x86_64__)
// No "fma" in the targets (and the file is built with -ffp-contract=off): a multiply and an add
// stay two roundings, as in the reference.
#define WARDEN_AVX2 __attribute__((target("avx2")))
// round_int_magic and the clamp of eight lanes, as integers (the same bits as the reference).
WARDEN_AVX2 inline __m256 round_clamp8(__m256 v, __m256i lo, __m256i hi) {
    const __m256i t = _mm256_castps_si256(_mm256_add_ps(v, _mm256_set1_ps(12582912.f)));
    const __m256i r = _mm256_sub_epi32(_mm256_and_si256(t, _mm256_set1_epi32(0x007fffff)),
                                       _mm256_set1_epi32(0x00400000));
    return _mm256_cvtepi32_ps(_mm256_min_epi32(hi, _mm256_max_epi32(lo, r)));
}

// V registers of eight lanes: only the lanes the caller asked for (fit_sym's 19 of 32). The codes
// are clamped before rounding, in floats (four operations instead of six): the same integers
// where |is[c] * x_i| < 2^22, which kq_sym_sums asks of its callers.
template <int V>
WARDEN_AVX2 void sym_sums_lanes_avx2(const float* x, const float* w, int n, const float* is,
                                     int nmax, float* slx, float* sl2) {
    const __m256 lo = _mm256_set1_ps(static_cast<float>(-nmax)),
                 hi = _mm256_set1_ps(static_cast<float>(nmax - 1)), mg = _mm256_set1_ps(12582912.f);
    __m256 vis[V], a[V], b[V];
    for (int v = 0; v < V; ++v) {
        vis[v] = _mm256_loadu_ps(is + 8 * v);
        a[v] = b[v] = _mm256_setzero_ps();
    }
    for (int i = 0; i < n; ++i) {
        const __m256 xi = _mm256_set1_ps(x[i]), wi = _mm256_set1_ps(w[i]),
                     wx = _mm256_mul_ps(wi, xi);
        for (int v = 0; v < V; ++v) {
            const __m256 l = _mm256_sub_ps(
                _mm256_add_ps(_mm256_min_ps(hi, _mm256_max_ps(lo, _mm256_mul_ps(vis[v], xi))), mg),
                mg);
            a[v] = _mm256_add_ps(a[v], _mm256_mul_ps(wx, l));
            b[v] = _mm256_add_ps(b[v], _mm256_mul_ps(_mm256_mul_ps(wi, l), l));
        }
    }
    for (int v = 0; v < V; ++v) {
        _mm256_storeu_ps(slx + 8 * v, a[v]);
        _mm256_storeu_ps(sl2 + 8 * v, b[v]);
    }
}

WARDEN_AVX2 void sym_sums_avx2(const float* x, const float* w, int n, const float* is, int nc,
                               int nmax, float* slx, float* sl2) {
    static_assert(kSymLanes == 32, "at most four registers of lanes");
    switch ((nc + 7) / 8) {
        case 1:
            return sym_sums_lanes_avx2<1>(x, w, n, is, nmax, slx, sl2);
        case 2:
            return sym_sums_lanes_avx2<2>(x, w, n, is, nmax, slx, sl2);
        case 3:
            return sym_sums_lanes_avx2<3>(x, w, n, is, nmax, slx, sl2);
        default:
            return sym_sums_lanes_avx2<4>(x, w, n, is, nmax, slx, sl2);
    }
}

// asym_fits_ref four lanes at a time in double (the fits' floats converted back exactly, so the
// comparisons are the reference's): the same quotients, roundings and choices, as blends.
WARDEN_AVX2 uint32_t asym_fits_avx2(const float* is, const float* slf, const float* sl2f,
                                    const float* sxlf, int first, int nsteps, double sw, double sx,
                                    float lo, bool min_le_zero, float* scale, float* mn) {
    const __m256d vsw = _mm256_set1_pd(sw), vsx = _mm256_set1_pd(sx), zero = _mm256_setzero_pd(),
                  vlo = _mm256_set1_pd(lo), vn = _mm256_set1_pd(nsteps);
    const __m256d clampmin = min_le_zero ? _mm256_castsi256_pd(_mm256_set1_epi64x(-1)) : zero;
    uint32_t mask = 0;
    for (int g = 0; g < kLanes / 4; ++g) {
        const __m256d sl = _mm256_cvtps_pd(_mm_loadu_ps(slf + 4 * g)),
                      sl2 = _mm256_cvtps_pd(_mm_loadu_ps(sl2f + 4 * g)),
                      sxl = _mm256_cvtps_pd(_mm_loadu_ps(sxlf + 4 * g));
        const double s0 = first + 4 * g;
        const __m256d step = _mm256_set_pd(s0 + 3, s0 + 2, s0 + 1, s0);
        const __m256d valid = _mm256_cmp_pd(step, vn, _CMP_LT_OQ);
        const __m256d fit = _mm256_and_pd(valid, _mm256_cmp_pd(step, zero, _CMP_GE_OQ));
        const __m256d det = _mm256_sub_pd(_mm256_mul_pd(vsw, sl2), _mm256_mul_pd(sl, sl));
        const __m256d detok = _mm256_cmp_pd(det, zero, _CMP_NLE_UQ);
        __m256d fs = _mm256_cvtps_pd(_mm256_cvtpd_ps(_mm256_div_pd(
                    _mm256_sub_pd(_mm256_mul_pd(vsw, sxl), _mm256_mul_pd(vsx, sl)), det))),
                fm = _mm256_cvtps_pd(_mm256_cvtpd_ps(_mm256_div_pd(
                    _mm256_sub_pd(_mm256_mul_pd(sl2, vsx), _mm256_mul_pd(sl, sxl)), det)));
        const __m256d clamp = _mm256_and_pd(clampmin, _mm256_cmp_pd(fm, zero, _CMP_GT_OQ));
        const __m256d refit =
            _mm256_and_pd(_mm256_cmp_pd(sl2, zero, _CMP_GT_OQ),
                          _mm256_cvtps_pd(_mm256_cvtpd_ps(_mm256_div_pd(sxl, sl2))));
        fs = _mm256_blendv_pd(fs, refit, clamp);
        fm = _mm256_blendv_pd(fm, zero, clamp);
        const __m256d fitok = _mm256_and_pd(detok, _mm256_cmp_pd(fs, zero, _CMP_NLE_UQ));
        const __m256d own = _mm256_cvtps_pd(_mm_div_ps(_mm_set1_ps(1.f), _mm_loadu_ps(is + 4 * g)));
        const __m256d ok = _mm256_and_pd(valid, _mm256_or_pd(_mm256_andnot_pd(fit, valid), fitok));
        const __m256d s = _mm256_and_pd(ok, _mm256_blendv_pd(own, fs, fit)),
                      m = _mm256_and_pd(ok, _mm256_blendv_pd(vlo, fm, fit));
        _mm_storeu_ps(scale + 4 * g, _mm256_cvtpd_ps(s));
        _mm_storeu_ps(mn + 4 * g, _mm256_cvtpd_ps(m));
        mask |= static_cast<uint32_t>(_mm256_movemask_pd(ok)) << (4 * g);
    }
    return mask;
}

// The gains four lanes at a time (-infinity where sl2 <= 0), their maximum, then the first lane
// equal to it: the lane the reference's running comparison keeps (gains are never NaN).
WARDEN_AVX2 int sym_best_avx2(const float* slx, const float* sl2, int nc) {
    static_assert(kSymLanes <= 32, "one mask");
    const __m256d ninf = _mm256_set1_pd(-std::numeric_limits<double>::infinity());
    __m256d g[kSymLanes / 4];
    const int nv = (nc + 3) / 4;
    __m256d m = ninf;
    for (int v = 0; v < nv; ++v) {
        const __m256d a = _mm256_cvtps_pd(_mm_loadu_ps(slx + 4 * v)),
                      b = _mm256_cvtps_pd(_mm_loadu_ps(sl2 + 4 * v));
        const __m256i lane =
            _mm256_add_epi64(_mm256_set1_epi64x(4 * v), _mm256_set_epi64x(3, 2, 1, 0));
        const __m256d live =
            _mm256_and_pd(_mm256_cmp_pd(b, _mm256_setzero_pd(), _CMP_GT_OQ),
                          _mm256_castsi256_pd(_mm256_cmpgt_epi64(_mm256_set1_epi64x(nc), lane)));
        g[v] = _mm256_blendv_pd(ninf, _mm256_div_pd(_mm256_mul_pd(a, a), b), live);
        m = _mm256_max_pd(m, g[v]);
    }
    m = _mm256_max_pd(m, _mm256_permute4x64_pd(m, 0x4E));
    m = _mm256_max_pd(m, _mm256_permute_pd(m, 0x5));
    if (!(_mm256_cvtsd_f64(m) > -1.0)) return -1;
    uint32_t eq = 0;
    for (int v = 0; v < nv; ++v)
        eq |= static_cast<uint32_t>(_mm256_movemask_pd(_mm256_cmp_pd(g[v], m, _CMP_EQ_OQ)))
              << (4 * v);
    return __builtin_ctz(eq);
}

// Lanes: the eight sub-blocks, for each of the nine neighbours: nine independent sums.
WARDEN_AVX2 void q4k_neighbour_errors_avx2(const float* xt, const float* wt, float d, float dmin,
                                           const int* sc, const int* mn, int nmax, float* err) {
    const __m256i lo = _mm256_setzero_si256(), hi = _mm256_set1_epi32(nmax);
    const __m256i vsc = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sc)),
                  vmn = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(mn));
    __m256 s[9], m[9], inv[9], a[9];
    for (int k = 0; k < 9; ++k) {
        s[k] =
            _mm256_mul_ps(_mm256_set1_ps(d),
                          _mm256_cvtepi32_ps(_mm256_add_epi32(vsc, _mm256_set1_epi32(k / 3 - 1))));
        m[k] =
            _mm256_mul_ps(_mm256_set1_ps(dmin),
                          _mm256_cvtepi32_ps(_mm256_add_epi32(vmn, _mm256_set1_epi32(k % 3 - 1))));
        inv[k] = _mm256_and_ps(_mm256_cmp_ps(s[k], _mm256_setzero_ps(), _CMP_GT_OQ),
                               _mm256_div_ps(_mm256_set1_ps(1.f), s[k]));
        a[k] = _mm256_setzero_ps();
    }
    for (int i = 0; i < 32; ++i) {
        const __m256 xi = _mm256_loadu_ps(xt + 8 * i), wi = _mm256_loadu_ps(wt + 8 * i);
        for (int k = 0; k < 9; ++k) {
            const __m256 q = round_clamp8(_mm256_mul_ps(_mm256_add_ps(xi, m[k]), inv[k]), lo, hi);
            const __m256 e = _mm256_sub_ps(_mm256_sub_ps(_mm256_mul_ps(s[k], q), m[k]), xi);
            a[k] = _mm256_add_ps(a[k], _mm256_mul_ps(_mm256_mul_ps(wi, e), e));
        }
    }
    for (int k = 0; k < 9; ++k) {
        alignas(32) float t[8];
        _mm256_store_ps(t, a[k]);
        for (int j = 0; j < 8; ++j) err[9 * j + k] = t[j];
    }
}

// Lanes: eight sub-blocks at a time, for each of the three neighbours: six independent sums.
WARDEN_AVX2 void q6k_neighbour_errors_avx2(const float* xt, const float* wt, float d, const int* sc,
                                           float* err) {
    const __m256i lo = _mm256_set1_epi32(-32), hi = _mm256_set1_epi32(31);
    __m256 step[6], inv[6], e[6];
    for (int h = 0; h < 2; ++h) {
        const __m256i s = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sc + 8 * h));
        for (int k = 0; k < 3; ++k) {
            const int u = 3 * h + k;
            step[u] =
                _mm256_mul_ps(_mm256_set1_ps(d),
                              _mm256_cvtepi32_ps(_mm256_add_epi32(s, _mm256_set1_epi32(k - 1))));
            inv[u] = _mm256_and_ps(_mm256_cmp_ps(step[u], _mm256_setzero_ps(), _CMP_NEQ_UQ),
                                   _mm256_div_ps(_mm256_set1_ps(1.f), step[u]));
            e[u] = _mm256_setzero_ps();
        }
    }
    for (int i = 0; i < 16; ++i)
        for (int h = 0; h < 2; ++h) {
            const __m256 xi = _mm256_loadu_ps(xt + 16 * i + 8 * h),
                         wi = _mm256_loadu_ps(wt + 16 * i + 8 * h);
            for (int k = 0; k < 3; ++k) {
                const int u = 3 * h + k;
                const __m256 l = round_clamp8(_mm256_mul_ps(xi, inv[u]), lo, hi);
                const __m256 r = _mm256_sub_ps(_mm256_mul_ps(step[u], l), xi);
                e[u] = _mm256_add_ps(e[u], _mm256_mul_ps(_mm256_mul_ps(wi, r), r));
            }
        }
    for (int h = 0; h < 2; ++h)
        for (int k = 0; k < 3; ++k) {
            alignas(32) float a[8];
            _mm256_store_ps(a, e[3 * h + k]);
            for (int j = 0; j < 8; ++j) err[3 * (8 * h + j) + k] = a[j];
        }
}
// The reference's operations on two registers of eight lanes; the codes stored when asked for.
WARDEN_AVX2 void asym_sums_avx2(const float* x, const float* w, int n, float lo, const float* is,
                                int nmax, float* sl, float* sl2, float* sxl, float* codes) {
    static_assert(kLanes == 16, "two registers of lanes");
    const __m256i qlo = _mm256_setzero_si256(), qhi = _mm256_set1_epi32(nmax);
    const __m256 vis0 = _mm256_loadu_ps(is), vis1 = _mm256_loadu_ps(is + 8);
    __m256 a0 = _mm256_setzero_ps(), b0 = a0, e0 = a0, a1 = a0, b1 = a0, e1 = a0;
    for (int i = 0; i < n; ++i) {
        const __m256 xi = _mm256_set1_ps(x[i]), wi = _mm256_set1_ps(w[i]),
                     d = _mm256_set1_ps(x[i] - lo);
        const __m256 q0 = round_clamp8(_mm256_mul_ps(vis0, d), qlo, qhi),
                     q1 = round_clamp8(_mm256_mul_ps(vis1, d), qlo, qhi);
        if (codes) {
            _mm256_storeu_ps(codes + kLanes * i, q0);
            _mm256_storeu_ps(codes + kLanes * i + 8, q1);
        }
        const __m256 wq0 = _mm256_mul_ps(wi, q0), wq1 = _mm256_mul_ps(wi, q1);
        a0 = _mm256_add_ps(a0, wq0);
        a1 = _mm256_add_ps(a1, wq1);
        b0 = _mm256_add_ps(b0, _mm256_mul_ps(wq0, q0));
        b1 = _mm256_add_ps(b1, _mm256_mul_ps(wq1, q1));
        e0 = _mm256_add_ps(e0, _mm256_mul_ps(wq0, xi));
        e1 = _mm256_add_ps(e1, _mm256_mul_ps(wq1, xi));
    }
    _mm256_storeu_ps(sl, a0);
    _mm256_storeu_ps(sl + 8, a1);
    _mm256_storeu_ps(sl2, b0);
    _mm256_storeu_ps(sl2 + 8, b1);
    _mm256_storeu_ps(sxl, e0);
    _mm256_storeu_ps(sxl + 8, e1);
}
WARDEN_AVX2 void asym_grid_errors_avx2(const float* x, const float* w, int n, float lo,
                                       const float* is, int nmax, const float* scale,
                                       const float* min, const float* codes, float* err) {
    if (!codes) return asym_grid_errors_ref(x, w, n, lo, is, nmax, scale, min, err);
    const __m256 vs0 = _mm256_loadu_ps(scale), vs1 = _mm256_loadu_ps(scale + 8),
                 vm0 = _mm256_loadu_ps(min), vm1 = _mm256_loadu_ps(min + 8);
    __m256 a0 = _mm256_setzero_ps(), a1 = a0;
    for (int i = 0; i < n; ++i) {
        const __m256 xi = _mm256_set1_ps(x[i]), wi = _mm256_set1_ps(w[i]);
        const __m256 q0 = _mm256_loadu_ps(codes + kLanes * i),
                     q1 = _mm256_loadu_ps(codes + kLanes * i + 8);
        const __m256 e0 = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(vs0, q0), vm0), xi),
                     e1 = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(vs1, q1), vm1), xi);
        a0 = _mm256_add_ps(a0, _mm256_mul_ps(_mm256_mul_ps(wi, e0), e0));
        a1 = _mm256_add_ps(a1, _mm256_mul_ps(_mm256_mul_ps(wi, e1), e1));
    }
    _mm256_storeu_ps(err, a0);
    _mm256_storeu_ps(err + 8, a1);
}
#undef WARDEN_AVX2

#define WARDEN_AVX512 __attribute__((target("avx512f,avx512dq,avx2")))
WARDEN_AVX512 inline __m512 round_clamp16(__m512 v, __m512i lo, __m512i hi) {
    const __m512i t = _mm512_castps_si512(_mm512_add_ps(v, _mm512_set1_ps(12582912.f)));
    const __m512i r = _mm512_sub_epi32(_mm512_and_si512(t, _mm512_set1_epi32(0x007fffff)),
                                       _mm512_set1_epi32(0x00400000));
    return _mm512_cvtepi32_ps(_mm512_min_epi32(hi, _mm512_max_epi32(lo, r)));
}

WARDEN_AVX512 void sym_sums_avx512(const float* x, const float* w, int n, const float* is, int,
                                   int nmax, float* slx, float* sl2) {
    static_assert(kSymLanes == 32, "two registers of lanes");
    const __m512 vis0 = _mm512_loadu_ps(is), vis1 = _mm512_loadu_ps(is + 16);
    const __m512i lo = _mm512_set1_epi32(-nmax), hi = _mm512_set1_epi32(nmax - 1);
    __m512 a0 = _mm512_setzero_ps(), b0 = a0, a1 = a0, b1 = a0;
    for (int i = 0; i < n; ++i) {
        const __m512 xi = _mm512_set1_ps(x[i]), wi = _mm512_set1_ps(w[i]),
                     wx = _mm512_mul_ps(wi, xi);
        const __m512 l0 = round_clamp16(_mm512_mul_ps(vis0, xi), lo, hi);
        const __m512 l1 = round_clamp16(_mm512_mul_ps(vis1, xi), lo, hi);
        a0 = _mm512_add_ps(a0, _mm512_mul_ps(wx, l0));
        a1 = _mm512_add_ps(a1, _mm512_mul_ps(wx, l1));
        b0 = _mm512_add_ps(b0, _mm512_mul_ps(_mm512_mul_ps(wi, l0), l0));
        b1 = _mm512_add_ps(b1, _mm512_mul_ps(_mm512_mul_ps(wi, l1), l1));
    }
    _mm512_storeu_ps(slx, a0);
    _mm512_storeu_ps(slx + 16, a1);
    _mm512_storeu_ps(sl2, b0);
    _mm512_storeu_ps(sl2 + 16, b1);
}

WARDEN_AVX512 void asym_sums_avx512(const float* x, const float* w, int n, float lo,
                                    const float* is, int nmax, float* sl, float* sl2, float* sxl,
                                    float* codes) {
    const __m512 vis = _mm512_loadu_ps(is);
    const __m512i qlo = _mm512_setzero_si512(), qhi = _mm512_set1_epi32(nmax);
    __m512 a = _mm512_setzero_ps(), b = a, e = a;
    for (int i = 0; i < n; ++i) {
        const __m512 xi = _mm512_set1_ps(x[i]), wi = _mm512_set1_ps(w[i]),
                     d = _mm512_set1_ps(x[i] - lo);
        const __m512 q = round_clamp16(_mm512_mul_ps(vis, d), qlo, qhi);
        if (codes) _mm512_storeu_ps(codes + kLanes * i, q);
        const __m512 wq = _mm512_mul_ps(wi, q);
        a = _mm512_add_ps(a, wq);
        b = _mm512_add_ps(b, _mm512_mul_ps(wq, q));
        e = _mm512_add_ps(e, _mm512_mul_ps(wq, xi));
    }
    _mm512_storeu_ps(sl, a);
    _mm512_storeu_ps(sl2, b);
    _mm512_storeu_ps(sxl, e);
}

WARDEN_AVX512 void asym_grid_errors_avx512(const float* x, const float* w, int n, float lo,
                                           const float* is, int nmax, const float* scale,
                                           const float* min, const float*, float* err) {
    const __m512 vis = _mm512_loadu_ps(is), vs = _mm512_loadu_ps(scale), vm = _mm512_loadu_ps(min);
    const __m512i qlo = _mm512_setzero_si512(), qhi = _mm512_set1_epi32(nmax);
    __m512 a = _mm512_setzero_ps();
    for (int i = 0; i < n; ++i) {
        const __m512 xi = _mm512_set1_ps(x[i]), wi = _mm512_set1_ps(w[i]),
                     d = _mm512_set1_ps(x[i] - lo);
        const __m512 q = round_clamp16(_mm512_mul_ps(vis, d), qlo, qhi);
        const __m512 e = _mm512_sub_ps(_mm512_add_ps(_mm512_mul_ps(vs, q), vm), xi);
        a = _mm512_add_ps(a, _mm512_mul_ps(_mm512_mul_ps(wi, e), e));
    }
    _mm512_storeu_ps(err, a);
}

#undef WARDEN_AVX512

kernels::Isa isa() {
    return kernels::active_isa();
}
#endif

void sym_sums_base(const float* x, const float* w, int n, const float* is, int, int nmax,
                   float* slx, float* sl2) {
    sym_sums_ref(x, w, n, is, nmax, slx, sl2);
}
void q6k_neighbour_errors_base(const float* xt, const float* wt, float d, const int* sc,
                               float* err) {
    q6k_neighbour_errors_ref(xt, wt, d, sc, err);
}
void asym_sums_base(const float* x, const float* w, int n, float lo, const float* is, int nmax,
                    float* sl, float* sl2, float* sxl, float* codes) {
    asym_sums_ref(x, w, n, lo, is, nmax, sl, sl2, sxl, codes);
}
void asym_grid_errors_base(const float* x, const float* w, int n, float lo, const float* is,
                           int nmax, const float* scale, const float* min, const float*,
                           float* err) {
    asym_grid_errors_ref(x, w, n, lo, is, nmax, scale, min, err);
}

}  // namespace

#if defined(__x86_64__)
#define WARDEN_DISPATCH(name, ...)                                        \
    do {                                                                  \
        const kernels::Isa a = isa();                                     \
        if (a >= kernels::Isa::AVX512) return name##_avx512(__VA_ARGS__); \
        if (a >= kernels::Isa::AVX2) return name##_avx2(__VA_ARGS__);     \
        return name##_base(__VA_ARGS__);                                  \
    } while (0)
#else
#define WARDEN_DISPATCH(name, ...) return name##_base(__VA_ARGS__)
#endif

void kq_sym_sums(const float* x, const float* w, int n, const float* is, int nc, int nmax,
                 float* slx, float* sl2) {
    WARDEN_DISPATCH(sym_sums, x, w, n, is, nc, nmax, slx, sl2);
}
uint32_t kq_asym_fits(const float* is, const float* sl, const float* sl2, const float* sxl,
                      int first, int nsteps, double sw, double sx, float lo, bool min_le_zero,
                      float* scale, float* min) {
#if defined(__x86_64__)
    if (isa() >= kernels::Isa::AVX2)
        return asym_fits_avx2(is, sl, sl2, sxl, first, nsteps, sw, sx, lo, min_le_zero, scale, min);
#endif
    return asym_fits_ref(is, sl, sl2, sxl, first, nsteps, sw, sx, lo, min_le_zero, scale, min);
}
int kq_sym_best(const float* slx, const float* sl2, int nc) {
#if defined(__x86_64__)
    if (isa() >= kernels::Isa::AVX2) return sym_best_avx2(slx, sl2, nc);
#endif
    return sym_best_ref(slx, sl2, nc);
}
void kq_q6k_neighbour_errors(const float* xt, const float* wt, float d, const int* sc, float* err) {
#if defined(__x86_64__)
    if (isa() >= kernels::Isa::AVX2) return q6k_neighbour_errors_avx2(xt, wt, d, sc, err);
#endif
    q6k_neighbour_errors_base(xt, wt, d, sc, err);
}
void kq_asym_sums(const float* x, const float* w, int n, float lo, const float* is, int nmax,
                  float* sl, float* sl2, float* sxl, float* codes) {
    WARDEN_DISPATCH(asym_sums, x, w, n, lo, is, nmax, sl, sl2, sxl, codes);
}
void kq_asym_grid_errors(const float* x, const float* w, int n, float lo, const float* is, int nmax,
                         const float* scale, const float* min, const float* codes, float* err) {
    WARDEN_DISPATCH(asym_grid_errors, x, w, n, lo, is, nmax, scale, min, codes, err);
}
void kq_q4k_neighbour_errors(const float* xt, const float* wt, float d, float dmin, const int* sc,
                             const int* mn, int nmax, float* err) {
#if defined(__x86_64__)
    if (isa() >= kernels::Isa::AVX2)
        return q4k_neighbour_errors_avx2(xt, wt, d, dmin, sc, mn, nmax, err);
#endif
    q4k_neighbour_errors_ref(xt, wt, d, dmin, sc, mn, nmax, err);
}
#undef WARDEN_DISPATCH

}  // namespace warden::quant
