#include "quant/quantizer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include "kernels/matmul_kquant.h"
#include "tensor/float_convert.h"
#include "tensor/fp8.h"
#include "util/error.h"

namespace warden::quant {

using kernels::QuantRow;
using kernels::WeightMatrix;
using tensor::WeightType;

namespace {

constexpr int64_t kMaxGroup = 128;  // the largest int4 group (check_quant_shape)
constexpr float kClip4[] = {1.0f, 0.95f, 0.9f, 0.85f, 0.8f, 0.75f, 0.7f};
constexpr float kClip8[] = {1.0f, 0.98f, 0.96f, 0.94f, 0.92f, 0.9f};

uint16_t to_scale(const WeightMatrix& w, float v) {
    return w.bf16_scales ? tensor::f32_to_bf16(v) : tensor::f32_to_f16(v);
}
float from_scale(const WeightMatrix& w, uint16_t b) {
    return kernels::quant_scale_to_f32(w, b);
}

float imp_at(const float* imp, int64_t k) {
    return imp ? imp[k] : 1.0f;
}

// The int4 candidate loops, 8 lanes at a time (G is a multiple of 32). Per lane: v = clamp(x * is,
// -8, 7), r = nearbyint(v) (round half to even: adding and subtracting 1.5 * 2^23 leaves exactly
// the rounded integer for |v| < 2^22), then the lane's running sums. SSE2 (the x86-64 baseline) and
// the portable loop do the same operations in the same order per lane, so both give the same bits.
constexpr float kRoundMagic = 12582912.0f;

// nearbyint(clamp(v, lo, hi)) for integer lo, hi with |lo|, |hi| < 2^22: the same code as rounding
// first and clamping after (rounding is monotone), without a libm call.
inline float round_clamped(float v, float lo, float hi) {
    return (std::min(hi, std::max(lo, v)) + kRoundMagic) - kRoundMagic;
}
#if defined(__SSE2__)
inline __m128 round_clamped_ps(__m128 v, __m128 lo, __m128 hi) {
    const __m128 mg = _mm_set1_ps(kRoundMagic);
    return _mm_sub_ps(_mm_add_ps(_mm_min_ps(hi, _mm_max_ps(lo, v)), mg), mg);
}
#endif

// Weighted squared error of group x[0..G) with scale d and offset m, codes r = round((x - m) / d)
// clamped to [lo, hi] (symmetric int4: m = 0, codes -8..7; asymmetric: codes 0..15), w = r * d + m;
// the codes are left in l (as floats) when l is not null. r * d + m is formed with two roundings
// (SSE2 has no fma); the codes are the same either way (they depend on (x - m) / d only), and for
// m = 0 every value equals the product r * d alone.
float group_error(const float* x, const float* wt, int64_t G, float d, float m, float lo, float hi,
                  float* l) {
    const float id = 1.0f / d;
    float acc[8];
#if defined(__SSE2__)
    const __m128 vid = _mm_set1_ps(id), vd = _mm_set1_ps(d), vm = _mm_set1_ps(m),
                 vlo = _mm_set1_ps(lo), vhi = _mm_set1_ps(hi);
    __m128 a0 = _mm_setzero_ps(), a1 = a0;
    for (int64_t i = 0; i < G; i += 8) {
        const __m128 x0 = _mm_loadu_ps(x + i), x1 = _mm_loadu_ps(x + i + 4);
        const __m128 r0 = round_clamped_ps(_mm_mul_ps(_mm_sub_ps(x0, vm), vid), vlo, vhi);
        const __m128 r1 = round_clamped_ps(_mm_mul_ps(_mm_sub_ps(x1, vm), vid), vlo, vhi);
        if (l) {
            _mm_storeu_ps(l + i, r0);
            _mm_storeu_ps(l + i + 4, r1);
        }
        const __m128 e0 = _mm_sub_ps(x0, _mm_add_ps(_mm_mul_ps(r0, vd), vm));
        const __m128 e1 = _mm_sub_ps(x1, _mm_add_ps(_mm_mul_ps(r1, vd), vm));
        a0 = _mm_add_ps(a0, _mm_mul_ps(_mm_mul_ps(_mm_loadu_ps(wt + i), e0), e0));
        a1 = _mm_add_ps(a1, _mm_mul_ps(_mm_mul_ps(_mm_loadu_ps(wt + i + 4), e1), e1));
    }
    _mm_storeu_ps(acc, a0);
    _mm_storeu_ps(acc + 4, a1);
#else
    for (float& v : acc) v = 0.0f;
    for (int64_t i = 0; i < G; i += 8)
        for (int k = 0; k < 8; ++k) {
            const float r = round_clamped((x[i + k] - m) * id, lo, hi);
            if (l) l[i + k] = r;
            const float e = x[i + k] - (r * d + m);
            acc[k] += wt[i + k] * e * e;
        }
#endif
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

// Weighted least-squares scale for the codes that inverse scale `is` gives: sum w x r / sum w r^2
// (0 when every code is 0).
float refit_scale(const float* x, const float* wt, int64_t G, float is) {
    float sxl[8], sll[8];
#if defined(__SSE2__)
    const __m128 vis = _mm_set1_ps(is), lo = _mm_set1_ps(-8.0f), hi = _mm_set1_ps(7.0f);
    __m128 p0 = _mm_setzero_ps(), p1 = p0, q0 = p0, q1 = p0;
    for (int64_t i = 0; i < G; i += 8) {
        const __m128 x0 = _mm_loadu_ps(x + i), x1 = _mm_loadu_ps(x + i + 4);
        const __m128 w0 = _mm_loadu_ps(wt + i), w1 = _mm_loadu_ps(wt + i + 4);
        const __m128 r0 = round_clamped_ps(_mm_mul_ps(x0, vis), lo, hi);
        const __m128 r1 = round_clamped_ps(_mm_mul_ps(x1, vis), lo, hi);
        p0 = _mm_add_ps(p0, _mm_mul_ps(_mm_mul_ps(w0, x0), r0));
        p1 = _mm_add_ps(p1, _mm_mul_ps(_mm_mul_ps(w1, x1), r1));
        q0 = _mm_add_ps(q0, _mm_mul_ps(_mm_mul_ps(w0, r0), r0));
        q1 = _mm_add_ps(q1, _mm_mul_ps(_mm_mul_ps(w1, r1), r1));
    }
    _mm_storeu_ps(sxl, p0);
    _mm_storeu_ps(sxl + 4, p1);
    _mm_storeu_ps(sll, q0);
    _mm_storeu_ps(sll + 4, q1);
#else
    for (int k = 0; k < 8; ++k) sxl[k] = sll[k] = 0.0f;
    for (int64_t i = 0; i < G; i += 8)
        for (int k = 0; k < 8; ++k) {
            const float r = round_clamped(x[i + k] * is, -8.0f, 7.0f);
            sxl[k] += wt[i + k] * x[i + k] * r;
            sll[k] += wt[i + k] * r * r;
        }
#endif
    float a = 0.0f, b = 0.0f;
    for (int k = 0; k < 8; ++k) {
        a += sxl[k];
        b += sll[k];
    }
    return b > 0.0f ? a / b : 0.0f;
}

// The weighted sums the asymmetric least-squares fit needs for the codes r = round((x - mn) * is)
// clamped to 0..15: s[0] = sum w r, s[1] = sum w r^2, s[2] = sum w x r.
void asym_fit_sums(const float* x, const float* wt, int64_t G, float mn, float is, double s[3]) {
    float l1[8], l2[8], lx[8];
#if defined(__SSE2__)
    const __m128 vis = _mm_set1_ps(is), vmn = _mm_set1_ps(mn), lo = _mm_setzero_ps(),
                 hi = _mm_set1_ps(15.0f);
    __m128 p0 = _mm_setzero_ps(), p1 = p0, q0 = p0, q1 = p0, u0 = p0, u1 = p0;
    for (int64_t i = 0; i < G; i += 8) {
        const __m128 x0 = _mm_loadu_ps(x + i), x1 = _mm_loadu_ps(x + i + 4);
        const __m128 r0 = round_clamped_ps(_mm_mul_ps(_mm_sub_ps(x0, vmn), vis), lo, hi);
        const __m128 r1 = round_clamped_ps(_mm_mul_ps(_mm_sub_ps(x1, vmn), vis), lo, hi);
        const __m128 w0 = _mm_mul_ps(_mm_loadu_ps(wt + i), r0),
                     w1 = _mm_mul_ps(_mm_loadu_ps(wt + i + 4), r1);
        p0 = _mm_add_ps(p0, w0);
        p1 = _mm_add_ps(p1, w1);
        q0 = _mm_add_ps(q0, _mm_mul_ps(w0, r0));
        q1 = _mm_add_ps(q1, _mm_mul_ps(w1, r1));
        u0 = _mm_add_ps(u0, _mm_mul_ps(w0, x0));
        u1 = _mm_add_ps(u1, _mm_mul_ps(w1, x1));
    }
    _mm_storeu_ps(l1, p0);
    _mm_storeu_ps(l1 + 4, p1);
    _mm_storeu_ps(l2, q0);
    _mm_storeu_ps(l2 + 4, q1);
    _mm_storeu_ps(lx, u0);
    _mm_storeu_ps(lx + 4, u1);
#else
    for (int k = 0; k < 8; ++k) l1[k] = l2[k] = lx[k] = 0.0f;
    for (int64_t i = 0; i < G; i += 8)
        for (int k = 0; k < 8; ++k) {
            const float r = round_clamped((x[i + k] - mn) * is, 0.0f, 15.0f), wr = wt[i + k] * r;
            l1[k] += wr;
            l2[k] += wr * r;
            lx[k] += wr * x[i + k];
        }
#endif
    s[0] = s[1] = s[2] = 0.0;
    for (int k = 0; k < 8; ++k) {
        s[0] += l1[k];
        s[1] += l2[k];
        s[2] += lx[k];
    }
}

// Symmetric int4: a weighted least-squares scale search, the approach of llama.cpp's k-quants
// (make_qx_quants) applied to our Q4_0-shaped groups. The error of element i is weighted by
// importance[i] * sqrt(sigma^2 + x_i^2) (sigma^2 = the group's mean square): large weights, which
// a plain squared-error search readily clips, count for more. Candidates: llama.cpp's Q4_0 rule
// d = max / -8 itself (so the search can only beat it on this error), then 19 inverse scales
// -(8 + 0.1 * s) / max (s = -9..9), each also refit by weighted least squares to the codes it
// gives (d = sum w x l / sum w l^2). Every candidate is rounded to the stored scale dtype before
// its codes are chosen. It moves the model less than llama.cpp's Q4_0 of the same weights
// (docs/WEIGHT_QUANT.md, Results: int4 quality against llama.cpp's Q4_0; the clip-ratio search on
// plain squared error it replaced is under Tried and dropped there).
void quant4_sym(const WeightMatrix& w, const float* x, const float* imp, int64_t k0, QuantRow& out,
                size_t g) {
    const int64_t G = w.group;
    float amax = 0.0f, vmax = 0.0f;
    for (int64_t i = 0; i < G; ++i)
        if (std::fabs(x[i]) > amax) {
            amax = std::fabs(x[i]);
            vmax = x[i];
        }
    uint8_t* q = out.q.data() + k0;
    if (amax == 0.0f) {
        out.d[g] = 0;
        std::memset(q, 8, static_cast<size_t>(G));
        return;
    }
    float wt[kMaxGroup], l[kMaxGroup], best_l[kMaxGroup];
    double sum_x2 = 0.0;
    for (int64_t i = 0; i < G; ++i) sum_x2 += static_cast<double>(x[i]) * x[i];
    const float sigma2 = static_cast<float>(sum_x2 / static_cast<double>(G));
    for (int64_t i = 0; i < G; ++i) wt[i] = imp_at(imp, k0 + i) * std::sqrt(sigma2 + x[i] * x[i]);

    float best = std::numeric_limits<float>::infinity();
    const auto consider = [&](float scale) {
        const uint16_t dh = to_scale(w, scale);
        const float d = from_scale(w, dh);
        if (!(d != 0.0f) || !std::isfinite(d) || !std::isfinite(1.0f / d)) return;
        const float err = group_error(x, wt, G, d, 0.0f, -8.0f, 7.0f, l);
        if (err < best) {
            best = err;
            out.d[g] = dh;
            std::memcpy(best_l, l, sizeof(float) * static_cast<size_t>(G));
        }
    };
    consider(vmax / -8.0f);
    for (int s = -9; s <= 9; ++s) {
        const float iscale = -(8.0f + 0.1f * static_cast<float>(s)) / vmax;
        consider(1.0f / iscale);
        const float refit = refit_scale(x, wt, G, iscale);
        if (refit != 0.0f) consider(refit);
    }
    if (best == std::numeric_limits<float>::infinity())
        throw util::Error("int4 quantization: group scale out of range of the scale dtype");
    for (int64_t i = 0; i < G; ++i) q[i] = static_cast<uint8_t>(static_cast<int>(best_l[i]) + 8);
}

// Asymmetric int4 (w = fma(q, d, m), q = 0..15): a weighted least-squares search over scale and
// offset together, the approach of llama.cpp's k-quants (make_qkx3_quants, which its Q4_1 runs
// with an importance matrix) applied to our groups, with and without calibration data. The error
// of element i is weighted by importance[i] * sqrt(sigma^2 + x_i^2), as in quant4_sym. Candidates:
// the clip ratios of the group's range (kClip4; 1.0 is Q4_1's reference rule d = (max - min) / 15,
// m = min, so the search can only beat it on this error), then 37 inverse scales
// (15 - 0.9 + 0.05 s) / (max - min), s = 0..36, each with the (d, m) that fits the codes it gives
// by weighted least squares. Every candidate's d and m are rounded to the stored scale dtype
// first, and its codes are chosen for the rounded pair (the codes the kernels decode), so the
// error compared is the stored row's (group_error). On SmolLM2's tied head it moved the model less
// than the clip-ratio search on plain squared error did, level with llama.cpp's Q4_1 rule.
void quant4_asym(const WeightMatrix& w, const float* x, const float* imp, int64_t k0, QuantRow& out,
                 size_t g) {
    const int64_t G = w.group;
    float mn = x[0], mx = x[0];
    for (int64_t i = 1; i < G; ++i) {
        mn = std::fmin(mn, x[i]);
        mx = std::fmax(mx, x[i]);
    }
    uint8_t* q = out.q.data() + k0;
    if (mx == mn) {  // constant group: d = 0, m = value (rounded)
        out.d[g] = 0;
        out.m[g] = to_scale(w, mn);
        std::memset(q, 0, static_cast<size_t>(G));
        return;
    }
    float wt[kMaxGroup];
    double sum_x2 = 0.0;
    for (int64_t i = 0; i < G; ++i) sum_x2 += static_cast<double>(x[i]) * x[i];
    const float sigma2 = static_cast<float>(sum_x2 / static_cast<double>(G));
    double sw = 0.0, swx = 0.0;
    for (int64_t i = 0; i < G; ++i) {
        wt[i] = imp_at(imp, k0 + i) * std::sqrt(sigma2 + x[i] * x[i]);
        sw += wt[i];
        swx += static_cast<double>(wt[i]) * x[i];
    }
    float best = std::numeric_limits<float>::infinity(), best_d = 0.0f, best_m = 0.0f;
    const auto consider = [&](float dv, float mv) {
        const uint16_t dh = to_scale(w, dv), mh = to_scale(w, mv);
        const float d = from_scale(w, dh), m = from_scale(w, mh);
        if (!(d != 0.0f) || !std::isfinite(d) || !std::isfinite(m) || !std::isfinite(1.0f / d))
            return;
        const float err = group_error(x, wt, G, d, m, 0.0f, 15.0f, nullptr);
        if (err < best) {
            best = err;
            best_d = d;
            best_m = m;
            out.d[g] = dh;
            out.m[g] = mh;
        }
    };
    for (float clip : kClip4) {
        const float shrink = (1.0f - clip) * 0.5f * (mx - mn);
        const float lo = mn + shrink, hi = mx - shrink;
        consider((hi - lo) / 15.0f, lo);
    }
    for (int s = 0; s <= 36; ++s) {
        double sums[3];
        asym_fit_sums(x, wt, G, mn, (15.0f - 0.9f + 0.05f * static_cast<float>(s)) / (mx - mn),
                      sums);
        // Minimizes sum w (d r + m - x)^2 over (d, m): the 2 x 2 normal equations.
        const double det = sw * sums[1] - sums[0] * sums[0];
        if (!(det > 0.0)) continue;
        consider(static_cast<float>((sw * sums[2] - swx * sums[0]) / det),
                 static_cast<float>((sums[1] * swx - sums[0] * sums[2]) / det));
    }
    if (best == std::numeric_limits<float>::infinity())
        throw util::Error("int4 quantization: group scale out of range of the scale dtype");
    const float id = 1.0f / best_d;
    for (int64_t i = 0; i < G; ++i)
        q[i] = static_cast<uint8_t>(round_clamped((x[i] - best_m) * id, 0.0f, 15.0f));
}

// int8 codes and scale out.d[b] for columns [k0, k0 + n): the whole row (per channel) or one
// 32-block (int8-g32), the same clip search either way. cand: scratch of n or more bytes.
void quant8_span(const WeightMatrix& w, const float* x, const float* imp, int64_t k0, int64_t n,
                 size_t b, uint8_t* cand, QuantRow& out) {
    // The row is finite (checked by the caller), so a plain compare is std::fmax without its call.
    float amax = 0.0f;
    for (int64_t i = k0; i < k0 + n; ++i) amax = std::fabs(x[i]) > amax ? std::fabs(x[i]) : amax;
    if (amax == 0.0f) return;  // codes and scale already 0
    double best = std::numeric_limits<double>::infinity();
    bool underflow = false;
    for (float c : kClip8) {
        const uint16_t dh = to_scale(w, amax * c / 127.0f);
        const float d = from_scale(w, dh);
        underflow = underflow || d == 0.0f;
        if (!(d != 0.0f) || !std::isfinite(d)) continue;
        const float id = 1.0f / d;
        double err = 0.0;
        for (int64_t i = 0; i < n; ++i) {
            // No libm call per element: --weights int4 pays this at every load for its int8 head.
            const float r = round_clamped(x[k0 + i] * id, -127.0f, 127.0f);
            cand[static_cast<size_t>(i)] = static_cast<uint8_t>(static_cast<int8_t>(r));
            const double e = static_cast<double>(x[k0 + i]) - r * d;
            err += e * e * imp_at(imp, k0 + i);
        }
        if (err < best) {
            best = err;
            out.d[b] = dh;
            std::copy(cand, cand + n, out.q.begin() + k0);
        }
    }
    // Values too small for any scale of the dtype (a near-zero block, e.g. an unused embedding
    // row's): they stay zero codes with a zero scale, an error below the dtype's smallest step.
    if (best == std::numeric_limits<double>::infinity() && !underflow)
        throw util::Error(std::string("int8 quantization: ") + (w.group ? "block" : "row") +
                          " scale out of range of the scale dtype");
}

void quant8(const WeightMatrix& w, const float* x, const float* imp, QuantRow& out) {
    const int64_t span = w.group == 0 ? w.cols : 32;
    out.d.assign(static_cast<size_t>(w.cols / span), 0);
    std::vector<uint8_t> cand(static_cast<size_t>(span));  // once per row, not per block
    for (int64_t b = 0; b < w.cols / span; ++b)
        quant8_span(w, x, imp, b * span, span, static_cast<size_t>(b), cand.data(), out);
}

}  // namespace

QuantRow RtnQuantizer::quantize_row(const WeightMatrix& w, const float* x, const float* imp) const {
    kernels::check_quant_shape(w);
    for (int64_t i = 0; i < w.cols; ++i)
        if (!std::isfinite(x[i]))
            throw util::Error("cannot quantize a weight row with a non-finite value (column " +
                              std::to_string(i) + ")");
    QuantRow out;
    out.q.assign(static_cast<size_t>(w.cols), 0);
    if (w.type == WeightType::Q4) {
        const int64_t ng = w.cols / w.group;
        out.d.assign(static_cast<size_t>(ng), 0);
        if (w.asym) out.m.assign(static_cast<size_t>(ng), 0);
        for (int64_t g = 0; g < ng; ++g) {
            if (w.asym) {
                quant4_asym(w, x + g * w.group, imp, g * w.group, out, static_cast<size_t>(g));
            } else {
                quant4_sym(w, x + g * w.group, imp, g * w.group, out, static_cast<size_t>(g));
            }
        }
    } else if (w.type == WeightType::Q8) {
        quant8(w, x, imp, out);
    } else if (w.type == WeightType::FP8) {
        float amax = 0.0f;
        for (int64_t i = 0; i < w.cols; ++i) amax = std::fmax(amax, std::fabs(x[i]));
        out.scale = amax / tensor::kFp8E4m3Max;
        if (out.scale > 0.0f && std::isfinite(out.scale)) {
            for (int64_t i = 0; i < w.cols; ++i)
                out.q[static_cast<size_t>(i)] = tensor::f32_to_fp8_e4m3(x[i] / out.scale);
        } else {
            out.scale = 0.0f;
        }
    } else if (tensor::is_kquant(w.type)) {
        throw util::Error(
            std::string(tensor::kquant_type_name(w.type)) +
            " layers load only from GGUF tensors of that type (warden does not quantize into it)");
    } else {
        throw util::Error("quantize_row: not a quantized format");
    }
    return out;
}

const Quantizer& default_quantizer() {
    static const RtnQuantizer q;
    return q;
}

namespace {
uint16_t rd16(const uint8_t* p) {
    return static_cast<uint16_t>(p[0] | (p[1] << 8));
}
void wr16(uint8_t* p, uint16_t v) {
    p[0] = static_cast<uint8_t>(v & 0xff);
    p[1] = static_cast<uint8_t>(v >> 8);
}
}  // namespace

namespace {
void check_f16_scale(uint16_t h) {
    if ((h & 0x7c00u) == 0x7c00u)
        throw util::Error(
            "corrupt quantized tensor: a block scale is infinite or NaN (f16 bits 0x" +
            [h] {
                char b[8];
                std::snprintf(b, sizeof b, "%04x", h);
                return std::string(b);
            }() +
            ")");
}
}  // namespace

bool runs_as_stored(tensor::GgmlType type, const WeightMatrix& w) {
    return tensor::is_kquant(w.type) && type == tensor::kquant_ggml_type(w.type) &&
           w.cols % tensor::kquant_block_elems(w.type) == 0;
}

void check_kquant_row_scales(const uint8_t* src, const WeightMatrix& w) {
    const int64_t bb = tensor::kquant_block_bytes(w.type),
                  nsb = w.cols / tensor::kquant_block_elems(w.type);
    // Where each block keeps its f16 scales (d, and dmin / m after it where there is one).
    int64_t at = 0, n16 = 1;
    switch (w.type) {
        case WeightType::Q6K:
            at = 208;
            break;
        case WeightType::Q3K:
            at = 108;
            break;
        case WeightType::Q2K:
            at = 80;
            n16 = 2;
            break;
        case WeightType::Q4K:
        case WeightType::Q5K:
        case WeightType::Q5_1:
            n16 = 2;
            break;
        default:  // Q5_0, IQ4_NL, IQ4_XS: d first
            break;
    }
    for (int64_t s = 0; s < nsb; ++s)  // every block's scales finite
        for (int64_t i = 0; i < n16; ++i) check_f16_scale(rd16(src + s * bb + at + 2 * i));
}

std::optional<QuantRow> import_ggml_row(tensor::GgmlType t, const uint8_t* src,
                                        const WeightMatrix& w) {
    if (tensor::is_kquant(w.type)) {  // the blocks as stored, when they are of the layout's type
        if (!runs_as_stored(t, w)) return std::nullopt;
        check_kquant_row_scales(src, w);
        const int64_t n =
            w.cols / tensor::kquant_block_elems(w.type) * tensor::kquant_block_bytes(w.type);
        return QuantRow{std::vector<uint8_t>(src, src + n), {}, {}, 0.0f};
    }
    if (w.bf16_scales || w.cols % 32 != 0) return std::nullopt;
    const int64_t nblk = w.cols / 32;
    QuantRow row;
    row.q.assign(static_cast<size_t>(w.cols), 0);
    if (w.type == WeightType::Q4 &&
        ((t == tensor::GgmlType::Q4_0 && !w.asym) || (t == tensor::GgmlType::Q4_1 && w.asym))) {
        const int64_t bb = w.asym ? 20 : 18, per = w.group / 32;
        row.d.assign(static_cast<size_t>(w.cols / w.group), 0);
        if (w.asym) row.m.assign(row.d.size(), 0);
        for (int64_t b = 0; b < nblk; ++b) {
            const uint8_t* blk = src + b * bb;
            const uint16_t d = rd16(blk), m = w.asym ? rd16(blk + 2) : 0;
            check_f16_scale(d);
            check_f16_scale(m);
            const auto g = static_cast<size_t>(b / per);
            if (b % per == 0) {
                row.d[g] = d;
                if (w.asym) row.m[g] = m;
            } else if (row.d[g] != d || (w.asym && row.m[g] != m)) {
                return std::nullopt;  // blocks of one group have different scales
            }
            const uint8_t* qs = blk + (w.asym ? 4 : 2);
            for (int64_t i = 0; i < 16; ++i) {
                row.q[static_cast<size_t>(b * 32 + i)] = qs[i] & 0x0f;
                row.q[static_cast<size_t>(b * 32 + 16 + i)] = qs[i] >> 4;
            }
        }
        return row;
    }
    if (w.type == WeightType::Q8 && t == tensor::GgmlType::Q8_0) {
        // int8-g32 is Q8_0 block for block; per-channel int8 needs one scale across the row.
        row.d.assign(w.group == 0 ? 1 : static_cast<size_t>(nblk), 0);
        for (int64_t b = 0; b < nblk; ++b) {
            const uint8_t* blk = src + b * 34;
            const uint16_t d = rd16(blk);
            check_f16_scale(d);
            if (w.group != 0 || b == 0) {
                row.d[w.group == 0 ? 0 : static_cast<size_t>(b)] = d;
            } else if (d != row.d[0]) {
                return std::nullopt;
            }
            std::memcpy(row.q.data() + b * 32, blk + 2, 32);  // int8 bits, -128 included
        }
        return row;
    }
    return std::nullopt;
}

tensor::GgmlType ggml_type_for(const WeightMatrix& w) {
    if (w.type == WeightType::Q4 && !w.bf16_scales)
        return w.asym ? tensor::GgmlType::Q4_1 : tensor::GgmlType::Q4_0;
    if (w.type == WeightType::Q8 && !w.bf16_scales) return tensor::GgmlType::Q8_0;
    throw util::Error(
        "weight format has no lossless GGUF type (GGUF output supports int4/int4-g128[-asym] and "
        "int8[-g32] with f16 scales; use safetensors output for others)");
}

void export_ggml_row(const WeightMatrix& w, const QuantRow& row, uint8_t* dst) {
    const tensor::GgmlType t = ggml_type_for(w);
    const int64_t nblk = w.cols / 32;
    for (int64_t b = 0; b < nblk; ++b) {
        if (t == tensor::GgmlType::Q8_0) {
            uint8_t* blk = dst + b * 34;
            wr16(blk, row.d[w.group == 0 ? 0 : static_cast<size_t>(b)]);
            std::memcpy(blk + 2, row.q.data() + b * 32, 32);
            continue;
        }
        const bool asym = t == tensor::GgmlType::Q4_1;
        uint8_t* blk = dst + b * (asym ? 20 : 18);
        const auto g = static_cast<size_t>(b * 32 / w.group);
        wr16(blk, row.d[g]);
        if (asym) wr16(blk + 2, row.m[g]);
        uint8_t* qs = blk + (asym ? 4 : 2);
        for (int64_t i = 0; i < 16; ++i)
            qs[i] = static_cast<uint8_t>(row.q[static_cast<size_t>(b * 32 + i)] |
                                         (row.q[static_cast<size_t>(b * 32 + 16 + i)] << 4));
    }
}

}  // namespace warden::quant
