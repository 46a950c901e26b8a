#include "quant/quantizer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "kernels/matmul_kquant.h"
#include "quant/int4_candidates.h"
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

float imp_at(const float* imp, int64_t k) {
    return imp ? imp[k] : 1.0f;
}

// nearbyint(clamp(v, lo, hi)) for integer lo, hi with |lo|, |hi| < 2^22: the same code as rounding
// first and clamping after (rounding is monotone), without a libm call.
inline float round_clamped(float v, float lo, float hi) {
    return (std::min(hi, std::max(lo, v)) + kRoundMagic) - kRoundMagic;
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
    // vmax: the first of the largest magnitude (two plain loops the compiler vectorizes).
    float amax = 0.0f, vmax = 0.0f;
    for (int64_t i = 0; i < G; ++i) amax = std::max(amax, std::fabs(x[i]));
    for (int64_t i = 0; i < G; ++i)
        if (std::fabs(x[i]) == amax) {
            vmax = x[i];
            break;
        }
    uint8_t* q = out.q.data() + k0;
    if (amax == 0.0f) {
        out.d[g] = 0;
        std::memset(q, 8, static_cast<size_t>(G));
        return;
    }
    float wt[kMaxGroup], l[kMaxGroup];
    double sum_x2 = 0.0;
    for (int64_t i = 0; i < G; ++i) sum_x2 += static_cast<double>(x[i]) * x[i];
    const float sigma2 = static_cast<float>(sum_x2 / static_cast<double>(G));
    for (int64_t i = 0; i < G; ++i) wt[i] = imp_at(imp, k0 + i) * std::sqrt(sigma2 + x[i] * x[i]);

    // The candidates in order, each rounded to the stored dtype (those that round to zero or
    // overflow dropped); then every candidate's error in one batch (quant/int4_candidates.h), and
    // the codes of the first best.
    constexpr int kSteps = 19, kMax = 1 + 2 * kSteps;
    float iscale[kSteps], refit[kSteps];
    for (int s = 0; s < kSteps; ++s) iscale[s] = -(8.0f + 0.1f * static_cast<float>(s - 9)) / vmax;
    int4_refit_scales(x, wt, G, iscale, kSteps, refit);
    float raw[kMax], back[kMax], cand_d[kMax], zeros[kMax] = {}, err[kMax];
    uint16_t raw_h[kMax], cand_h[kMax];
    int nr = 0;
    raw[nr++] = vmax / -8.0f;
    for (int s = 0; s < kSteps; ++s) {
        raw[nr++] = 1.0f / iscale[s];
        if (refit[s] != 0.0f) raw[nr++] = refit[s];
    }
    int4_round_scales(raw, nr, w.bf16_scales, raw_h, back);
    int nc = 0;
    for (int c = 0; c < nr; ++c) {
        const float d = back[c];
        if (!(d != 0.0f) || !std::isfinite(d) || !std::isfinite(1.0f / d)) continue;
        cand_h[nc] = raw_h[c];
        cand_d[nc++] = d;
    }
    if (nc == 0)
        throw util::Error("int4 quantization: group scale out of range of the scale dtype");
    int4_group_errors(x, wt, G, cand_d, zeros, nc, -8.0f, 7.0f, err);
    float best = std::numeric_limits<float>::infinity();
    int bi = -1;
    for (int c = 0; c < nc; ++c)
        if (err[c] < best) {
            best = err[c];
            bi = c;
        }
    if (bi < 0) throw util::Error("int4 quantization: group scale out of range of the scale dtype");
    out.d[g] = cand_h[bi];
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
    // As in quant4_sym: the candidates in order, rounded, then one batch.
    constexpr int kClips = static_cast<int>(sizeof kClip4 / sizeof kClip4[0]), kSteps = 37;
    float cand_d[kClips + kSteps], cand_m[kClips + kSteps], err[kClips + kSteps];
    uint16_t cand_dh[kClips + kSteps], cand_mh[kClips + kSteps];
    int nc = 0;
    const auto add = [&](float dv, float mv) {
        const uint16_t dh = to_scale(w, dv), mh = to_scale(w, mv);
        const float d = from_scale(w, dh), m = from_scale(w, mh);
        if (!(d != 0.0f) || !std::isfinite(d) || !std::isfinite(m) || !std::isfinite(1.0f / d))
            return;
        cand_dh[nc] = dh;
        cand_mh[nc] = mh;
        cand_d[nc] = d;
        cand_m[nc++] = m;
    };
    for (float clip : kClip4) {
        const float shrink = (1.0f - clip) * 0.5f * (mx - mn);
        const float lo = mn + shrink, hi = mx - shrink;
        add((hi - lo) / 15.0f, lo);
    }
    float iscale[kSteps];
    double sums[3 * kSteps];
    for (int s = 0; s < kSteps; ++s)
        iscale[s] = (15.0f - 0.9f + 0.05f * static_cast<float>(s)) / (mx - mn);
    int4_asym_sums(x, wt, G, mn, iscale, kSteps, sums);
    for (int s = 0; s < kSteps; ++s) {
        const double* sm = sums + 3 * s;
        // Minimizes sum w (d r + m - x)^2 over (d, m): the 2 x 2 normal equations.
        const double det = sw * sm[1] - sm[0] * sm[0];
        if (!(det > 0.0)) continue;
        add(static_cast<float>((sw * sm[2] - swx * sm[0]) / det),
            static_cast<float>((sm[1] * swx - sm[0] * sm[2]) / det));
    }
    float best = std::numeric_limits<float>::infinity(), best_d = 0.0f, best_m = 0.0f;
    if (nc > 0) int4_group_errors(x, wt, G, cand_d, cand_m, nc, 0.0f, 15.0f, err);
    for (int c = 0; c < nc; ++c)
        if (err[c] < best) {
            best = err[c];
            best_d = cand_d[c];
            best_m = cand_m[c];
            out.d[g] = cand_dh[c];
            out.m[g] = cand_mh[c];
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
    // The row is finite (checked by the caller), so a plain compare is std::fmax without its call.
    float amax = 0.0f;
    for (int64_t i = k0; i < k0 + n; ++i) amax = std::fabs(x[i]) > amax ? std::fabs(x[i]) : amax;
    if (amax == 0.0f) return;  // codes and scale already 0
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
        const float d = cand_d[bi], id = 1.0f / d;
        out.d[b] = cand_h[bi];
        for (int64_t i = 0; i < n; ++i)
            out.q[static_cast<size_t>(k0 + i)] = static_cast<uint8_t>(
                static_cast<int8_t>(round_clamped(x[k0 + i] * id, -127.0f, 127.0f)));
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
