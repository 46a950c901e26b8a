#include "quant/quantizer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "kernels/matmul_kquant.h"
#include "quant/int4_candidates.h"
#include "quant/int4_search_batch.h"
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
float from_scale(const WeightMatrix& w, uint16_t b) {  // kernels::quant_scale_to_f32, inlined
    return w.bf16_scales ? tensor::bf16_to_f32(b) : tensor::f16_to_f32(b);
}

// sum_i term(i) in double over n (a multiple of 4) in four running sums, lane k taking elements
// k, k + 4, ...: four independent chains instead of one (the group's statistics would otherwise
// wait on n dependent additions).
template <class Term>
double sum4(int64_t n, Term term) {
    double acc[4] = {};
    for (int64_t i = 0; i < n; i += 4)
        for (int k = 0; k < 4; ++k) acc[k] += term(i + k);
    return (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

// The error weights of the group x[0..G) (columns k0 on): wt[i] = importance[i] *
// sqrt(sigma^2 + x_i^2), sigma^2 the group's mean square; returns sum wt x^2.
double error_weights(const float* x, const float* imp, int64_t k0, int64_t G, float* wt) {
    return int4_error_weights(x, imp ? imp + k0 : nullptr, G, wt);
}

// nearbyint(clamp(v, lo, hi)) for integer lo, hi with |lo|, |hi| < 2^22: the same code as rounding
// first and clamping after (rounding is monotone), without a libm call.
inline float round_clamped(float v, float lo, float hi) {
    return (std::min(hi, std::max(lo, v)) + kRoundMagic) - kRoundMagic;
}

// A stored scale that can be used: nonzero, finite, with a finite inverse. A normal float's
// inverse is finite, so only a subnormal one (a bf16 scale's) is divided.
bool usable_scale(float d) {
    const float a = std::fabs(d);
    if (a >= std::numeric_limits<float>::min()) return a <= std::numeric_limits<float>::max();
    return d != 0.0f && std::isfinite(1.0f / d);
}

// The symmetric search's grid, -(8 + 0.1 s) for s = -9..9 (quant4_sym), shared with the batched
// search (quant/int4_search_batch.h) so both divide the same floats.
constexpr struct NegSteps {
    float v[kSymSteps];
    constexpr NegSteps() : v{} {
        for (int s = 0; s < kSymSteps; ++s) v[s] = -(8.0f + 0.1f * static_cast<float>(s - 9));
    }
} kNegStep;

// The asymmetric search's clip shrinks (1 - kClip4[c]) / 2 and grid 15 - 0.9 + 0.05 s
// (quant4_asym), shared with the batched search likewise.
static_assert(sizeof kClip4 / sizeof kClip4[0] == kAsymClips);
constexpr struct AsymGrid {
    float shrink[kAsymClips], step[kAsymSteps];
    constexpr AsymGrid() : shrink{}, step{} {
        for (int c = 0; c < kAsymClips; ++c) shrink[c] = (1.0f - kClip4[c]) * 0.5f;
        for (int s = 0; s < kAsymSteps; ++s) step[s] = 15.0f - 0.9f + 0.05f * static_cast<float>(s);
    }
} kAsymGrid;

// Symmetric int4: a weighted least-squares scale search, the approach of llama.cpp's k-quants
// (make_qx_quants) applied to our Q4_0-shaped groups. The error of element i is weighted by
// importance[i] * sqrt(sigma^2 + x_i^2) (sigma^2 = the group's mean square): large weights, which
// a plain squared-error search readily clips, count for more. Candidates: llama.cpp's Q4_0 rule
// d = max / -8 itself (so the search can only beat it on this error), then 19 inverse scales
// is = -(8 + 0.1 * s) / max (s = -9..9), each giving two scales for the codes r = round(x * is):
// 1 / is and the weighted least-squares refit sum w x r / sum w r^2. Every scale is rounded to the
// stored dtype first. One pass over the group per inverse scale gives both sums, and with them
// the error of either scale with those codes, sum w x^2 - 2 d sum w x r + d^2 sum w r^2: an upper
// bound of its error with the codes chosen for d (nearest rounding is the best code per element).
// The three smallest bounds and the Q4_0 rule are then evaluated exactly with their own codes and
// the first smallest is kept. It moves the model less than llama.cpp's Q4_0 of the same weights
// (docs/WEIGHT_QUANT.md, Results: int4 quality against llama.cpp's Q4_0).
void quant4_sym(const WeightMatrix& w, const float* x, const float* imp, int64_t k0, QuantRow& out,
                size_t g) {
    const int64_t G = w.group;
    // vmax: the first of the largest magnitude.
    float vmax = 0.0f;
    const float amax = int4_abs_max(x, G, &vmax);
    uint8_t* q = out.q.data() + k0;
    if (amax == 0.0f) {
        out.d[g] = 0;
        std::memset(q, 8, static_cast<size_t>(G));
        return;
    }
    float wt[kMaxGroup], l[kMaxGroup];
    const double sxx = error_weights(x, imp, k0, G, wt);

    // Candidate 0 is the Q4_0 rule, 1 + 2s the inverse scale of grid step s and 2 + 2s the refit of
    // its codes (0 when they are all zero), each rounded to the stored dtype; one that rounds to
    // zero or overflows is dropped (its bound infinite).
    constexpr int kSteps = kSymSteps, kCands = 1 + 2 * kSteps, kExact = 3;
    float iscale[kSteps], sxl[kSteps], sll[kSteps];
    for (int s = 0; s < kSteps; ++s) iscale[s] = kNegStep.v[s] / vmax;
    int4_refit_sums(x, wt, G, iscale, kSteps, sxl, sll);
    float raw[kCands], back[kCands];
    uint16_t raw_h[kCands];
    raw[0] = vmax / -8.0f;
    int4_sym_scales(iscale, sxl, sll, kSteps, raw);
    int4_round_scales(raw, kCands, w.bf16_scales, raw_h, back);
    // The grid's bounds, bound[c - 1] for candidate c >= 1 (the rule is scored exactly anyway).
    constexpr int kPadded = (kCands - 1 + 3) / 4 * 4;
    double bound[kPadded];
    int4_sym_bounds(back + 1, sxl, sll, sxx, kSteps, bound);
    // The exact set: the Q4_0 rule and the kExact smallest bounds, then in candidate order.
    int pick[kExact + 1], np = 0;
    if (usable_scale(back[0])) pick[np++] = 0;
    const int nb = smallest_bounds(bound, kPadded, kExact, pick + np);
    for (int i = np; i < np + nb; ++i) ++pick[i];
    np += nb;
    if (np == 0)
        throw util::Error("int4 quantization: group scale out of range of the scale dtype");
    for (int i = 1; i < np; ++i)  // an insertion sort of at most four
        for (int j = i; j > 0 && pick[j] < pick[j - 1]; --j) std::swap(pick[j], pick[j - 1]);
    float cand_d[kExact + 1], zeros[kExact + 1] = {}, err[kExact + 1];
    for (int i = 0; i < np; ++i) cand_d[i] = back[pick[i]];
    int4_group_errors(x, wt, G, cand_d, zeros, np, -8.0f, 7.0f, err);
    float best = std::numeric_limits<float>::infinity();
    int bi = -1;
    for (int i = 0; i < np; ++i)
        if (err[i] < best) {
            best = err[i];
            bi = i;
        }
    if (bi < 0) throw util::Error("int4 quantization: group scale out of range of the scale dtype");
    out.d[g] = raw_h[pick[bi]];
    int4_group_codes(x, G, cand_d[bi], 0.0f, -8.0f, 7.0f, l);
    for (int64_t i = 0; i < G; ++i) q[i] = static_cast<uint8_t>(static_cast<int>(l[i]) + 8);
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
// error compared is the stored row's. The fits' errors are first bounded from the grid pass's
// sums (their error with the grid step's codes), and only the three smallest bounds are scored
// exactly. On SmolLM2's tied head it moved the model less
// than the clip-ratio search on plain squared error did, level with llama.cpp's Q4_1 rule.
void quant4_asym(const WeightMatrix& w, const float* x, const float* imp, int64_t k0, QuantRow& out,
                 size_t g) {
    const int64_t G = w.group;
    float mn = x[0], mx = x[0];  // the row is finite (checked by the caller)
    for (int64_t i = 1; i < G; ++i) {
        mn = x[i] < mn ? x[i] : mn;
        mx = x[i] > mx ? x[i] : mx;
    }
    uint8_t* q = out.q.data() + k0;
    if (mx == mn) {  // constant group: d = 0, m = value (rounded)
        out.d[g] = 0;
        out.m[g] = to_scale(w, mn);
        std::memset(q, 0, static_cast<size_t>(G));
        return;
    }
    float wt[kMaxGroup];
    const double sxx = error_weights(x, imp, k0, G, wt);
    const double sw = sum4(G, [&](int64_t i) { return static_cast<double>(wt[i]); });
    const double swx = sum4(G, [&](int64_t i) { return static_cast<double>(wt[i]) * x[i]; });
    // The candidates in order, each (d, m) rounded to the stored dtype: the clip ratios, scored
    // exactly, then the grid's least-squares fits, of which only the kExact smallest error bounds
    // are scored exactly (the bound: the fit's error with the codes of its grid step; as in
    // quant4_sym, the codes chosen for the rounded pair can only do better).
    constexpr int kClips = kAsymClips, kSteps = kAsymSteps, kExact = 3, kAll = kClips + kSteps,
                  kPadded = (kSteps + 3) / 4 * 4;
    float raw_d[kAll], raw_m[kAll], back_d[kAll], back_m[kAll];
    uint16_t raw_dh[kAll], raw_mh[kAll];
    for (int c = 0; c < kClips; ++c) {
        const float shrink = kAsymGrid.shrink[c] * (mx - mn);
        const float lo = mn + shrink, hi = mx - shrink;
        raw_d[c] = (hi - lo) / 15.0f;
        raw_m[c] = lo;
    }
    float iscale[kSteps];
    double sums[3 * kSteps];
    for (int s = 0; s < kSteps; ++s) iscale[s] = kAsymGrid.step[s] / (mx - mn);
    int4_asym_sums(x, wt, G, mn, iscale, kSteps, sums);
    // Minimizes sum w (d r + m - x)^2 over (d, m): the 2 x 2 normal equations. No fit: d = 0,
    // which the rounded-scale check below drops.
    int4_asym_fits(sums, kSteps, sw, swx, raw_d + kClips, raw_m + kClips);
    int4_round_scales(raw_d, kAll, w.bf16_scales, raw_dh, back_d);
    int4_round_scales(raw_m, kAll, w.bf16_scales, raw_mh, back_m);
    const auto usable = [&](int c) { return usable_scale(back_d[c]) && std::isfinite(back_m[c]); };
    double bound[kPadded];
    for (int s = kSteps; s < kPadded; ++s) bound[s] = std::numeric_limits<double>::infinity();
    for (int s = 0; s < kSteps; ++s) {
        const double* sm = sums + 3 * s;
        const double dd = back_d[kClips + s], md = back_m[kClips + s];
        bound[s] = usable(kClips + s) ? sxx - 2.0 * dd * sm[2] - 2.0 * md * swx + dd * dd * sm[1] +
                                            2.0 * dd * md * sm[0] + md * md * sw
                                      : std::numeric_limits<double>::infinity();
    }
    int pick[kClips + kExact], np = 0;
    for (int c = 0; c < kClips; ++c)
        if (usable(c)) pick[np++] = c;
    int fits[kExact];
    const int nf = smallest_bounds(bound, kPadded, kExact, fits);
    for (int i = 0; i < nf; ++i) pick[np++] = kClips + fits[i];
    // Among equal exact errors the first in this order (the clips, then the fits by ascending
    // bound) wins.
    float cand_d[kClips + kExact], cand_m[kClips + kExact], err[kClips + kExact];
    for (int i = 0; i < np; ++i) {
        cand_d[i] = back_d[pick[i]];
        cand_m[i] = back_m[pick[i]];
    }
    float best = std::numeric_limits<float>::infinity(), best_d = 0.0f, best_m = 0.0f;
    if (np > 0) int4_group_errors(x, wt, G, cand_d, cand_m, np, 0.0f, 15.0f, err);
    for (int i = 0; i < np; ++i)
        if (err[i] < best) {
            best = err[i];
            best_d = cand_d[i];
            best_m = cand_m[i];
            out.d[g] = raw_dh[pick[i]];
            out.m[g] = raw_mh[pick[i]];
        }
    if (best == std::numeric_limits<float>::infinity())
        throw util::Error("int4 quantization: group scale out of range of the scale dtype");
    const float id = 1.0f / best_d;
    for (int64_t i = 0; i < G; ++i)
        q[i] = static_cast<uint8_t>(round_clamped((x[i] - best_m) * id, 0.0f, 15.0f));
}

// int8 codes and scale out.d[b] for columns [k0, k0 + n): the whole row (per channel) or one
// 32-block (int8-g32), the same clip search either way.
void quant8_span(const WeightMatrix& w, const float* x, const float* imp, int64_t k0, int64_t n,
                 size_t b, QuantRow& out) {
    const float amax = int4_abs_max(x + k0, n, nullptr);  // n: a multiple of 32
    if (amax == 0.0f) return;                             // codes and scale already 0
    // The clip ratios' stored scales, then their errors in one batch (quant/int4_candidates.h);
    // the first smallest wins.
    constexpr int kClips = static_cast<int>(sizeof kClip8 / sizeof kClip8[0]);
    float cand_d[kClips];
    uint16_t cand_h[kClips];
    double err[kClips];
    int nc = 0;
    bool underflow = false;
    for (float c : kClip8) {
        const uint16_t dh = to_scale(w, amax * c / 127.0f);
        const float d = from_scale(w, dh);
        underflow = underflow || d == 0.0f;
        if (!(d != 0.0f) || !std::isfinite(d)) continue;
        cand_h[nc] = dh;
        cand_d[nc++] = d;
    }
    double best = std::numeric_limits<double>::infinity();
    int bi = -1;
    if (nc > 0) int8_clip_errors(x + k0, imp ? imp + k0 : nullptr, n, cand_d, nc, err);
    for (int c = 0; c < nc; ++c)
        if (err[c] < best) {
            best = err[c];
            bi = c;
        }
    if (bi >= 0) {
        // No libm call per element: --weights int4 pays this at every load for its int8 head.
        out.d[b] = cand_h[bi];
        int8_round_codes(x + k0, n, 1.0f / cand_d[bi], out.q.data() + k0);
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
    for (int64_t b = 0; b < w.cols / span; ++b)
        quant8_span(w, x, imp, b * span, span, static_cast<size_t>(b), out);
}

}  // namespace

QuantRow RtnQuantizer::quantize_row(const WeightMatrix& w, const float* x, const float* imp) const {
    kernels::check_quant_shape(w);
    if (const int64_t i = first_non_finite(x, w.cols); i >= 0)
        throw util::Error("cannot quantize a weight row with a non-finite value (column " +
                          std::to_string(i) + ")");
    QuantRow out;
    out.q.assign(static_cast<size_t>(w.cols), 0);
    if (w.type == WeightType::Q4) {
        const int64_t ng = w.cols / w.group;
        out.d.assign(static_cast<size_t>(ng), 0);
        if (w.asym) out.m.assign(static_cast<size_t>(ng), 0);
        // Sixteen groups at a time where the batched searches run (the same bits).
        const bool batch = int4_batch_available();
        for (int64_t g = 0; g < ng; ++g) {
            if (batch && g + kInt4BatchGroups <= ng) {
                const int64_t k0 = g * w.group;
                const float* im = imp ? imp + k0 : nullptr;
                if (w.asym) {
                    int4_asym_search_batch(x + k0, im, w.group, w.bf16_scales, kAsymGrid.shrink,
                                           kAsymGrid.step, out.d.data() + g, out.m.data() + g,
                                           out.q.data() + k0);
                } else {
                    int4_sym_search_batch(x + k0, im, w.group, w.bf16_scales, kNegStep.v,
                                          out.d.data() + g, out.q.data() + k0);
                }
                g += kInt4BatchGroups - 1;
                continue;
            }
            if (w.asym) {
                quant4_asym(w, x + g * w.group, imp, g * w.group, out, static_cast<size_t>(g));
            } else {
                quant4_sym(w, x + g * w.group, imp, g * w.group, out, static_cast<size_t>(g));
            }
        }
    } else if (w.type == WeightType::Q8) {
        quant8(w, x, imp, out);
    } else if (w.type == WeightType::FP8) {
        // Per channel one scale, block-scaled one per block of group columns (as FP8 checkpoints
        // scale their blocks): amax / 448, codes rounded to nearest; an all-zero (or non-finite
        // scale) span has scale 0 and zero codes.
        const int64_t nb = kernels::fp8_blocks(w), g = w.group ? w.group : w.cols;
        if (w.group) out.s.assign(static_cast<size_t>(nb), 0.0f);
        float* sc = w.group ? out.s.data() : &out.scale;
        for (int64_t b = 0; b < nb; ++b) {
            const int64_t k0 = b * g, k1 = std::min(w.cols, k0 + g);
            float amax = 0.0f;
            for (int64_t i = k0; i < k1; ++i) amax = std::fmax(amax, std::fabs(x[i]));
            const float v = amax / tensor::kFp8E4m3Max;
            if (!(v > 0.0f) || !std::isfinite(v)) continue;
            sc[b] = v;
            for (int64_t i = k0; i < k1; ++i)
                out.q[static_cast<size_t>(i)] = tensor::f32_to_fp8_e4m3(x[i] / v);
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
        case WeightType::Q4_1:
            n16 = 2;
            break;
        default:  // Q4_0, Q5_0, Q8_0, IQ4_NL, IQ4_XS: d first
            break;
    }
    for (int64_t s = 0; s < nsb; ++s)  // every block's scales finite
        for (int64_t i = 0; i < n16; ++i) check_f16_scale(rd16(src + s * bb + at + 2 * i));
}

bool ggml_q4_codes_map(tensor::GgmlType t, const WeightMatrix& w) {
    return w.type == WeightType::Q4 && !w.bf16_scales &&
           ((t == tensor::GgmlType::Q4_0 && !w.asym) || (t == tensor::GgmlType::Q4_1 && w.asym));
}

bool import_ggml_q4_scales(tensor::GgmlType t, const uint8_t* src, const WeightMatrix& w,
                           uint16_t* d, uint16_t* m) {
    util::check(ggml_q4_codes_map(t, w), "import_ggml_q4_scales: the codes do not map");
    const int64_t bb = w.asym ? 20 : 18, per = w.group / 32;
    for (int64_t b = 0; b < w.cols / 32; ++b) {
        const uint8_t* blk = src + b * bb;
        const uint16_t bd = rd16(blk), bm = w.asym ? rd16(blk + 2) : 0;
        check_f16_scale(bd);
        check_f16_scale(bm);
        const int64_t g = b / per;
        if (b % per == 0) {
            d[g] = bd;
            if (w.asym) m[g] = bm;
        } else if (d[g] != bd || (w.asym && m[g] != bm)) {
            return false;  // blocks of one group have different scales
        }
    }
    return true;
}

std::optional<QuantRow> import_ggml_row(tensor::GgmlType t, const uint8_t* src,
                                        const WeightMatrix& w) {
    if (tensor::is_kquant(w.type)) {  // the blocks as stored, when they are of the layout's type
        if (!runs_as_stored(t, w)) return std::nullopt;
        check_kquant_row_scales(src, w);
        const int64_t n =
            w.cols / tensor::kquant_block_elems(w.type) * tensor::kquant_block_bytes(w.type);
        return QuantRow{std::vector<uint8_t>(src, src + n), {}, {}, 0.0f, {}};
    }
    if (w.bf16_scales || w.cols % 32 != 0) return std::nullopt;
    const int64_t nblk = w.cols / 32;
    QuantRow row;
    row.q.assign(static_cast<size_t>(w.cols), 0);
    if (ggml_q4_codes_map(t, w)) {
        const int64_t bb = w.asym ? 20 : 18;
        row.d.assign(static_cast<size_t>(w.cols / w.group), 0);
        if (w.asym) row.m.assign(row.d.size(), 0);
        if (!import_ggml_q4_scales(t, src, w, row.d.data(), row.m.data())) return std::nullopt;
        for (int64_t b = 0; b < nblk; ++b) {
            const uint8_t* qs = src + b * bb + (w.asym ? 4 : 2);
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
