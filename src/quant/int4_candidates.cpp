#include "quant/int4_candidates.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cpu_features.h"
#include "kernels/x86_intrinsics.h"
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

void sym_scales_ref(const float* iscale, const float* sxl, const float* sll, int s0, int n,
                    float* raw) {
    for (int s = s0; s < n; ++s) {
        raw[1 + 2 * s] = 1.0f / iscale[s];
        raw[2 + 2 * s] = sll[s] > 0.0f ? sxl[s] / sll[s] : 0.0f;
    }
}

float abs_max_ref(const float* x, int64_t G, float* first) {
    float amax = 0.0f;
    for (int64_t i = 0; i < G; ++i) amax = std::max(amax, std::fabs(x[i]));
    if (first == nullptr) return amax;
    *first = 0.0f;
    for (int64_t i = 0; i < G; ++i)
        if (std::fabs(x[i]) == amax) {
            *first = x[i];
            break;
        }
    return amax;
}

double error_weights_ref(const float* x, const float* imp, int64_t G, float* wt) {
    double a[4] = {};
    for (int64_t i = 0; i < G; i += 4)
        for (int k = 0; k < 4; ++k) a[k] += static_cast<double>(x[i + k]) * x[i + k];
    const auto sigma2 =
        static_cast<float>(((a[0] + a[1]) + (a[2] + a[3])) / static_cast<double>(G));
    for (int64_t i = 0; i < G; ++i) wt[i] = (imp ? imp[i] : 1.0f) * std::sqrt(sigma2 + x[i] * x[i]);
    double b[4] = {};
    for (int64_t i = 0; i < G; i += 4)
        for (int k = 0; k < 4; ++k) b[k] += static_cast<double>(wt[i + k]) * x[i + k] * x[i + k];
    return (b[0] + b[1]) + (b[2] + b[3]);
}

void asym_fits_ref(const double* s3, int s0, int n, double sw, double swx, float* d, float* m) {
    for (int s = s0; s < n; ++s) {
        const double* sm = s3 + 3 * s;
        const double det = sw * sm[1] - sm[0] * sm[0];
        const bool fitted = det > 0.0;
        d[s] = fitted ? static_cast<float>((sw * sm[2] - swx * sm[0]) / det) : 0.0f;
        m[s] = fitted ? static_cast<float>((sm[1] * swx - sm[0] * sm[2]) / det) : 0.0f;
    }
}

bool usable_ref(float d) {
    return d != 0.0f && std::isfinite(d) && std::isfinite(1.0f / d);
}

// The two candidates of grid step s (int4_sym_bounds).
void sym_bounds_ref(const float* d2, const float* sxl, const float* sll, double sxx, int s,
                    double* bound) {
    for (int c = 2 * s; c < 2 * s + 2; ++c) {
        const double d = d2[c];
        bound[c] = usable_ref(d2[c]) ? sxx - 2.0 * d * static_cast<double>(sxl[s]) +
                                           d * d * static_cast<double>(sll[s])
                                     : std::numeric_limits<double>::infinity();
    }
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
// The eight candidates in float lanes, their errors in two double halves: the reference's
// operations in its order (the compiler's own vectorization of int8_errors_lanes for AVX2 was most
// of a compressed-tensors int4 checkpoint's load, whose head is searched per 32-block).
template <bool kImp>
__attribute__((target("avx2"))) void int8_errors_avx2(const float* x, const float* imp, int64_t n,
                                                      const float* d, double* err) {
    const __m256 vd = _mm256_loadu_ps(d), vid = _mm256_div_ps(_mm256_set1_ps(1.0f), vd),
                 lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f),
                 mg = _mm256_set1_ps(kRoundMagic);
    __m256d acc0 = _mm256_setzero_pd(), acc1 = _mm256_setzero_pd();
    for (int64_t i = 0; i < n; ++i) {
        const __m256 r = _mm256_sub_ps(
            _mm256_add_ps(
                _mm256_min_ps(hi, _mm256_max_ps(lo, _mm256_mul_ps(_mm256_set1_ps(x[i]), vid))), mg),
            mg);
        const __m256 rd = _mm256_mul_ps(r, vd);
        const __m256d xi = _mm256_set1_pd(x[i]);
        const __m256d e0 = _mm256_sub_pd(xi, _mm256_cvtps_pd(_mm256_castps256_ps128(rd)));
        const __m256d e1 = _mm256_sub_pd(xi, _mm256_cvtps_pd(_mm256_extractf128_ps(rd, 1)));
        __m256d s0 = _mm256_mul_pd(e0, e0), s1 = _mm256_mul_pd(e1, e1);
        if constexpr (kImp) {  // without importance the weight is 1.0, whose product is exact
            const __m256d wi = _mm256_set1_pd(imp[i]);
            s0 = _mm256_mul_pd(s0, wi);
            s1 = _mm256_mul_pd(s1, wi);
        }
        acc0 = _mm256_add_pd(acc0, s0);
        acc1 = _mm256_add_pd(acc1, s1);
    }
    _mm256_storeu_pd(err, acc0);
    _mm256_storeu_pd(err + 4, acc1);
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

// Up to four candidates side by side (spare ones repeat the last), one register of eight lanes
// each: the lanes of error_avx2, and their sum8 trees as horizontal additions (hadd of hadds:
// ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7)), the same additions).
__attribute__((target("avx2"))) void errors4_avx2(const float* x, const float* wt, int64_t G,
                                                  const float* d, const float* m, int nc, float lo,
                                                  float hi, float* err) {
    const __m256 vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi);
    __m256 vid[4], vd[4], vm[4], acc[4];
    for (int c = 0; c < 4; ++c) {
        const int u = std::min(c, nc - 1);
        vid[c] = _mm256_set1_ps(1.0f / d[u]);
        vd[c] = _mm256_set1_ps(d[u]);
        vm[c] = _mm256_set1_ps(m[u]);
        acc[c] = _mm256_setzero_ps();
    }
    for (int64_t i = 0; i < G; i += 8) {
        const __m256 xv = _mm256_loadu_ps(x + i), wv = _mm256_loadu_ps(wt + i);
        for (int c = 0; c < 4; ++c) {
            const __m256 r =
                round_clamped8(_mm256_mul_ps(_mm256_sub_ps(xv, vm[c]), vid[c]), vlo, vhi);
            const __m256 e = _mm256_sub_ps(xv, _mm256_add_ps(_mm256_mul_ps(r, vd[c]), vm[c]));
            acc[c] = _mm256_add_ps(acc[c], _mm256_mul_ps(_mm256_mul_ps(wv, e), e));
        }
    }
    const __m256 t = _mm256_hadd_ps(_mm256_hadd_ps(acc[0], acc[1]), _mm256_hadd_ps(acc[2], acc[3]));
    alignas(16) float sums[4];
    _mm_store_ps(sums, _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1)));
    std::copy(sums, sums + nc, err);
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

// Eight candidates per register (lane c: candidate c), V registers: the same sums as refit_avx2
// for each, its lane k's chain (elements k, k + 8, ...) run as one pass over those elements and
// added into the total in k order, as reduce_refit does.
template <int V>
__attribute__((target("avx2"))) void refits_lanes_avx2(const float* x, const float* wt, int64_t G,
                                                       const float* is, float* sa, float* sb) {
    const __m256 lo = _mm256_set1_ps(-8.0f), hi = _mm256_set1_ps(7.0f);
    __m256 vis[V], ta[V], tb[V];
    for (int v = 0; v < V; ++v) {
        vis[v] = _mm256_loadu_ps(is + 8 * v);
        ta[v] = tb[v] = _mm256_setzero_ps();
    }
    alignas(32) float wxs[128];  // w x of each element (G <= 128), computed once for all lanes
    for (int64_t i = 0; i < G; i += 8)
        _mm256_store_ps(wxs + i, _mm256_mul_ps(_mm256_loadu_ps(wt + i), _mm256_loadu_ps(x + i)));
    for (int k = 0; k < 8; ++k) {
        __m256 p[V], q[V];
        for (int v = 0; v < V; ++v) p[v] = q[v] = _mm256_setzero_ps();
        for (int64_t i = k; i < G; i += 8) {
            const __m256 xv = _mm256_set1_ps(x[i]), wv = _mm256_set1_ps(wt[i]),
                         wx = _mm256_set1_ps(wxs[i]);
            for (int v = 0; v < V; ++v) {
                const __m256 r = round_clamped8(_mm256_mul_ps(xv, vis[v]), lo, hi);
                p[v] = _mm256_add_ps(p[v], _mm256_mul_ps(wx, r));
                q[v] = _mm256_add_ps(q[v], _mm256_mul_ps(_mm256_mul_ps(wv, r), r));
            }
        }
        for (int v = 0; v < V; ++v) {
            ta[v] = _mm256_add_ps(ta[v], p[v]);
            tb[v] = _mm256_add_ps(tb[v], q[v]);
        }
    }
    for (int v = 0; v < V; ++v) {
        _mm256_storeu_ps(sa + 8 * v, ta[v]);
        _mm256_storeu_ps(sb + 8 * v, tb[v]);
    }
}

__attribute__((target("avx2"))) void refits_avx2(const float* x, const float* wt, int64_t G,
                                                 const float* is, int nc, float* sa, float* sb) {
    int c = 0;
    for (; c + 24 <= nc; c += 24) refits_lanes_avx2<3>(x, wt, G, is + c, sa + c, sb + c);
    const int left = nc - c;
    if (left == 0) return;
    // The last lanes through a padded copy (spare lanes repeat the last candidate).
    float pis[24], pa[24], pb[24];
    for (int i = 0; i < 24; ++i) pis[i] = is[c + std::min(i, left - 1)];
    if (left <= 8)
        refits_lanes_avx2<1>(x, wt, G, pis, pa, pb);
    else if (left <= 16)
        refits_lanes_avx2<2>(x, wt, G, pis, pa, pb);
    else
        refits_lanes_avx2<3>(x, wt, G, pis, pa, pb);
    std::copy(pa, pa + left, sa + c);
    std::copy(pb, pb + left, sb + c);
}

// smallest_bounds (quant/int4_candidates.h) for n == 4 * V, the bounds held in registers (a chosen
// entry is replaced there, bound itself not written), without branches: the least value, then
// the first entry equal to it (a mask of all n).
template <int V>
__attribute__((target("avx2"))) int smallest_avx2(double* bound, int k, int* pick) {
    static_assert(4 * V <= 64, "one 64-bit mask");
    const __m256d inf = _mm256_set1_pd(std::numeric_limits<double>::infinity());
    __m256d b[V];
    for (int v = 0; v < V; ++v) {  // NaN (never chosen) becomes infinity
        const __m256d x = _mm256_loadu_pd(bound + 4 * v);
        b[v] = _mm256_blendv_pd(inf, x, _mm256_cmp_pd(x, x, _CMP_ORD_Q));
    }
    int np = 0;
    for (; np < k; ++np) {
        __m256d m0 = b[0], m1 = V > 1 ? b[1] : inf;
        for (int v = 2; v < V; v += 2) {
            m0 = _mm256_min_pd(m0, b[v]);
            if (v + 1 < V) m1 = _mm256_min_pd(m1, b[v + 1]);
        }
        __m256d m = _mm256_min_pd(m0, m1);
        m = _mm256_min_pd(m, _mm256_permute4x64_pd(m, 0x4E));
        m = _mm256_min_pd(m, _mm256_permute_pd(m, 0x5));
        if (!(_mm256_cvtsd_f64(m) < std::numeric_limits<double>::infinity())) break;
        uint64_t eq = 0;
        for (int v = 0; v < V; ++v)
            eq |= static_cast<uint64_t>(
                      static_cast<unsigned>(_mm256_movemask_pd(_mm256_cmp_pd(b[v], m, _CMP_EQ_OQ))))
                  << (4 * v);
        const int at = __builtin_ctzll(eq);
        pick[np] = at;
        // Entry `at` to infinity: a compare with each register's indices, no indexed access.
        const __m256i vat = _mm256_set1_epi64x(at);
        for (int v = 0; v < V; ++v) {
            const __m256i idx = _mm256_set_epi64x(4 * v + 3, 4 * v + 2, 4 * v + 1, 4 * v);
            b[v] = _mm256_blendv_pd(b[v], inf, _mm256_castsi256_pd(_mm256_cmpeq_epi64(idx, vat)));
        }
    }
    return np;
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

// asym_fits_ref four steps at a time (the sums deinterleaved by loads); where det <= 0 the lanes'
// quotients are masked to 0.
__attribute__((target("avx2"))) void asym_fits_avx2(const double* s3, int n, double sw, double swx,
                                                    float* d, float* m) {
    const __m256d vsw = _mm256_set1_pd(sw), vswx = _mm256_set1_pd(swx);
    int s = 0;
    for (; s + 4 <= n; s += 4) {
        const double* p = s3 + 3 * s;
        const __m256d a = _mm256_set_pd(p[9], p[6], p[3], p[0]),  // sum w r
            b = _mm256_set_pd(p[10], p[7], p[4], p[1]),           // sum w r^2
            c = _mm256_set_pd(p[11], p[8], p[5], p[2]);           // sum w x r
        const __m256d det = _mm256_sub_pd(_mm256_mul_pd(vsw, b), _mm256_mul_pd(a, a));
        const __m128 fitted =
            _mm256_cvtpd_ps(_mm256_cmp_pd(det, _mm256_setzero_pd(), _CMP_GT_OQ));  // 0 or NaN
        const __m128 keep = _mm_cmpunord_ps(fitted, fitted);
        const __m128 dv = _mm256_cvtpd_ps(
            _mm256_div_pd(_mm256_sub_pd(_mm256_mul_pd(vsw, c), _mm256_mul_pd(vswx, a)), det));
        const __m128 mv = _mm256_cvtpd_ps(
            _mm256_div_pd(_mm256_sub_pd(_mm256_mul_pd(b, vswx), _mm256_mul_pd(a, c)), det));
        _mm_storeu_ps(d + s, _mm_and_ps(keep, dv));
        _mm_storeu_ps(m + s, _mm_and_ps(keep, mv));
    }
    asym_fits_ref(s3, s, n, sw, swx, d, m);
}

// error_weights_ref with its four running sums as the lanes of one register of doubles.
__attribute__((target("avx2"))) double error_weights_avx2(const float* x, const float* imp,
                                                          int64_t G, float* wt) {
    __m256d a = _mm256_setzero_pd();
    for (int64_t i = 0; i < G; i += 4) {
        const __m256d xd = _mm256_cvtps_pd(_mm_loadu_ps(x + i));
        a = _mm256_add_pd(a, _mm256_mul_pd(xd, xd));
    }
    alignas(32) double t[4];
    _mm256_store_pd(t, a);
    const __m256 s2 = _mm256_set1_ps(
        static_cast<float>(((t[0] + t[1]) + (t[2] + t[3])) / static_cast<double>(G)));
    for (int64_t i = 0; i < G; i += 8) {
        const __m256 xv = _mm256_loadu_ps(x + i);
        const __m256 iv = imp ? _mm256_loadu_ps(imp + i) : _mm256_set1_ps(1.0f);
        _mm256_storeu_ps(
            wt + i, _mm256_mul_ps(iv, _mm256_sqrt_ps(_mm256_add_ps(s2, _mm256_mul_ps(xv, xv)))));
    }
    __m256d b = _mm256_setzero_pd();
    for (int64_t i = 0; i < G; i += 4) {
        const __m256d xd = _mm256_cvtps_pd(_mm_loadu_ps(x + i));
        b = _mm256_add_pd(
            b, _mm256_mul_pd(_mm256_mul_pd(_mm256_cvtps_pd(_mm_loadu_ps(wt + i)), xd), xd));
    }
    _mm256_store_pd(t, b);
    return (t[0] + t[1]) + (t[2] + t[3]);
}

__attribute__((target("avx2"))) void sym_scales_avx2(const float* iscale, const float* sxl,
                                                     const float* sll, int n, float* raw) {
    int s = 0;
    for (; s + 8 <= n; s += 8) {
        const __m256 b = _mm256_loadu_ps(sll + s);
        const __m256 inv = _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_loadu_ps(iscale + s));
        const __m256 fit = _mm256_and_ps(_mm256_cmp_ps(b, _mm256_setzero_ps(), _CMP_GT_OQ),
                                         _mm256_div_ps(_mm256_loadu_ps(sxl + s), b));
        // Interleaved: inv0 fit0 inv1 fit1 ... into raw[1 + 2s ..].
        const __m256 lo = _mm256_unpacklo_ps(inv, fit), hi = _mm256_unpackhi_ps(inv, fit);
        _mm256_storeu_ps(raw + 1 + 2 * s, _mm256_permute2f128_ps(lo, hi, 0x20));
        _mm256_storeu_ps(raw + 9 + 2 * s, _mm256_permute2f128_ps(lo, hi, 0x31));
    }
    sym_scales_ref(iscale, sxl, sll, s, n, raw);
}

// int8_round_codes of whole groups of 8; returns the elements done. The integers are exact in
// f32, so converting and narrowing with saturation changes none of them.
__attribute__((target("avx2"))) int64_t int8_codes_avx2(const float* x, int64_t n, float id,
                                                        uint8_t* q) {
    const __m256 vid = _mm256_set1_ps(id), lo = _mm256_set1_ps(-127.0f),
                 hi = _mm256_set1_ps(127.0f), mg = _mm256_set1_ps(kRoundMagic);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), vid);
        const __m256 r =
            _mm256_sub_ps(_mm256_add_ps(_mm256_min_ps(hi, _mm256_max_ps(lo, v)), mg), mg);
        const __m256i w = _mm256_cvtps_epi32(r);
        const __m128i w16 =
            _mm_packs_epi32(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
        _mm_storel_epi64(reinterpret_cast<__m128i*>(q + i), _mm_packs_epi16(w16, w16));
    }
    return i;
}

__attribute__((target("avx2"))) float abs_max_avx2(const float* x, int64_t G, float* first) {
    const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 m = _mm256_setzero_ps();
    for (int64_t i = 0; i < G; i += 8)
        m = _mm256_max_ps(m, _mm256_and_ps(absm, _mm256_loadu_ps(x + i)));
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
    const float amax = _mm_cvtss_f32(h);
    if (first == nullptr) return amax;
    const __m256 va = _mm256_set1_ps(amax);
    for (int64_t i = 0; i < G; i += 8) {
        const __m256 xv = _mm256_loadu_ps(x + i);
        const int eq = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_and_ps(absm, xv), va, _CMP_EQ_OQ));
        if (eq) {
            *first = x[i + __builtin_ctz(static_cast<unsigned>(eq))];
            return amax;
        }
    }
    *first = 0.0f;
    return amax;
}

// Two floats into lanes 0-1 (2-3 zero) from any address: movq through an unaligned 64-bit load,
// where _mm_load_sd would dereference a double* that is only 4-byte aligned.
inline __m128 load2(const float* p) {
    return _mm_castsi128_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

// Four candidates (two grid steps) per register; a last odd step with two lanes of infinity. The
// bounds are stored as whole registers, so smallest_bounds' loads of them are forwarded.
__attribute__((target("avx2"))) void sym_bounds_avx2(const float* d2, const float* sxl,
                                                     const float* sll, double sxx, int nsteps,
                                                     double* bound) {
    const __m128 zero = _mm_setzero_ps(), fmax = _mm_set1_ps(std::numeric_limits<float>::max()),
                 absm = _mm_castsi128_ps(_mm_set1_epi32(0x7fffffff)), one = _mm_set1_ps(1.0f);
    const __m256d vsxx = _mm256_set1_pd(sxx), two = _mm256_set1_pd(2.0),
                  inf = _mm256_set1_pd(std::numeric_limits<double>::infinity());
    for (int s = 0; s < nsteps; s += 2) {  // candidates 2s .. 2s + 3: steps s, s, s + 1, s + 1
        const bool pair = s + 1 < nsteps;
        const __m128 d = pair ? _mm_loadu_ps(d2 + 2 * s) : load2(d2 + 2 * s);
        const __m128 usable =
            _mm_and_ps(_mm_and_ps(_mm_cmpneq_ps(d, zero), _mm_cmple_ps(_mm_and_ps(d, absm), fmax)),
                       _mm_cmple_ps(_mm_and_ps(_mm_div_ps(one, d), absm), fmax));
        const __m128 a = pair ? load2(sxl + s) : _mm_load_ss(sxl + s);
        const __m128 b = pair ? load2(sll + s) : _mm_load_ss(sll + s);
        const __m256d dd = _mm256_cvtps_pd(d), va = _mm256_cvtps_pd(_mm_unpacklo_ps(a, a)),
                      vb = _mm256_cvtps_pd(_mm_unpacklo_ps(b, b));
        const __m256d v =
            _mm256_add_pd(_mm256_sub_pd(vsxx, _mm256_mul_pd(_mm256_mul_pd(two, dd), va)),
                          _mm256_mul_pd(_mm256_mul_pd(dd, dd), vb));
        const __m256d ok = _mm256_castsi256_pd(_mm256_cvtepi32_epi64(_mm_castps_si128(usable)));
        _mm256_storeu_pd(bound + 2 * s, _mm256_blendv_pd(inf, v, ok));
    }
}

// Eight candidates per register (lane c: candidate c), V registers: asym_sums_avx2's float lanes
// for each candidate, lane k's chain (elements k, k + 8, ...) run as one pass, into
// out[(t * 8 + k) * ld + c] (t: the sum w r, w r^2, w r x).
template <int V>
__attribute__((target("avx2"))) void asym_lanes_avx2(const float* x, const float* wt, int64_t G,
                                                     float mn, const float* is, int ld,
                                                     float* out) {
    const __m256 lo = _mm256_setzero_ps(), hi = _mm256_set1_ps(15.0f);
    __m256 vis[V];
    for (int v = 0; v < V; ++v) vis[v] = _mm256_loadu_ps(is + 8 * v);
    for (int k = 0; k < 8; ++k) {
        __m256 p[V], q[V], u[V];
        for (int v = 0; v < V; ++v) p[v] = q[v] = u[v] = _mm256_setzero_ps();
        for (int64_t i = k; i < G; i += 8) {
            const __m256 xv = _mm256_set1_ps(x[i]), wv = _mm256_set1_ps(wt[i]),
                         d = _mm256_set1_ps(x[i] - mn);
            for (int v = 0; v < V; ++v) {
                const __m256 r = round_clamped8(_mm256_mul_ps(d, vis[v]), lo, hi);
                const __m256 wr = _mm256_mul_ps(wv, r);
                p[v] = _mm256_add_ps(p[v], wr);
                q[v] = _mm256_add_ps(q[v], _mm256_mul_ps(wr, r));
                u[v] = _mm256_add_ps(u[v], _mm256_mul_ps(wr, xv));
            }
        }
        for (int v = 0; v < V; ++v) {
            _mm256_storeu_ps(out + (0 * 8 + k) * ld + 8 * v, p[v]);
            _mm256_storeu_ps(out + (1 * 8 + k) * ld + 8 * v, q[v]);
            _mm256_storeu_ps(out + (2 * 8 + k) * ld + 8 * v, u[v]);
        }
    }
}

// All nc (<= 40) candidates of int4_asym_sums: the lanes in groups of at most three registers,
// then each sum added up in double in lane order, as sums_from does, four candidates at a time.
__attribute__((target("avx2"))) void asym_sums_lanes_avx2(const float* x, const float* wt,
                                                          int64_t G, float mn, const float* is,
                                                          int nc, double* s) {
    constexpr int kMax = 40;
    alignas(32) float pis[kMax];
    alignas(32) float out[3 * 8 * kMax];
    for (int c = 0; c < kMax; ++c) pis[c] = is[std::min(c, nc - 1)];  // spares repeat the last
    const int nv = (nc + 7) / 8;
    for (int v = 0; v < nv; v += 3) {
        const int left = nv - v;
        float* o = out + 8 * v;
        if (left >= 3)
            asym_lanes_avx2<3>(x, wt, G, mn, pis + 8 * v, kMax, o);
        else if (left == 2)
            asym_lanes_avx2<2>(x, wt, G, mn, pis + 8 * v, kMax, o);
        else
            asym_lanes_avx2<1>(x, wt, G, mn, pis + 8 * v, kMax, o);
    }
    for (int c = 0; c < nc; c += 4) {
        alignas(32) double t[3][4];
        for (int j = 0; j < 3; ++j) {
            __m256d acc = _mm256_setzero_pd();
            for (int k = 0; k < 8; ++k)
                acc =
                    _mm256_add_pd(acc, _mm256_cvtps_pd(_mm_load_ps(out + (j * 8 + k) * kMax + c)));
            _mm256_store_pd(t[j], acc);
        }
        for (int i = 0; i < 4 && c + i < nc; ++i)
            for (int j = 0; j < 3; ++j) s[3 * (c + i) + j] = t[j][i];
    }
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

namespace {

// Whether any of x[0..n) is infinite or NaN, on the bits: |x| as an int above the largest finite
// float's. The same loop compiled for each instruction set (the compiler vectorizes it to the
// register width; this check reads every weight a quantization writes).
#define WARDEN_ANY_NON_FINITE_BODY                                  \
    int32_t bad = 0;                                                \
    for (int64_t i = 0; i < n; ++i) {                               \
        int32_t u;                                                  \
        std::memcpy(&u, x + i, sizeof u);                           \
        bad |= static_cast<int32_t>((u & 0x7fffffff) > 0x7f7fffff); \
    }                                                               \
    return bad != 0;

bool any_non_finite_base(const float* x, int64_t n) {
    WARDEN_ANY_NON_FINITE_BODY
}
#if defined(__x86_64__)
__attribute__((target("avx2"))) bool any_non_finite_avx2(const float* x, int64_t n) {
    WARDEN_ANY_NON_FINITE_BODY
}
__attribute__((target("avx512f,avx512bw,avx512vl,avx2"))) bool any_non_finite_avx512(const float* x,
                                                                                     int64_t n) {
    WARDEN_ANY_NON_FINITE_BODY
}
#endif
#undef WARDEN_ANY_NON_FINITE_BODY

}  // namespace

int64_t first_non_finite(const float* x, int64_t n) {
#if defined(__x86_64__)
    const bool bad = use_avx512() ? any_non_finite_avx512(x, n)
                     : use_avx2() ? any_non_finite_avx2(x, n)
                                  : any_non_finite_base(x, n);
#else
    const bool bad = any_non_finite_base(x, n);
#endif
    if (!bad) return -1;
    for (int64_t i = 0; i < n; ++i)
        if (!std::isfinite(x[i])) return i;
    return -1;
}

int smallest_bounds(double* bound, int n, int k, int* pick) {
#if defined(__x86_64__)
    if (use_avx2() && n == 40) return smallest_avx2<10>(bound, k, pick);  // the searches' n
#endif
    int np = 0;
    for (; np < k; ++np) {
        double lane_least[4];
        int lane_at[4];
        for (int j = 0; j < 4; ++j) {
            lane_least[j] = std::numeric_limits<double>::infinity();
            lane_at[j] = -1;
        }
        for (int c = 0; c < n; c += 4)
            for (int j = 0; j < 4; ++j)
                if (bound[c + j] < lane_least[j]) {
                    lane_least[j] = bound[c + j];
                    lane_at[j] = c + j;
                }
        double least = std::numeric_limits<double>::infinity();
        int at = -1;
        for (int j = 0; j < 4; ++j)
            if (lane_at[j] >= 0 &&
                (lane_least[j] < least || (lane_least[j] == least && lane_at[j] < at))) {
                least = lane_least[j];
                at = lane_at[j];
            }
        if (at < 0) break;
        pick[np] = at;
        bound[at] = std::numeric_limits<double>::infinity();
    }
    return np;
}

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
        for (int c = 0; c < nc; c += 4)
            errors4_avx2(x, wt, G, d + c, m + c, std::min(4, nc - c), lo, hi, err + c);
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
        imp ? int8_errors_avx2<true>(x, imp, n, dd, all)
            : int8_errors_avx2<false>(x, imp, n, dd, all);
    else
#endif
        int8_errors_base(x, imp, n, dd, all);
    std::copy(all, all + nc, err);
}

void int4_sym_scales(const float* iscale, const float* sxl, const float* sll, int n, float* raw) {
#if defined(__x86_64__)
    if (use_avx2()) return sym_scales_avx2(iscale, sxl, sll, n, raw);
#endif
    sym_scales_ref(iscale, sxl, sll, 0, n, raw);
}

void int4_asym_fits(const double* s3, int n, double sw, double swx, float* d, float* m) {
#if defined(__x86_64__)
    if (use_avx2()) return asym_fits_avx2(s3, n, sw, swx, d, m);
#endif
    asym_fits_ref(s3, 0, n, sw, swx, d, m);
}

double int4_error_weights(const float* x, const float* imp, int64_t G, float* wt) {
#if defined(__x86_64__)
    if (use_avx2()) return error_weights_avx2(x, imp, G, wt);
#endif
    return error_weights_ref(x, imp, G, wt);
}

void int8_round_codes(const float* x, int64_t n, float id, uint8_t* q) {
    int64_t i = 0;
#if defined(__x86_64__)
    if (use_avx2()) i = int8_codes_avx2(x, n, id, q);
#endif
    for (; i < n; ++i)
        q[i] = static_cast<uint8_t>(static_cast<int8_t>(round_clamped(x[i] * id, -127.0f, 127.0f)));
}

float int4_abs_max(const float* x, int64_t G, float* first) {
#if defined(__x86_64__)
    if (use_avx2()) return abs_max_avx2(x, G, first);
#endif
    return abs_max_ref(x, G, first);
}

void int4_sym_bounds(const float* d2, const float* sxl, const float* sll, double sxx, int nsteps,
                     double* bound) {
#if defined(__x86_64__)
    if (use_avx2()) return sym_bounds_avx2(d2, sxl, sll, sxx, nsteps, bound);
#endif
    for (int s = 0; s < nsteps; ++s) sym_bounds_ref(d2, sxl, sll, sxx, s, bound);
    for (int c = 2 * nsteps; c < (2 * nsteps + 3) / 4 * 4; ++c)
        bound[c] = std::numeric_limits<double>::infinity();
}

void int4_group_codes(const float* x, int64_t G, float d, float m, float lo, float hi, float* l) {
    const float id = 1.0f / d;
    for (int64_t i = 0; i < G; ++i) l[i] = round_clamped((x[i] - m) * id, lo, hi);
}

void int4_refit_sums(const float* x, const float* wt, int64_t G, const float* is, int nc,
                     float* sxl, float* sll) {
#if defined(__x86_64__)
    if (use_avx512()) return refits_avx512(x, wt, G, is, nc, sxl, sll);
    if (use_avx2()) return refits_avx2(x, wt, G, is, nc, sxl, sll);
#endif
    for (int c = 0; c < nc; ++c) refit_ref(x, wt, G, is[c], sxl + c, sll + c);
}

void int4_asym_sums(const float* x, const float* wt, int64_t G, float mn, const float* is, int nc,
                    double* s) {
#if defined(__x86_64__)
    if (use_avx512()) return asym_sums_avx512(x, wt, G, mn, is, nc, s);
    if (use_avx2()) {
        for (int c = 0; c < nc; c += 40)
            asym_sums_lanes_avx2(x, wt, G, mn, is + c, std::min(40, nc - c), s + 3 * c);
        return;
    }
#endif
    for (int c = 0; c < nc; ++c) asym_sums_ref(x, wt, G, mn, is[c], s + 3 * c);
}

}  // namespace warden::quant
