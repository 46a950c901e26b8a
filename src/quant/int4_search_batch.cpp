#include "quant/int4_search_batch.h"

#include <algorithm>
#include <climits>
#include <limits>

#include "kernels/cpu_features.h"
#include "kernels/x86_intrinsics.h"
#include "quant/int4_candidates.h"
#include "util/error.h"

namespace warden::quant {

#if defined(__x86_64__)
namespace {

#define WARDEN_AVX512_TARGET __attribute__((target("avx512f,avx512dq,avx2")))

constexpr int kLanes = kInt4BatchGroups;
constexpr int kSymCands =
    1 + 2 * kSymSteps;  // the Q4_0 rule, then each grid step's scale and refit
constexpr int kAsymCands = kAsymClips + kAsymSteps;  // the clips, then each grid step's fit
constexpr int kMaxG = 128;
static_assert(kAsymCands >= kSymCands, "Lanes' candidate rows hold either search's");

// The sixteen groups side by side: element i of every group in one row of kLanes.
struct alignas(64) Lanes {
    float x[kMaxG][kLanes], wt[kMaxG][kLanes], wx[kMaxG][kLanes];
    float sxl[kSymSteps][kLanes], sll[kSymSteps][kLanes];
    float back[kAsymCands][kLanes];     // each candidate's stored scale as f32
    uint32_t bits[kAsymCands][kLanes];  // and its f16 / bf16 bits
    float back_m[kAsymCands][kLanes];   // the asymmetric search's offsets, the same way
    uint32_t bits_m[kAsymCands][kLanes];
    double sums[kAsymSteps][3][kLanes];  // its sums w r, w r^2, w r x per grid step
    uint8_t codes[kMaxG][kLanes];
};

// round_clamped (quant/int4_candidates.h) in one rounding instruction. It differs from adding and
// subtracting kRoundMagic only in the sign of a zero code (-0.5 < v < 0 rounds to -0, not +0),
// which changes no sum, error or code computed from it: a running sum starts at +0 and adding
// -0 leaves it as it is, r d + m is +0 or m either way, and the code is 0.
WARDEN_AVX512_TARGET inline __m512 round16(__m512 v) {
    return _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
WARDEN_AVX512_TARGET inline __m512 round_clamped16(__m512 v, __m512 lo, __m512 hi) {
    return round16(_mm512_min_ps(hi, _mm512_max_ps(lo, v)));
}

// Lanes 0-7 and 8-15 as doubles, and back.
WARDEN_AVX512_TARGET inline __m512d low_pd(__m512 v) {
    return _mm512_cvtps_pd(_mm512_castps512_ps256(v));
}
WARDEN_AVX512_TARGET inline __m512d high_pd(__m512 v) {
    return _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}
WARDEN_AVX512_TARGET inline __m512 join_ps(__m512d lo, __m512d hi) {
    const __m512d l = _mm512_castps_pd(_mm512_castps256_ps512(_mm512_cvtpd_ps(lo)));
    return _mm512_castpd_ps(_mm512_insertf64x4(l, _mm256_castps_pd(_mm512_cvtpd_ps(hi)), 1));
}

// The per-group path's usable scale (quantizer.cpp usable_scale, int4_sym_bounds): nonzero, finite,
// with a finite inverse.
WARDEN_AVX512_TARGET inline __mmask16 usable16(__m512 d) {
    const __m512 absm = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff)),
                 fmax = _mm512_set1_ps(std::numeric_limits<float>::max());
    return _mm512_cmp_ps_mask(d, _mm512_setzero_ps(), _CMP_NEQ_UQ) &
           _mm512_cmp_ps_mask(_mm512_and_ps(d, absm), fmax, _CMP_LE_OQ) &
           _mm512_cmp_ps_mask(_mm512_and_ps(_mm512_div_ps(_mm512_set1_ps(1.0f), d), absm), fmax,
                              _CMP_LE_OQ);
}

// int4_round_scales for one candidate of every lane: the stored bits and their value.
WARDEN_AVX512_TARGET inline void round_scales16(__m512 v, bool bf16, uint32_t* bits, float* back) {
    if (bf16) {  // tensor::f32_to_bf16: round to nearest even, a NaN kept quiet
        const __m512i u = _mm512_castps_si512(v), one = _mm512_set1_epi32(1);
        const __mmask16 nan = _mm512_cmpgt_epi32_mask(
            _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
        const __m512i up = _mm512_add_epi32(_mm512_set1_epi32(0x7fff),
                                            _mm512_and_si512(_mm512_srli_epi32(u, 16), one));
        __m512i h = _mm512_srli_epi32(_mm512_add_epi32(u, up), 16);
        h = _mm512_mask_mov_epi32(
            h, nan, _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40)));
        _mm512_store_si512(bits, h);
        _mm512_store_ps(back, _mm512_castsi512_ps(_mm512_slli_epi32(h, 16)));
        return;
    }
    const __m256i h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm512_store_si512(bits, _mm512_cvtepu16_epi32(h));
    _mm512_store_ps(back, _mm512_cvtph_ps(h));
}

// r[j] <- column j of the 16 x 16 matrix whose row i is r[i].
WARDEN_AVX512_TARGET inline void transpose16(__m512* r) {
    __m512 t[16];
    for (int i = 0; i < 8; ++i) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; ++i) {
        r[4 * i + 0] = _mm512_shuffle_ps(t[4 * i + 0], t[4 * i + 2], 0x44);
        r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i + 0], t[4 * i + 2], 0xee);
        r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
        r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xee);
    }
    // r[4i + j], 128-bit lane k: column 4k + j of rows 4i .. 4i + 3.
    for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 4; ++j) {
            t[8 * i + j] = _mm512_shuffle_f32x4(r[8 * i + j], r[8 * i + 4 + j], 0x88);
            t[8 * i + 4 + j] = _mm512_shuffle_f32x4(r[8 * i + j], r[8 * i + 4 + j], 0xdd);
        }
    // t[8i + j], 128-bit lanes 0-3: columns j, 8 + j of rows 8i .. 8i + 3, then of 8i + 4 .. 8i + 7
    // (t[8i + 4 + j]: columns 4 + j, 12 + j).
    for (int j = 0; j < 4; ++j) {
        r[j] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0x88);
        r[8 + j] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0xdd);
        r[4 + j] = _mm512_shuffle_f32x4(t[4 + j], t[12 + j], 0x88);
        r[12 + j] = _mm512_shuffle_f32x4(t[4 + j], t[12 + j], 0xdd);
    }
}

// (t0 + t1) + (t2 + t3): the four running sums' total.
WARDEN_AVX512_TARGET inline __m512d sum4(const __m512d* t) {
    return _mm512_add_pd(_mm512_add_pd(t[0], t[1]), _mm512_add_pd(t[2], t[3]));
}

// Loads the groups x[l G .. (l + 1) G) side by side into s.x (sixteen columns per transpose, the
// rest by gathers).
WARDEN_AVX512_TARGET void load_lanes(const float* x, int64_t n, __m512i at, Lanes& s) {
    const int64_t whole = n / 16 * 16;
    for (int64_t i = 0; i < whole; i += 16) {
        __m512 r[16];
        for (int l = 0; l < kLanes; ++l) r[l] = _mm512_loadu_ps(x + l * n + i);
        transpose16(r);
        for (int j = 0; j < 16; ++j) _mm512_store_ps(s.x[i + j], r[j]);
    }
    for (int64_t i = whole; i < n; ++i) _mm512_store_ps(s.x[i], _mm512_i32gather_ps(at, x + i, 4));
}

// int4_error_weights of every lane: s.wt = imp sqrt(sigma^2 + x^2) and s.wx = wt x; returns
// sxx = sum wt x^2 as two halves of doubles. The sums in double in four running sums (lane k:
// elements k, k + 4, ...).
WARDEN_AVX512_TARGET void error_weights16(const float* imp, int64_t n, __m512i at, Lanes& s,
                                          __m512d* sxx) {
    __m512d a[2][4], b[2][4];
    for (int h = 0; h < 2; ++h)
        for (int k = 0; k < 4; ++k) a[h][k] = b[h][k] = _mm512_setzero_pd();
    for (int64_t i = 0; i < n; i += 4)
        for (int k = 0; k < 4; ++k) {
            const __m512 v = _mm512_load_ps(s.x[i + k]);
            const __m512d l = low_pd(v), u = high_pd(v);
            a[0][k] = _mm512_add_pd(a[0][k], _mm512_mul_pd(l, l));
            a[1][k] = _mm512_add_pd(a[1][k], _mm512_mul_pd(u, u));
        }
    const __m512d gd = _mm512_set1_pd(static_cast<double>(n));
    const __m512 s2 = join_ps(_mm512_div_pd(sum4(a[0]), gd), _mm512_div_pd(sum4(a[1]), gd));
    const __m512 one = _mm512_set1_ps(1.0f);
    for (int64_t i = 0; i < n; ++i) {
        const __m512 v = _mm512_load_ps(s.x[i]);
        const __m512 iv = imp ? _mm512_i32gather_ps(at, imp + i, 4) : one;
        const __m512 w = _mm512_mul_ps(iv, _mm512_sqrt_ps(_mm512_add_ps(s2, _mm512_mul_ps(v, v))));
        _mm512_store_ps(s.wt[i], w);
        _mm512_store_ps(s.wx[i], _mm512_mul_ps(w, v));
    }
    for (int64_t i = 0; i < n; i += 4)
        for (int k = 0; k < 4; ++k) {
            const __m512 v = _mm512_load_ps(s.x[i + k]), w = _mm512_load_ps(s.wt[i + k]);
            const __m512d vl = low_pd(v), vh = high_pd(v);
            b[0][k] = _mm512_add_pd(b[0][k], _mm512_mul_pd(_mm512_mul_pd(low_pd(w), vl), vl));
            b[1][k] = _mm512_add_pd(b[1][k], _mm512_mul_pd(_mm512_mul_pd(high_pd(w), vh), vh));
        }
    sxx[0] = sum4(b[0]);
    sxx[1] = sum4(b[1]);
}

// The three smallest of a stream of bounds per lane (smallest_bounds: the first of equal bounds
// first, infinity and NaN never chosen): an insertion in stream order with strict comparisons.
struct Smallest3 {
    __m512d b[3], i[3];
    WARDEN_AVX512_TARGET Smallest3() {
        for (int j = 0; j < 3; ++j) {
            b[j] = _mm512_set1_pd(std::numeric_limits<double>::infinity());
            i[j] = _mm512_set1_pd(-1.0);
        }
    }
    WARDEN_AVX512_TARGET void add(__m512d bound, int c) {
        const __m512d ci = _mm512_set1_pd(static_cast<double>(c));
        const __mmask8 m1 = _mm512_cmp_pd_mask(bound, b[0], _CMP_LT_OQ),
                       m2 = _mm512_cmp_pd_mask(bound, b[1], _CMP_LT_OQ),
                       m3 = _mm512_cmp_pd_mask(bound, b[2], _CMP_LT_OQ);
        b[2] = _mm512_mask_mov_pd(_mm512_mask_mov_pd(b[2], m3, bound), m2, b[1]);
        i[2] = _mm512_mask_mov_pd(_mm512_mask_mov_pd(i[2], m3, ci), m2, i[1]);
        b[1] = _mm512_mask_mov_pd(_mm512_mask_mov_pd(b[1], m2, bound), m1, b[0]);
        i[1] = _mm512_mask_mov_pd(_mm512_mask_mov_pd(i[1], m2, ci), m1, i[0]);
        b[0] = _mm512_mask_mov_pd(b[0], m1, bound);
        i[0] = _mm512_mask_mov_pd(i[0], m1, ci);
    }
};

// Rank j's stream index of both halves' Smallest3 as sixteen int32 lanes (-1: none).
WARDEN_AVX512_TARGET inline __m512i ranked(const Smallest3* halves, int j) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtpd_epi32(halves[0].i[j])),
                              _mm512_cvtpd_epi32(halves[1].i[j]), 1);
}

// int4_group_errors of one candidate per lane, (d, m): eight running sums of wt e^2 (lane k:
// elements k, k + 8, ...) added as a sum8 tree.
WARDEN_AVX512_TARGET __m512 group_errors16(const Lanes& s, int64_t n, __m512 d, __m512 m, __m512 lo,
                                           __m512 hi) {
    const __m512 vid = _mm512_div_ps(_mm512_set1_ps(1.0f), d);
    __m512 acc[8];
    for (int k = 0; k < 8; ++k) acc[k] = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 8)
        for (int k = 0; k < 8; ++k) {
            const __m512 v = _mm512_load_ps(s.x[i + k]);
            const __m512 r = round_clamped16(_mm512_mul_ps(_mm512_sub_ps(v, m), vid), lo, hi);
            const __m512 e = _mm512_sub_ps(v, _mm512_add_ps(_mm512_mul_ps(r, d), m));
            acc[k] = _mm512_add_ps(acc[k],
                                   _mm512_mul_ps(_mm512_mul_ps(_mm512_load_ps(s.wt[i + k]), e), e));
        }
    return _mm512_add_ps(
        _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3])),
        _mm512_add_ps(_mm512_add_ps(acc[4], acc[5]), _mm512_add_ps(acc[6], acc[7])));
}

// The codes of (d, m) per lane (int4_group_codes: nearbyint(clamp((x - m) / d))), plus `bias`,
// `dead` lanes all `fill`, written group after group into q_out (sixteen columns per transpose).
WARDEN_AVX512_TARGET void store_codes(Lanes& s, int64_t n, __m512 d, __m512 m, __m512 lo, __m512 hi,
                                      int bias, __mmask16 live, int fill, uint8_t* q_out) {
    const __m512 id = _mm512_div_ps(_mm512_set1_ps(1.0f), d);
    const __m512i vbias = _mm512_set1_epi32(bias), vfill = _mm512_set1_epi32(fill);
    const int64_t whole = n / 16 * 16;  // columns stored by transposes, the rest byte by byte
    for (int64_t i0 = 0; i0 < n; i0 += 16) {
        __m512 c[16];
        const int64_t cnt = std::min<int64_t>(16, n - i0);
        for (int64_t j = 0; j < cnt; ++j) {
            const __m512 r = round_clamped16(
                _mm512_mul_ps(_mm512_sub_ps(_mm512_load_ps(s.x[i0 + j]), m), id), lo, hi);
            const __m512i v =
                _mm512_mask_mov_epi32(vfill, live, _mm512_add_epi32(_mm512_cvttps_epi32(r), vbias));
            if (i0 < whole) {
                c[j] = _mm512_castsi512_ps(v);
            } else {
                _mm_store_si128(reinterpret_cast<__m128i*>(s.codes[i0 + j]),
                                _mm512_cvtepi32_epi8(v));
            }
        }
        if (i0 < whole) {
            transpose16(c);
            for (int l = 0; l < kLanes; ++l)
                _mm_storeu_si128(reinterpret_cast<__m128i*>(q_out + l * n + i0),
                                 _mm512_cvtepi32_epi8(_mm512_castps_si512(c[l])));
        }
    }
    for (int l = 0; l < kLanes; ++l)
        for (int64_t i = whole; i < n; ++i) q_out[l * n + i] = s.codes[i][l];
}

// Lanes' stored bits of candidate cand (an index into s.bits / s.bits_m rows), 0 where not live.
WARDEN_AVX512_TARGET inline void store_bits(const uint32_t (*bits)[kLanes], __m512i cand,
                                            __mmask16 live, uint16_t* out) {
    const __m512i slot =
        _mm512_add_epi32(_mm512_slli_epi32(cand, 4),
                         _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
    const __m512i b = _mm512_maskz_mov_epi32(
        live, _mm512_i32gather_epi32(slot, reinterpret_cast<const int*>(&bits[0][0]), 4));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm512_cvtepi32_epi16(b));
}

// Lane l's value of row cand[l] of a [candidate][lane] table.
WARDEN_AVX512_TARGET inline __m512 pick16(const float (*rows)[kLanes], __m512i cand) {
    const __m512i slot =
        _mm512_add_epi32(_mm512_slli_epi32(cand, 4),
                         _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
    return _mm512_i32gather_ps(slot, &rows[0][0], 4);
}

// The asymmetric search's usable candidate c: its scale usable (usable16), its offset finite.
WARDEN_AVX512_TARGET inline __mmask16 usable_asym16(const Lanes& s, int c) {
    const __m512 absm = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff)),
                 fmax = _mm512_set1_ps(std::numeric_limits<float>::max());
    return usable16(_mm512_load_ps(s.back[c])) &
           _mm512_cmp_ps_mask(_mm512_and_ps(_mm512_load_ps(s.back_m[c]), absm), fmax, _CMP_LE_OQ);
}

// This thread's side-by-side buffers, which both searches use (one call at a time).
Lanes& lanes() {
    thread_local Lanes s;
    return s;
}

[[noreturn]] void no_scale() {
    throw util::Error("int4 quantization: group scale out of range of the scale dtype");
}

WARDEN_AVX512_TARGET void sym16(const float* x, const float* imp, int64_t n, bool bf16,
                                const float* neg_step, uint16_t* d_out, uint8_t* q_out) {
    Lanes& s = lanes();
    const __m512i at =
        _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                           _mm512_set1_epi32(static_cast<int>(n)));
    const __m512 absm = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff)),
                 zero = _mm512_setzero_ps(), one = _mm512_set1_ps(1.0f), lo = _mm512_set1_ps(-8.0f),
                 hi = _mm512_set1_ps(7.0f),
                 inf = _mm512_set1_ps(std::numeric_limits<float>::infinity());

    // Each group's largest magnitude and the first value of it (int4_abs_max).
    load_lanes(x, n, at, s);
    __m512 amax = zero;
    for (int64_t i = 0; i < n; ++i)
        amax = _mm512_max_ps(amax, _mm512_and_ps(absm, _mm512_load_ps(s.x[i])));
    __m512 first = zero;
    for (int64_t i = n - 1; i >= 0; --i) {
        const __m512 v = _mm512_load_ps(s.x[i]);
        first = _mm512_mask_mov_ps(first,
                                   _mm512_cmp_ps_mask(_mm512_and_ps(absm, v), amax, _CMP_EQ_OQ), v);
    }
    // An all-zero group gets scale 0 and codes 8; its lane computes on a stand-in maximum of 1.
    const __mmask16 live = _mm512_cmp_ps_mask(amax, zero, _CMP_NEQ_OQ);
    const __m512 vmax = _mm512_mask_mov_ps(one, live, first);
    __m512d sxx[2];
    error_weights16(imp, n, at, s, sxx);

    // The grid (int4_refit_sums, int4_sym_scales): per step, eight running sums (lane k: elements
    // k, k + 8, ...) of w x r and w r^2, added in k order; its scale 1 / is and its refit.
    for (int st = 0; st < kSymSteps; ++st) {
        const __m512 is = _mm512_div_ps(_mm512_set1_ps(neg_step[st]), vmax);
        __m512 p[8], q[8];
        for (int k = 0; k < 8; ++k) p[k] = q[k] = zero;
        for (int64_t i = 0; i < n; i += 8)
            for (int k = 0; k < 8; ++k) {
                const __m512 r =
                    round_clamped16(_mm512_mul_ps(_mm512_load_ps(s.x[i + k]), is), lo, hi);
                p[k] = _mm512_add_ps(p[k], _mm512_mul_ps(_mm512_load_ps(s.wx[i + k]), r));
                q[k] = _mm512_add_ps(
                    q[k], _mm512_mul_ps(_mm512_mul_ps(_mm512_load_ps(s.wt[i + k]), r), r));
            }
        __m512 sa = zero, sb = zero;
        for (int k = 0; k < 8; ++k) {
            sa = _mm512_add_ps(sa, p[k]);
            sb = _mm512_add_ps(sb, q[k]);
        }
        _mm512_store_ps(s.sxl[st], sa);
        _mm512_store_ps(s.sll[st], sb);
        const __m512 fit =
            _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(sb, zero, _CMP_GT_OQ), _mm512_div_ps(sa, sb));
        round_scales16(_mm512_div_ps(one, is), bf16, s.bits[1 + 2 * st], s.back[1 + 2 * st]);
        round_scales16(fit, bf16, s.bits[2 + 2 * st], s.back[2 + 2 * st]);
    }
    round_scales16(_mm512_div_ps(vmax, _mm512_set1_ps(-8.0f)), bf16, s.bits[0], s.back[0]);

    // int4_sym_bounds and smallest_bounds: each grid scale's error bound sxx - 2 d sxl + d^2 sll
    // in double (infinity where the scale is unusable), and the three smallest.
    Smallest3 top[2];
    for (int c = 0; c < kSymCands - 1; ++c) {
        const int st = c / 2;
        const __m512 dv = _mm512_load_ps(s.back[1 + c]);
        const __m512 xl = _mm512_load_ps(s.sxl[st]), ll = _mm512_load_ps(s.sll[st]);
        const __mmask16 usable = usable16(dv);
        for (int h = 0; h < 2; ++h) {
            const __m512d dd = h ? high_pd(dv) : low_pd(dv);
            const __m512d va = h ? high_pd(xl) : low_pd(xl), vb = h ? high_pd(ll) : low_pd(ll);
            const __m512d bound = _mm512_add_pd(
                _mm512_sub_pd(sxx[h], _mm512_mul_pd(_mm512_mul_pd(_mm512_set1_pd(2.0), dd), va)),
                _mm512_mul_pd(_mm512_mul_pd(dd, dd), vb));
            const auto ok = static_cast<__mmask8>(h ? usable >> 8 : usable & 0xff);
            top[h].add(_mm512_mask_mov_pd(_mm512_set1_pd(std::numeric_limits<double>::infinity()),
                                          ok, bound),
                       c);
        }
    }

    // The exact errors of the Q4_0 rule, where usable, and of the three grid scales (bound index
    // c is candidate 1 + c; none becomes 0, never valid); the least wins, the first candidate
    // among equal errors (the per-group path scores them in candidate order).
    __m512 best = inf;
    __m512i best_cand = _mm512_set1_epi32(INT_MAX);
    for (int j = 0; j < 4; ++j) {
        const __m512i cand = j == 0 ? _mm512_setzero_si512()
                                    : _mm512_add_epi32(ranked(top, j - 1), _mm512_set1_epi32(1));
        const __mmask16 valid =
            j == 0 ? usable16(_mm512_load_ps(s.back[0]))
                   : _mm512_cmp_epi32_mask(cand, _mm512_setzero_si512(), _MM_CMPINT_NE);
        if ((valid & live) == 0) continue;
        const __m512 err = group_errors16(s, n, pick16(s.back, cand), zero, lo, hi);
        const __mmask16 ok = valid & _mm512_cmp_ps_mask(err, inf, _CMP_LT_OQ);
        const __mmask16 better = ok & (_mm512_cmp_ps_mask(err, best, _CMP_LT_OQ) |
                                       (_mm512_cmp_ps_mask(err, best, _CMP_EQ_OQ) &
                                        _mm512_cmp_epi32_mask(cand, best_cand, _MM_CMPINT_LT)));
        best = _mm512_mask_mov_ps(best, better, err);
        best_cand = _mm512_mask_mov_epi32(best_cand, better, cand);
    }
    const __mmask16 chosen =
        _mm512_cmp_epi32_mask(best_cand, _mm512_set1_epi32(INT_MAX), _MM_CMPINT_NE);
    if ((live & ~chosen) != 0) no_scale();
    const __m512i win = _mm512_maskz_mov_epi32(chosen, best_cand);
    store_bits(s.bits, win, live, d_out);
    store_codes(s, n, pick16(s.back, win), zero, lo, hi, 8, live, 8, q_out);
}

WARDEN_AVX512_TARGET void asym16(const float* x, const float* imp, int64_t n, bool bf16,
                                 const float* clip_shrink, const float* step, uint16_t* d_out,
                                 uint16_t* m_out, uint8_t* q_out) {
    Lanes& s = lanes();
    const __m512i at =
        _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                           _mm512_set1_epi32(static_cast<int>(n)));
    const __m512 zero = _mm512_setzero_ps(), lo = zero, hi = _mm512_set1_ps(15.0f),
                 inf = _mm512_set1_ps(std::numeric_limits<float>::infinity());
    const __m512d dzero = _mm512_setzero_pd(), two = _mm512_set1_pd(2.0),
                  dinf = _mm512_set1_pd(std::numeric_limits<double>::infinity());

    load_lanes(x, n, at, s);
    __m512 mn = _mm512_load_ps(s.x[0]), mx = mn;
    for (int64_t i = 1; i < n; ++i) {
        const __m512 v = _mm512_load_ps(s.x[i]);
        mn = _mm512_min_ps(mn, v);
        mx = _mm512_max_ps(mx, v);
    }
    // A constant group gets scale 0, offset its value, codes 0; its lane computes on 0..1.
    const __mmask16 live = _mm512_cmp_ps_mask(mx, mn, _CMP_NEQ_OQ);
    round_scales16(mn, bf16, s.bits_m[0], s.back_m[0]);  // the constant groups' offsets
    const __m512i flat_m = _mm512_load_si512(s.bits_m[0]);
    const __m512 vmn = _mm512_maskz_mov_ps(live, mn),
                 vmx = _mm512_mask_mov_ps(_mm512_set1_ps(1.0f), live, mx);
    const __m512 range = _mm512_sub_ps(vmx, vmn);
    __m512d sxx[2];
    error_weights16(imp, n, at, s, sxx);
    // sw = sum w, swx = sum w x in double, four running sums each; s.wx becomes x - mn.
    __m512d aw[2][4], ax[2][4];
    for (int h = 0; h < 2; ++h)
        for (int k = 0; k < 4; ++k) aw[h][k] = ax[h][k] = dzero;
    for (int64_t i = 0; i < n; i += 4)
        for (int k = 0; k < 4; ++k) {
            const __m512 w = _mm512_load_ps(s.wt[i + k]), v = _mm512_load_ps(s.x[i + k]);
            aw[0][k] = _mm512_add_pd(aw[0][k], low_pd(w));
            aw[1][k] = _mm512_add_pd(aw[1][k], high_pd(w));
            ax[0][k] = _mm512_add_pd(ax[0][k], _mm512_mul_pd(low_pd(w), low_pd(v)));
            ax[1][k] = _mm512_add_pd(ax[1][k], _mm512_mul_pd(high_pd(w), high_pd(v)));
        }
    const __m512d sw[2] = {sum4(aw[0]), sum4(aw[1])}, swx[2] = {sum4(ax[0]), sum4(ax[1])};
    for (int64_t i = 0; i < n; ++i)
        _mm512_store_ps(s.wx[i], _mm512_sub_ps(_mm512_load_ps(s.x[i]), vmn));

    // The clip ratios: (d, m) = ((hi - lo) / 15, lo) for the range shrunk at both ends.
    for (int c = 0; c < kAsymClips; ++c) {
        const __m512 shrink = _mm512_mul_ps(_mm512_set1_ps(clip_shrink[c]), range);
        const __m512 l = _mm512_add_ps(vmn, shrink), u = _mm512_sub_ps(vmx, shrink);
        round_scales16(_mm512_div_ps(_mm512_sub_ps(u, l), _mm512_set1_ps(15.0f)), bf16, s.bits[c],
                       s.back[c]);
        round_scales16(l, bf16, s.bits_m[c], s.back_m[c]);
    }
    // The grid (int4_asym_sums, int4_asym_fits): per step, eight running sums each of w r, w r^2
    // and w r x (lane k: elements k, k + 8, ...), added in k order in double; the weighted
    // least-squares (d, m) of those codes.
    for (int st = 0; st < kAsymSteps; ++st) {
        const __m512 is = _mm512_div_ps(_mm512_set1_ps(step[st]), range);
        __m512 p[8], q[8], u[8];
        for (int k = 0; k < 8; ++k) p[k] = q[k] = u[k] = zero;
        for (int64_t i = 0; i < n; i += 8)
            for (int k = 0; k < 8; ++k) {
                // (x - mn) is >= +0 and is > 0, so the clamp at 0 changes nothing.
                const __m512 r =
                    round16(_mm512_min_ps(hi, _mm512_mul_ps(_mm512_load_ps(s.wx[i + k]), is)));
                const __m512 wr = _mm512_mul_ps(_mm512_load_ps(s.wt[i + k]), r);
                p[k] = _mm512_add_ps(p[k], wr);
                q[k] = _mm512_add_ps(q[k], _mm512_mul_ps(wr, r));
                u[k] = _mm512_add_ps(u[k], _mm512_mul_ps(wr, _mm512_load_ps(s.x[i + k])));
            }
        __m512d t[3][2];
        for (int j = 0; j < 3; ++j) t[j][0] = t[j][1] = dzero;
        for (int k = 0; k < 8; ++k) {
            t[0][0] = _mm512_add_pd(t[0][0], low_pd(p[k]));
            t[0][1] = _mm512_add_pd(t[0][1], high_pd(p[k]));
            t[1][0] = _mm512_add_pd(t[1][0], low_pd(q[k]));
            t[1][1] = _mm512_add_pd(t[1][1], high_pd(q[k]));
            t[2][0] = _mm512_add_pd(t[2][0], low_pd(u[k]));
            t[2][1] = _mm512_add_pd(t[2][1], high_pd(u[k]));
        }
        __m512d dd[2], md[2];
        __mmask8 fitted[2];
        for (int h = 0; h < 2; ++h) {
            for (int j = 0; j < 3; ++j) _mm512_store_pd(&s.sums[st][j][8 * h], t[j][h]);
            const __m512d a = t[0][h], b = t[1][h], c = t[2][h];
            const __m512d det = _mm512_sub_pd(_mm512_mul_pd(sw[h], b), _mm512_mul_pd(a, a));
            fitted[h] = _mm512_cmp_pd_mask(det, dzero, _CMP_GT_OQ);
            dd[h] = _mm512_div_pd(_mm512_sub_pd(_mm512_mul_pd(sw[h], c), _mm512_mul_pd(swx[h], a)),
                                  det);
            md[h] =
                _mm512_div_pd(_mm512_sub_pd(_mm512_mul_pd(b, swx[h]), _mm512_mul_pd(a, c)), det);
        }
        const __mmask16 fit = static_cast<__mmask16>(fitted[0] | (fitted[1] << 8));
        round_scales16(_mm512_maskz_mov_ps(fit, join_ps(dd[0], dd[1])), bf16,
                       s.bits[kAsymClips + st], s.back[kAsymClips + st]);
        round_scales16(_mm512_maskz_mov_ps(fit, join_ps(md[0], md[1])), bf16,
                       s.bits_m[kAsymClips + st], s.back_m[kAsymClips + st]);
    }

    // The fits' error bounds (their error with the grid step's codes) in double, and the three
    // smallest.
    Smallest3 top[2];
    for (int st = 0; st < kAsymSteps; ++st) {
        const int c = kAsymClips + st;
        const __mmask16 ok = usable_asym16(s, c);
        const __m512 dv = _mm512_load_ps(s.back[c]), mv = _mm512_load_ps(s.back_m[c]);
        for (int h = 0; h < 2; ++h) {
            const __m512d d = h ? high_pd(dv) : low_pd(dv), m = h ? high_pd(mv) : low_pd(mv);
            const __m512d a = _mm512_load_pd(&s.sums[st][0][8 * h]),
                          b = _mm512_load_pd(&s.sums[st][1][8 * h]),
                          cc = _mm512_load_pd(&s.sums[st][2][8 * h]);
            const __m512d td = _mm512_mul_pd(two, d);
            __m512d bound = _mm512_sub_pd(sxx[h], _mm512_mul_pd(td, cc));
            bound = _mm512_sub_pd(bound, _mm512_mul_pd(_mm512_mul_pd(two, m), swx[h]));
            bound = _mm512_add_pd(bound, _mm512_mul_pd(_mm512_mul_pd(d, d), b));
            bound = _mm512_add_pd(bound, _mm512_mul_pd(_mm512_mul_pd(td, m), a));
            bound = _mm512_add_pd(bound, _mm512_mul_pd(_mm512_mul_pd(m, m), sw[h]));
            const auto okh = static_cast<__mmask8>(h ? ok >> 8 : ok & 0xff);
            top[h].add(_mm512_mask_mov_pd(dinf, okh, bound), st);
        }
    }

    // The exact errors of the usable clips, then of the three smallest bounds' fits in ascending
    // bound; the first least error in that order wins.
    __m512 best = inf;
    __m512i best_cand = _mm512_set1_epi32(-1);
    for (int j = 0; j < kAsymClips + 3; ++j) {
        __m512i cand;
        __mmask16 valid;
        if (j < kAsymClips) {
            cand = _mm512_set1_epi32(j);
            valid = usable_asym16(s, j);
        } else {
            const __m512i r = ranked(top, j - kAsymClips);
            valid = _mm512_cmp_epi32_mask(r, _mm512_setzero_si512(), _MM_CMPINT_NLT);
            cand =
                _mm512_add_epi32(_mm512_maskz_mov_epi32(valid, r), _mm512_set1_epi32(kAsymClips));
        }
        if ((valid & live) == 0) continue;
        const __m512 err =
            group_errors16(s, n, pick16(s.back, cand), pick16(s.back_m, cand), lo, hi);
        const __mmask16 better = valid & _mm512_cmp_ps_mask(err, best, _CMP_LT_OQ);
        best = _mm512_mask_mov_ps(best, better, err);
        best_cand = _mm512_mask_mov_epi32(best_cand, better, cand);
    }
    const __mmask16 chosen =
        _mm512_cmp_epi32_mask(best_cand, _mm512_setzero_si512(), _MM_CMPINT_NLT);
    if ((live & ~chosen) != 0) no_scale();
    const __m512i win = _mm512_maskz_mov_epi32(chosen, best_cand);
    store_bits(s.bits, win, live, d_out);
    // Offsets: the winner's, or a constant group's own value.
    const __m512i slot =
        _mm512_add_epi32(_mm512_slli_epi32(win, 4),
                         _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
    const __m512i mb = _mm512_mask_mov_epi32(
        flat_m, live,
        _mm512_i32gather_epi32(slot, reinterpret_cast<const int*>(&s.bits_m[0][0]), 4));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(m_out), _mm512_cvtepi32_epi16(mb));
    store_codes(s, n, pick16(s.back, win), pick16(s.back_m, win), lo, hi, 0, live, 0, q_out);
}
#undef WARDEN_AVX512_TARGET

}  // namespace

bool int4_batch_available() {
    return kernels::active_isa() >= kernels::Isa::AVX512;
}

void int4_sym_search_batch(const float* x, const float* imp, int64_t G, bool bf16_scales,
                           const float* neg_step, uint16_t* d, uint8_t* q) {
    util::check(int4_batch_available(), "int4_sym_search_batch: needs AVX-512");
    util::check(G > 0 && G % 8 == 0 && G <= kMaxG, "int4_sym_search_batch: bad group size");
    sym16(x, imp, G, bf16_scales, neg_step, d, q);
}

void int4_asym_search_batch(const float* x, const float* imp, int64_t G, bool bf16_scales,
                            const float* clip_shrink, const float* step, uint16_t* d, uint16_t* m,
                            uint8_t* q) {
    util::check(int4_batch_available(), "int4_asym_search_batch: needs AVX-512");
    util::check(G > 0 && G % 8 == 0 && G <= kMaxG, "int4_asym_search_batch: bad group size");
    asym16(x, imp, G, bf16_scales, clip_shrink, step, d, m, q);
}

#else

bool int4_batch_available() {
    return false;
}

void int4_sym_search_batch(const float*, const float*, int64_t, bool, const float*, uint16_t*,
                           uint8_t*) {
    throw util::Error("int4_sym_search_batch: needs AVX-512");
}

void int4_asym_search_batch(const float*, const float*, int64_t, bool, const float*, const float*,
                            uint16_t*, uint16_t*, uint8_t*) {
    throw util::Error("int4_asym_search_batch: needs AVX-512");
}

#endif

}  // namespace warden::quant
