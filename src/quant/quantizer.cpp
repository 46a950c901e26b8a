#include "quant/quantizer.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "tensor/float_convert.h"
#include "tensor/fp8.h"
#include "util/error.h"

namespace warden::quant {

using kernels::QuantRow;
using kernels::WeightMatrix;
using kernels::WeightType;

namespace {

constexpr float kClip4[] = {1.0f, 0.95f, 0.9f, 0.85f, 0.8f, 0.75f, 0.7f};
constexpr float kClip8[] = {1.0f, 0.98f, 0.96f, 0.94f, 0.92f, 0.9f};

uint16_t to_scale(const WeightMatrix& w, float v) {
    return w.bf16_scales ? tensor::f32_to_bf16(v) : tensor::f32_to_f16(v);
}
float from_scale(const WeightMatrix& w, uint16_t b) { return kernels::quant_scale_to_f32(w, b); }

float imp_at(const float* imp, int64_t k) { return imp ? imp[k] : 1.0f; }

void quant4_sym(const WeightMatrix& w, const float* x, const float* imp, int64_t k0, QuantRow& out, size_t g) {
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
    double best = std::numeric_limits<double>::infinity();
    uint8_t cand[128];
    for (float c : kClip4) {
        const uint16_t dh = to_scale(w, vmax * c / -8.0f);
        const float d = from_scale(w, dh);
        if (!(d != 0.0f) || !std::isfinite(d)) continue;
        const float id = 1.0f / d;
        double err = 0.0;
        for (int64_t i = 0; i < G; ++i) {
            float r = std::nearbyint(x[i] * id) + 8.0f;
            r = r < 0.0f ? 0.0f : (r > 15.0f ? 15.0f : r);
            cand[i] = static_cast<uint8_t>(r);
            const double e = static_cast<double>(x[i]) - (r - 8.0f) * d;
            err += e * e * imp_at(imp, k0 + i);
        }
        if (err < best) {
            best = err;
            out.d[g] = dh;
            std::memcpy(q, cand, static_cast<size_t>(G));
        }
    }
    if (best == std::numeric_limits<double>::infinity())
        throw util::Error("int4 quantization: group scale out of range of the scale dtype");
}

void quant4_asym(const WeightMatrix& w, const float* x, const float* imp, int64_t k0, QuantRow& out, size_t g) {
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
    double best = std::numeric_limits<double>::infinity();
    uint8_t cand[128];
    for (float c : kClip4) {
        const float shrink = (1.0f - c) * 0.5f * (mx - mn);
        const float lo = mn + shrink, hi = mx - shrink;
        const uint16_t dh = to_scale(w, (hi - lo) / 15.0f), mh = to_scale(w, lo);
        const float d = from_scale(w, dh), m = from_scale(w, mh);
        if (!(d != 0.0f) || !std::isfinite(d) || !std::isfinite(m)) continue;
        const float id = 1.0f / d;
        double err = 0.0;
        for (int64_t i = 0; i < G; ++i) {
            float r = std::nearbyint((x[i] - m) * id);
            r = r < 0.0f ? 0.0f : (r > 15.0f ? 15.0f : r);
            cand[i] = static_cast<uint8_t>(r);
            const double e = static_cast<double>(x[i]) - std::fma(r, d, m);
            err += e * e * imp_at(imp, k0 + i);
        }
        if (err < best) {
            best = err;
            out.d[g] = dh;
            out.m[g] = mh;
            std::memcpy(q, cand, static_cast<size_t>(G));
        }
    }
    if (best == std::numeric_limits<double>::infinity())
        throw util::Error("int4 quantization: group scale out of range of the scale dtype");
}

void quant8(const WeightMatrix& w, const float* x, const float* imp, QuantRow& out) {
    float amax = 0.0f;
    for (int64_t i = 0; i < w.cols; ++i) amax = std::fmax(amax, std::fabs(x[i]));
    out.d.assign(1, 0);
    if (amax == 0.0f) return;  // codes already 0
    double best = std::numeric_limits<double>::infinity();
    std::vector<uint8_t> cand(static_cast<size_t>(w.cols));
    for (float c : kClip8) {
        const uint16_t dh = to_scale(w, amax * c / 127.0f);
        const float d = from_scale(w, dh);
        if (!(d != 0.0f) || !std::isfinite(d)) continue;
        const float id = 1.0f / d;
        double err = 0.0;
        for (int64_t i = 0; i < w.cols; ++i) {
            float r = std::nearbyint(x[i] * id);
            r = r < -127.0f ? -127.0f : (r > 127.0f ? 127.0f : r);
            cand[static_cast<size_t>(i)] = static_cast<uint8_t>(static_cast<int8_t>(r));
            const double e = static_cast<double>(x[i]) - r * d;
            err += e * e * imp_at(imp, i);
        }
        if (err < best) {
            best = err;
            out.d[0] = dh;
            out.q = cand;
        }
    }
    if (best == std::numeric_limits<double>::infinity())
        throw util::Error("int8 quantization: row scale out of range of the scale dtype");
}

}  // namespace

QuantRow RtnQuantizer::quantize_row(const WeightMatrix& w, const float* x, const float* imp) const {
    kernels::check_quant_shape(w);
    for (int64_t i = 0; i < w.cols; ++i)
        if (!std::isfinite(x[i]))
            throw util::Error("cannot quantize a weight row with a non-finite value (column " + std::to_string(i) + ")");
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
            for (int64_t i = 0; i < w.cols; ++i) out.q[static_cast<size_t>(i)] = tensor::f32_to_fp8_e4m3(x[i] / out.scale);
        } else {
            out.scale = 0.0f;
        }
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
uint16_t rd16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
void wr16(uint8_t* p, uint16_t v) {
    p[0] = static_cast<uint8_t>(v & 0xff);
    p[1] = static_cast<uint8_t>(v >> 8);
}
}  // namespace

namespace {
void check_f16_scale(uint16_t h) {
    if ((h & 0x7c00u) == 0x7c00u)
        throw util::Error("corrupt quantized tensor: a block scale is infinite or NaN (f16 bits 0x" + [h] {
            char b[8];
            std::snprintf(b, sizeof b, "%04x", h);
            return std::string(b);
        }() + ")");
}
}  // namespace

std::optional<QuantRow> import_ggml_row(tensor::GgmlType t, const uint8_t* src, const WeightMatrix& w) {
    if (w.bf16_scales || w.cols % 32 != 0) return std::nullopt;
    const int64_t nblk = w.cols / 32;
    QuantRow row;
    row.q.assign(static_cast<size_t>(w.cols), 0);
    if (w.type == WeightType::Q4 && ((t == tensor::GgmlType::Q4_0 && !w.asym) || (t == tensor::GgmlType::Q4_1 && w.asym))) {
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
        row.d.assign(1, 0);
        for (int64_t b = 0; b < nblk; ++b) {
            const uint8_t* blk = src + b * 34;
            const uint16_t d = rd16(blk);
            check_f16_scale(d);
            if (b == 0) {
                row.d[0] = d;
            } else if (d != row.d[0]) {
                return std::nullopt;
            }
            for (int64_t i = 0; i < 32; ++i) {
                if (blk[2 + i] == 0x80) return std::nullopt;  // -128 is outside the int8 code range
                row.q[static_cast<size_t>(b * 32 + i)] = blk[2 + i];
            }
        }
        return row;
    }
    return std::nullopt;
}

tensor::GgmlType ggml_type_for(const WeightMatrix& w) {
    if (w.type == WeightType::Q4 && !w.bf16_scales) return w.asym ? tensor::GgmlType::Q4_1 : tensor::GgmlType::Q4_0;
    if (w.type == WeightType::Q8 && !w.bf16_scales) return tensor::GgmlType::Q8_0;
    throw util::Error("weight format has no lossless GGUF type (GGUF output supports int4/int4-g128[-asym] and int8 "
                      "with f16 scales; use safetensors output for others)");
}

void export_ggml_row(const WeightMatrix& w, const QuantRow& row, uint8_t* dst) {
    const tensor::GgmlType t = ggml_type_for(w);
    const int64_t nblk = w.cols / 32;
    for (int64_t b = 0; b < nblk; ++b) {
        if (t == tensor::GgmlType::Q8_0) {
            uint8_t* blk = dst + b * 34;
            wr16(blk, row.d[0]);
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
