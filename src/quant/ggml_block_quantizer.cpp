#include "quant/ggml_block_quantizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "quant/int4_candidates.h"
#include "quant/kquant_candidates.h"
#include "tensor/float_convert.h"
#include "util/error.h"

namespace warden::quant {

namespace {

constexpr int kSuper = 256;  // weights per K-quant super-block

// Round to nearest (ties to even) for |v| < 2^22: adding 1.5 * 2^23 leaves the integer in the
// low mantissa bits (llama.cpp's nearest_int); much cheaper than a library call in the searches.
inline int round_int(float v) {
    const float t = v + 12582912.f;
    int32_t i;
    std::memcpy(&i, &t, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}
float f16_round(float v) {
    return tensor::f16_to_f32(tensor::f32_to_f16(v));
}
void put_f16(uint8_t* p, float v) {
    const tensor::f16_t h = tensor::f32_to_f16(v);
    std::memcpy(p, &h, sizeof h);
}

// The sums error_weights needs of a span of values: sum x^2 and sum importance, in double.
struct SpanSums {
    double s2 = 0, si = 0;
};

// SpanSums of m <= 4 spans of n values (span k at xs[k], its importance at imps[k] or none when
// imps is null), each summed in element order as one span alone would be; the spans' chains
// interleaved, so no span waits on the previous one's additions.
void span_sums(const float* const* xs, const float* const* imps, int m, int n, SpanSums* out) {
    const float* p[4];
    const float* q[4] = {};
    for (int k = 0; k < 4; ++k) {  // spans past the last repeat it, their sums not kept
        p[k] = xs[std::min(k, m - 1)];
        if (imps) q[k] = imps[std::min(k, m - 1)];
    }
    double s2[4] = {}, si[4] = {};
    for (int i = 0; i < n; ++i)
        for (int k = 0; k < 4; ++k) s2[k] += static_cast<double>(p[k][i]) * p[k][i];
    if (imps)
        for (int i = 0; i < n; ++i)
            for (int k = 0; k < 4; ++k) si[k] += q[k][i];
    for (int k = 0; k < m; ++k) out[k] = {s2[k], si[k]};
}

// Error weights of n values with SpanSums s: importance * sqrt(sigma^2 + x^2). Importance that is
// zero over the whole span (columns calibration never reached) would leave nothing to fit, so a
// small share of the span's mean importance (or 1 where all are zero) is added to every column.
void error_weights(const float* x, const float* imp, int n, SpanSums s, float* w) {
    const float sigma2 = static_cast<float>(s.s2 / n);
    const float floor = imp ? (s.si > 0 ? static_cast<float>(1e-3 * s.si / n) : 1.f) : 0.f;
    for (int i = 0; i < n; ++i)
        w[i] = ((imp ? imp[i] : 1.f) + floor) * std::sqrt(sigma2 + x[i] * x[i]);
}

// x ~ scale * q + min with q in [0, nmax]: the best of a grid of inverse scales over the range,
// each refit by weighted least squares. min_le_zero: the offset is stored as a non-negative
// amount subtracted (K-quants), so min is kept <= 0.
struct AsymFit {
    float scale = 0, min = 0;
};
AsymFit fit_asym(const float* x, const float* w, int n, int nmax, bool min_le_zero) {
    float lo = x[0], hi = x[0];
    double sw = 0, sx = 0;
    for (int i = 0; i < n; ++i) {
        lo = std::min(lo, x[i]);
        hi = std::max(hi, x[i]);
        sw += w[i];
        sx += static_cast<double>(w[i]) * x[i];
    }
    if (min_le_zero && lo > 0) lo = 0;
    if (hi <= lo) return {0.f, lo};
    AsymFit best{(hi - lo) / static_cast<float>(nmax), lo};
    double best_err = std::numeric_limits<double>::infinity();
    // Steps -1..40 in lanes of kLanes (quant/kquant_candidates.h); the spare lanes repeat the last
    // step and are not looked at.
    constexpr int kSteps = 42, kBatches = (kSteps + kLanes - 1) / kLanes;
    float codes[32 * kLanes];  // the grid pass's codes, for the error pass (n <= 32)
    for (int batch = 0; batch < kBatches; ++batch) {
        float is[kLanes], slf[kLanes], sl2f[kLanes], sxlf[kLanes], scale[kLanes], mn[kLanes],
            err[kLanes];
        for (int c = 0; c < kLanes; ++c) {
            const int step = std::min(batch * kLanes + c, kSteps - 1) - 1;
            is[c] = step < 0 ? static_cast<float>(nmax) / (hi - lo)
                             : (static_cast<float>(nmax) - 1.f + 0.05f * step) / (hi - lo);
        }
        kq_asym_sums(x, w, n, lo, is, nmax, slf, sl2f, sxlf, n <= 32 ? codes : nullptr);
        const uint32_t ok = kq_asym_fits(is, slf, sl2f, sxlf, batch * kLanes - 1, kSteps - 1, sw,
                                         sx, lo, min_le_zero, scale, mn);
        kq_asym_grid_errors(x, w, n, lo, is, nmax, scale, mn, n <= 32 ? codes : nullptr, err);
        for (int c = 0; c < kLanes; ++c)
            if ((ok >> c & 1) && err[c] < best_err) {
                best_err = err[c];
                best = {scale[c], mn[c]};
            }
    }
    return best;
}

// x ~ scale * l with l in [-nmax, nmax - 1]: llama.cpp's Q-type grid (the largest-magnitude
// value at -nmax, so the extra negative code is used) plus 18 neighbouring inverse scales, each
// refit by weighted least squares; the scale with the smallest weighted error.
float fit_sym(const float* x, const float* w, int n, int nmax) {
    // max: the first of the largest magnitude (n is 16 or 32 here).
    float max = 0;
    if (int4_abs_max(x, n, &max) < 1e-30f) return 0.f;
    float best = -static_cast<float>(nmax) / max;
    best = 1.f / best;
    // Steps -9..9 in lanes of one call (quant/kquant_candidates.h), the spare lanes repeating the
    // last step; candidates compared in step order.
    constexpr int kSteps = 19;
    static_assert(kSteps <= kSymLanes, "the grid in one call");
    float num[kSymLanes], is[kSymLanes], slx[kSymLanes], sl2[kSymLanes];
    for (int c = 0; c < kSymLanes; ++c)
        num[c] =
            -(static_cast<float>(nmax) + 0.1f * static_cast<float>(std::min(c, kSteps - 1) - 9));
    for (int c = 0; c < kSymLanes; ++c)
        is[c] = num[c] / max;  // a loop of divisions that vectorizes
    kq_sym_sums(x, w, n, is, kSteps, nmax, slx, sl2);
    // The first largest gain sumlx^2 / suml2 (the error is sum w x^2 minus it).
    const int bc = kq_sym_best(slx, sl2, kSteps);
    if (bc >= 0) best = slx[bc] / sl2[bc];
    return best;
}

// Non-negative values v ~ d * L, L in [0, nmax] (a K-quant super-block's 6-bit sub-block scales
// or mins), weights sens (how much the block's error grows per unit of each value's error).
// Returns d rounded to f16.
float code_unsigned(const float* v, const float* sens, int n, int nmax, int* L) {
    float mx = 0;
    for (int j = 0; j < n; ++j) mx = std::max(mx, v[j]);
    if (mx <= 0) {
        std::fill(L, L + n, 0);
        return 0.f;
    }
    float best_d = f16_round(mx / static_cast<float>(nmax));
    double best_err = std::numeric_limits<double>::infinity();
    for (int step = -4; step <= 4; ++step) {
        const float iscale = (static_cast<float>(nmax) + 0.1f * step) / mx;
        double slx = 0, sl2 = 0;
        for (int j = 0; j < n; ++j) {
            const int l = std::min(nmax, round_int(iscale * v[j]));
            slx += static_cast<double>(sens[j]) * v[j] * l;
            sl2 += static_cast<double>(sens[j]) * l * l;
        }
        for (const float cand : {1.f / iscale, sl2 > 0 ? static_cast<float>(slx / sl2) : 0.f}) {
            const float d = f16_round(cand);
            if (!(d > 0)) continue;
            double err = 0;
            for (int j = 0; j < n; ++j) {
                const float e = v[j] - d * static_cast<float>(std::min(nmax, round_int(v[j] / d)));
                err += static_cast<double>(sens[j]) * e * e;
            }
            if (err < best_err) {
                best_err = err;
                best_d = d;
            }
        }
    }
    for (int j = 0; j < n; ++j) L[j] = best_d > 0 ? std::min(nmax, round_int(v[j] / best_d)) : 0;
    return best_d;
}

// ---- Q4_K / Q5_K: 8 sub-blocks of 32, x = d * sc * q - dmin * m (sc, m 6-bit; q 4 or 5 bits).

struct KAsymBlock {
    float d = 0, dmin = 0;
    int sc[8] = {}, m[8] = {};
    uint8_t q[kSuper] = {};
    double err = 0;
};

// Codes of sub-block j for the stored (d * sc, dmin * m); returns its weighted error.
double asym_codes(const float* x, const float* w, float s, float m, int nmax, uint8_t* q) {
    const float inv = s > 0 ? 1.f / s : 0.f;
    float err = 0;
    for (int i = 0; i < 32; ++i) {
        const int l = std::clamp(round_int((x[i] + m) * inv), 0, nmax);
        q[i] = static_cast<uint8_t>(l);
        const float e = s * static_cast<float>(l) - m - x[i];
        err += w[i] * e * e;
    }
    return err;
}

// A super-block's values and error weights as `subs` sub-blocks of kSuper / subs, transposed:
// xt[subs * i + j] = x[(kSuper / subs) * j + i], so the neighbour searches of
// quant/kquant_candidates.h read element i of every sub-block side by side.
void transpose_sub_blocks(const float* x, const float* w, int subs, float* xt, float* wt) {
    const int len = kSuper / subs;
    for (int j = 0; j < subs; ++j)
        for (int i = 0; i < len; ++i) {
            xt[subs * i + j] = x[len * j + i];
            wt[subs * i + j] = w[len * j + i];
        }
}

// Step 3 for fixed (d, dmin): each sub-block's integer scale and min, and the neighbours +-1
// (their errors in one batch, quant/kquant_candidates.h; xt, wt: the super-block transposed), the
// first smallest kept.
void asym_neighbours(const float* x, const float* w, const float* xt, const float* wt, int nmax,
                     KAsymBlock& b) {
    float err[72];
    kq_q4k_neighbour_errors(xt, wt, b.d, b.dmin, b.sc, b.m, nmax, err);
    b.err = 0;
    for (int j = 0; j < 8; ++j) {
        double best = std::numeric_limits<double>::infinity();
        int bc = -1;
        for (int c = 0; c < 9; ++c) {
            const int si = b.sc[j] + c / 3 - 1, mi = b.m[j] + c % 3 - 1;
            if (si < 0 || si > 63 || mi < 0 || mi > 63) continue;
            if (err[9 * j + c] < best) {
                best = err[9 * j + c];
                bc = c;
            }
        }
        if (bc >= 0) {
            const int si = b.sc[j] + bc / 3 - 1, mi = b.m[j] + bc % 3 - 1;
            asym_codes(x + 32 * j, w + 32 * j, b.d * static_cast<float>(si),
                       b.dmin * static_cast<float>(mi), nmax, b.q + 32 * j);
            b.sc[j] = si;
            b.m[j] = mi;
        }
        b.err += best;
    }
}

KAsymBlock quantize_asym_super(const float* x, const float* imp, SpanSums sums, int nmax) {
    float w[kSuper];
    error_weights(x, imp, kSuper, sums, w);
    float scales[8], mins[8], s_sens[8], m_sens[8];
    for (int j = 0; j < 8; ++j) {
        const AsymFit f = fit_asym(x + 32 * j, w + 32 * j, 32, nmax, true);
        scales[j] = f.scale;
        mins[j] = -f.min;
        // The error grows with a scale's error times sum w q^2 and a min's times sum w.
        double sq = 0, sw = 0;
        for (int i = 0; i < 32; ++i) {
            const float l = f.scale > 0
                                ? static_cast<float>(std::clamp(
                                      round_int((x[32 * j + i] - f.min) / f.scale), 0, nmax))
                                : 0.f;
            sq += w[32 * j + i] * l * l;
            sw += w[32 * j + i];
        }
        s_sens[j] = static_cast<float>(sq);
        m_sens[j] = static_cast<float>(sw);
    }
    float xt[kSuper], wt[kSuper];  // transposed for asym_neighbours
    transpose_sub_blocks(x, w, 8, xt, wt);
    KAsymBlock b;
    b.d = code_unsigned(scales, s_sens, 8, 63, b.sc);
    b.dmin = code_unsigned(mins, m_sens, 8, 63, b.m);
    asym_neighbours(x, w, xt, wt, nmax, b);
    // Refit (d, dmin) to the integer scales, mins and codes: x ~ d * (sc q) - dmin * m.
    for (int round = 0; round < 2; ++round) {
        double saa = 0, sab = 0, sbb = 0, sax = 0, sbx = 0;
        for (int j = 0; j < 8; ++j)
            for (int i = 0; i < 32; ++i) {
                const double a = static_cast<double>(b.sc[j]) * b.q[32 * j + i],
                             bb = -static_cast<double>(b.m[j]), wi = w[32 * j + i],
                             xi = x[32 * j + i];
                saa += wi * a * a;
                sab += wi * a * bb;
                sbb += wi * bb * bb;
                sax += wi * a * xi;
                sbx += wi * bb * xi;
            }
        KAsymBlock c = b;
        const double det = saa * sbb - sab * sab;
        if (det > 0) {
            c.d = f16_round(static_cast<float>((sax * sbb - sab * sbx) / det));
            c.dmin = f16_round(static_cast<float>((saa * sbx - sab * sax) / det));
        } else if (saa > 0) {
            c.d = f16_round(static_cast<float>(sax / saa));
        } else {
            break;
        }
        if (!(c.d > 0) || c.dmin < 0) break;
        asym_neighbours(x, w, xt, wt, nmax, c);
        if (!(c.err < b.err)) break;
        b = c;
    }
    return b;
}

void pack_k_scales(const KAsymBlock& b, uint8_t* s12) {
    std::memset(s12, 0, 12);
    for (int j = 0; j < 8; ++j) {
        const auto ls = static_cast<uint8_t>(b.sc[j]), lm = static_cast<uint8_t>(b.m[j]);
        if (j < 4) {
            s12[j] = ls;
            s12[j + 4] = lm;
        } else {
            s12[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
            s12[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
            s12[j] |= static_cast<uint8_t>((lm >> 4) << 6);
        }
    }
}

void q4_k_block(const float* x, const float* imp, SpanSums sums, uint8_t* y) {  // 144 bytes
    const KAsymBlock b = quantize_asym_super(x, imp, sums, 15);
    put_f16(y, b.d);
    put_f16(y + 2, b.dmin);
    pack_k_scales(b, y + 4);
    uint8_t* qs = y + 16;
    for (int c = 0; c < kSuper; c += 64, qs += 32)
        for (int l = 0; l < 32; ++l)
            qs[l] = static_cast<uint8_t>(b.q[c + l] | (b.q[c + l + 32] << 4));
}

void q5_k_block(const float* x, const float* imp, SpanSums sums, uint8_t* y) {  // 176 bytes
    const KAsymBlock b = quantize_asym_super(x, imp, sums, 31);
    put_f16(y, b.d);
    put_f16(y + 2, b.dmin);
    pack_k_scales(b, y + 4);
    uint8_t* qh = y + 16;
    uint8_t* qs = y + 48;
    std::memset(qh, 0, 32);
    uint8_t m1 = 1, m2 = 2;
    for (int c = 0; c < kSuper; c += 64, qs += 32) {
        for (int l = 0; l < 32; ++l) {
            int l1 = b.q[c + l], l2 = b.q[c + l + 32];
            if (l1 > 15) {
                l1 -= 16;
                qh[l] |= m1;
            }
            if (l2 > 15) {
                l2 -= 16;
                qh[l] |= m2;
            }
            qs[l] = static_cast<uint8_t>(l1 | (l2 << 4));
        }
        m1 = static_cast<uint8_t>(m1 << 2);
        m2 = static_cast<uint8_t>(m2 << 2);
    }
}

// ---- Q6_K: 16 sub-blocks of 16, x = d * sc * (q - 32) (sc int8, q 6 bits).

struct KSymBlock {
    float d = 0;
    int sc[16] = {};
    int8_t q[kSuper] = {};  // -32..31
    double err = 0;
};

// Step 3 for a fixed d: each sub-block's integer scale and the neighbours +-1 (their errors in one
// batch, quant/kquant_candidates.h; xt, wt: the super-block transposed), the first smallest kept.
void sym_neighbours(const float* x, const float* xt, const float* wt, KSymBlock& b) {
    float err[48];
    kq_q6k_neighbour_errors(xt, wt, b.d, b.sc, err);
    b.err = 0;
    for (int j = 0; j < 16; ++j) {
        double best = std::numeric_limits<double>::infinity();
        int bs = b.sc[j];
        bool found = false;
        for (int ds = -1; ds <= 1; ++ds) {
            const int s = b.sc[j] + ds;
            if (s < -128 || s > 127) continue;
            if (err[3 * j + ds + 1] < best) {
                best = err[3 * j + ds + 1];
                bs = s;
                found = true;
            }
        }
        if (found) {
            const float step = b.d * static_cast<float>(bs);
            const float inv = step != 0 ? 1.f / step : 0.f;
            for (int i = 0; i < 16; ++i)
                b.q[16 * j + i] =
                    static_cast<int8_t>(std::clamp(round_int(x[16 * j + i] * inv), -32, 31));
        }
        b.sc[j] = bs;
        b.err += best;
    }
}

void q6_k_block(const float* x, const float* imp, SpanSums sums, uint8_t* y) {  // 210 bytes
    float w[kSuper];
    error_weights(x, imp, kSuper, sums, w);
    float scales[16], sens[16];
    for (int j = 0; j < 16; ++j) {
        scales[j] = fit_sym(x + 16 * j, w + 16 * j, 16, 32);
        double sq = 0;
        for (int i = 0; i < 16; ++i) {
            const int l =
                scales[j] != 0 ? std::clamp(round_int(x[16 * j + i] / scales[j]), -32, 31) : 0;
            sq += static_cast<double>(w[16 * j + i]) * l * l;
        }
        sens[j] = static_cast<float>(sq) + 1e-30f;
    }
    float xt[kSuper], wt[kSuper];  // transposed for sym_neighbours
    transpose_sub_blocks(x, w, 16, xt, wt);
    KSymBlock b;
    // The int8 scales against d: the same symmetric search, weighted by each scale's sensitivity.
    b.d = f16_round(fit_sym(scales, sens, 16, 128));
    for (int j = 0; j < 16; ++j)
        b.sc[j] = b.d != 0 ? std::clamp(round_int(scales[j] / b.d), -128, 127) : 0;
    sym_neighbours(x, xt, wt, b);
    for (int round = 0; round < 2 && b.d != 0; ++round) {
        double saa = 0, sax = 0;
        for (int j = 0; j < 16; ++j)
            for (int i = 0; i < 16; ++i) {
                const double a = static_cast<double>(b.sc[j]) * b.q[16 * j + i];
                saa += w[16 * j + i] * a * a;
                sax += w[16 * j + i] * a * x[16 * j + i];
            }
        if (saa <= 0) break;
        KSymBlock c = b;
        c.d = f16_round(static_cast<float>(sax / saa));
        if (c.d == 0) break;
        sym_neighbours(x, xt, wt, c);
        if (!(c.err < b.err)) break;
        b = c;
    }
    uint8_t* ql = y;
    uint8_t* qh = y + 128;
    auto* sc = reinterpret_cast<int8_t*>(y + 192);
    for (int j = 0; j < 16; ++j) sc[j] = static_cast<int8_t>(b.sc[j]);
    put_f16(y + 208, b.d);
    for (int c = 0; c < kSuper; c += 128, ql += 64, qh += 32)
        for (int l = 0; l < 32; ++l) {
            const int q1 = b.q[c + l] + 32, q2 = b.q[c + l + 32] + 32, q3 = b.q[c + l + 64] + 32,
                      q4 = b.q[c + l + 96] + 32;
            ql[l] = static_cast<uint8_t>((q1 & 0xF) | ((q3 & 0xF) << 4));
            ql[l + 32] = static_cast<uint8_t>((q2 & 0xF) | ((q4 & 0xF) << 4));
            qh[l] = static_cast<uint8_t>((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) |
                                         ((q4 >> 4) << 6));
        }
}

// ---- 32-blocks: Q5_0 (d * (q - 16)), Q5_1 (d * q + m), Q8_0 (d * q).

void pack_q5(const int* l, uint8_t* qh4, uint8_t* qs16) {
#if defined(__SSE2__)
    // The codes (0..31) as bytes: low nibbles paired into qs16, bit 4 of each gathered by movemask.
    const auto* v = reinterpret_cast<const __m128i*>(l);
    const __m128i b0 =
        _mm_packus_epi16(_mm_packs_epi32(_mm_loadu_si128(v), _mm_loadu_si128(v + 1)),
                         _mm_packs_epi32(_mm_loadu_si128(v + 2), _mm_loadu_si128(v + 3)));
    const __m128i b1 =
        _mm_packus_epi16(_mm_packs_epi32(_mm_loadu_si128(v + 4), _mm_loadu_si128(v + 5)),
                         _mm_packs_epi32(_mm_loadu_si128(v + 6), _mm_loadu_si128(v + 7)));
    const __m128i nib = _mm_set1_epi8(0x0F);
    _mm_storeu_si128(
        reinterpret_cast<__m128i*>(qs16),
        _mm_or_si128(_mm_and_si128(b0, nib), _mm_slli_epi16(_mm_and_si128(b1, nib), 4)));
    const uint32_t qh = static_cast<uint32_t>(_mm_movemask_epi8(_mm_slli_epi16(b0, 3))) |
                        static_cast<uint32_t>(_mm_movemask_epi8(_mm_slli_epi16(b1, 3))) << 16;
    std::memcpy(qh4, &qh, 4);
#else
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
        qs16[j] = static_cast<uint8_t>((l[j] & 0xF) | ((l[j + 16] & 0xF) << 4));
        qh |= static_cast<uint32_t>((l[j] >> 4) & 1) << j;
        qh |= static_cast<uint32_t>((l[j + 16] >> 4) & 1) << (j + 16);
    }
    std::memcpy(qh4, &qh, 4);
#endif
}

void q5_0_block(const float* x, const float* w, uint8_t* y) {  // 22 bytes
    const float d = f16_round(fit_sym(x, w, 32, 16));
    int l[32];
    // The condition outside the loops, so they vectorize (division included: the same quotients).
    if (d != 0)
        for (int i = 0; i < 32; ++i) l[i] = std::clamp(round_int(x[i] / d), -16, 15) + 16;
    else
        std::fill(l, l + 32, 16);
    put_f16(y, d);
    pack_q5(l, y + 2, y + 6);
}

void q5_1_block(const float* x, const float* w, uint8_t* y) {  // 24 bytes
    const AsymFit f = fit_asym(x, w, 32, 31, false);
    const float d = f16_round(f.scale), m = f16_round(f.min);
    int l[32];
    if (d > 0)
        for (int i = 0; i < 32; ++i) l[i] = std::clamp(round_int((x[i] - m) / d), 0, 31);
    else
        std::fill(l, l + 32, 0);
    put_f16(y, d);
    put_f16(y + 2, m);
    pack_q5(l, y + 4, y + 8);
}

void q8_0_block(const float* x, uint8_t* y) {  // 34 bytes
    float first;
    const float amax = int4_abs_max(x, 32, &first);
    const float d = f16_round(amax / 127.f);
    put_f16(y, d);
    for (int i = 0; i < 32; ++i)
        y[2 + i] = static_cast<uint8_t>(
            static_cast<int8_t>(d != 0 ? std::clamp(round_int(x[i] / d), -127, 127) : 0));
}

}  // namespace

bool can_quantize_ggml(tensor::GgmlType t) {
    using G = tensor::GgmlType;
    return t == G::Q4_K || t == G::Q5_K || t == G::Q6_K || t == G::Q5_0 || t == G::Q5_1 ||
           t == G::Q8_0;
}

void quantize_ggml_rows(tensor::GgmlType t, const float* x, int64_t rows, int64_t n,
                        const float* importance, uint8_t* dst) {
    using G = tensor::GgmlType;
    if (!can_quantize_ggml(t))
        throw util::Error("quantize: cannot write GGUF blocks of type " +
                          tensor::ggml_type_name(t));
    const auto& info = tensor::ggml_type_info(t);
    if (n <= 0 || n % info.block_elems != 0)
        throw util::Error("quantize: a row of " + std::to_string(n) + " values is not whole " +
                          tensor::ggml_type_name(t) + " blocks of " +
                          std::to_string(info.block_elems));
    if (const int64_t i = first_non_finite(x, rows * n); i >= 0)
        throw util::Error("quantize: non-finite weight at column " + std::to_string(i % n));
    const int64_t nb = n / info.block_elems, row_bytes = nb * info.block_bytes;
    if (info.block_elems == kSuper) {
        // Each super-block's sums first, for four at a time (span_sums).
        for (int64_t b0 = 0; b0 < rows * nb; b0 += 4) {
            const int64_t m = std::min<int64_t>(4, rows * nb - b0);
            SpanSums sums[4];
            const float* xs[4];
            const float* imps[4];
            for (int64_t k = 0; k < m; ++k) {
                xs[k] = x + (b0 + k) * kSuper;
                imps[k] = importance ? importance + ((b0 + k) % nb) * kSuper : nullptr;
            }
            span_sums(xs, importance ? imps : nullptr, static_cast<int>(m), kSuper, sums);
            for (int64_t k = 0; k < m; ++k) {
                const float* ib = importance ? imps[k] : nullptr;
                uint8_t* yb = dst + (b0 + k) * info.block_bytes;  // rows are whole blocks
                if (t == G::Q4_K)
                    q4_k_block(xs[k], ib, sums[k], yb);
                else if (t == G::Q5_K)
                    q5_k_block(xs[k], ib, sums[k], yb);
                else
                    q6_k_block(xs[k], ib, sums[k], yb);
            }
        }
        return;
    }
    if (t == G::Q8_0) {  // no search, so no error weights
        for (int64_t b = 0; b < rows * nb; ++b) q8_0_block(x + 32 * b, dst + b * info.block_bytes);
        return;
    }
    // 32-blocks: sigma^2 over the whole row, as one block holds too few values to estimate it;
    // the rows' sums first (span_sums).
    std::vector<SpanSums> sums(static_cast<size_t>(rows));
    for (int64_t r0 = 0; r0 < rows; r0 += 4) {
        const int m = static_cast<int>(std::min<int64_t>(4, rows - r0));
        const float* xs[4];
        const float* imps[4];
        for (int k = 0; k < m; ++k) {
            xs[k] = x + (r0 + k) * n;
            imps[k] = importance;
        }
        span_sums(xs, importance ? imps : nullptr, m, static_cast<int>(n), sums.data() + r0);
    }
    std::vector<float> w(static_cast<size_t>(n));
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * n;
        error_weights(xr, importance, static_cast<int>(n), sums[static_cast<size_t>(r)], w.data());
        for (int64_t b = 0; b < nb; ++b) {
            uint8_t* yb = dst + r * row_bytes + b * info.block_bytes;
            if (t == G::Q5_0)
                q5_0_block(xr + 32 * b, w.data() + 32 * b, yb);
            else
                q5_1_block(xr + 32 * b, w.data() + 32 * b, yb);
        }
    }
}

void quantize_ggml_row(tensor::GgmlType t, const float* x, int64_t n, const float* importance,
                       uint8_t* dst) {
    quantize_ggml_rows(t, x, 1, n, importance, dst);
}

}  // namespace warden::quant
