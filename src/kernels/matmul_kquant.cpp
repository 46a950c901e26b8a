// GGUF block layout helpers and the scalar reference kernel (kernels/matmul_kquant.h), written
// element by element from llama.cpp's block definitions.
#include "kernels/matmul_kquant.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>

#include "kernels/kernels_internal.h"
#include "tensor/float_convert.h"
#include "tensor/fp8.h"
#include "tensor/ggml_types.h"
#include "util/error.h"

namespace warden::kernels {

int kquant_kind(WeightType t) {
    switch (t) {
        case WeightType::Q4K:
            return detail::kQuantKindQ4K;
        case WeightType::Q5K:
            return detail::kQuantKindQ5K;
        case WeightType::Q6K:
            return detail::kQuantKindQ6K;
        case WeightType::Q5_0:
            return detail::kQuantKindQ5_0;
        case WeightType::Q5_1:
            return detail::kQuantKindQ5_1;
        case WeightType::Q2K:
            return detail::kQuantKindQ2K;
        case WeightType::Q3K:
            return detail::kQuantKindQ3K;
        case WeightType::IQ4NL:
            return detail::kQuantKindIQ4NL;
        case WeightType::IQ4XS:
            return detail::kQuantKindIQ4XS;
        case WeightType::Q8_0:
            return detail::kQuantKindQ8_0;
        case WeightType::Q4_0:
            return detail::kQuantKindQ4_0;
        case WeightType::Q4_1:
            return detail::kQuantKindQ4_1;
        default:
            throw util::Error("kquant_kind: not a GGUF block weight type");
    }
}

int64_t kquant_row_bytes(const WeightMatrix& w) {
    return w.cols / kquant_block_elems(w.type) * kquant_block_bytes(w.type);
}

const uint8_t* kquant_row(const WeightMatrix& w, int64_t r) {
    return static_cast<const uint8_t*>(w.data) + r * kquant_row_bytes(w);
}

void kquant_dequant_row(const WeightMatrix& w, int64_t r, float* out) {
    tensor::dequantize_row(kquant_ggml_type(w.type), kquant_row(w, r), out, w.cols);
}

namespace detail {

namespace {

float f16_at(const uint8_t* p) {
    return tensor::f16_to_f32(static_cast<uint16_t>(p[0] | (p[1] << 8)));
}

// Sub-block j's 6-bit scale and min of a Q4_K / Q5_K block (llama.cpp's get_scale_min_k4).
void scale_min(int j, const uint8_t* q, int32_t& sc, int32_t& m) {
    if (j < 4) {
        sc = q[j] & 63;
        m = q[j + 4] & 63;
    } else {
        sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

// Code of weight l (0..31) of 32-block j of a super-block.
int32_t code_q4k(const uint8_t* blk, int j, int l) {
    const uint8_t b = blk[16 + (j / 2) * 32 + l];
    return j % 2 == 0 ? b & 0xF : b >> 4;
}
int32_t code_q5k(const uint8_t* blk, int j, int l) {
    const uint8_t b = blk[48 + (j / 2) * 32 + l];
    return (j % 2 == 0 ? b & 0xF : b >> 4) + ((blk[16 + l] >> j) & 1) * 16;
}
int32_t code_q6k(const uint8_t* blk, int j, int l) {  // q - 32
    const uint8_t* ql = blk + 64 * (j / 4);
    const uint8_t qh = blk[128 + 32 * (j / 4) + l];
    const int i = j % 4;
    const int32_t lo = i % 2 == 0 ? ql[l] : ql[l + 32];
    return ((i < 2 ? lo & 0xF : lo >> 4) | (((qh >> (2 * i)) & 3) << 4)) - 32;
}

// Bit l of a 32-block's little-endian u32 high-bit word (Q5_0 / Q5_1).
int32_t bit_at(const uint8_t* qh, int l) {
    return (qh[l / 8] >> (l % 8)) & 1;
}
// Nibble l (0..31) of a 32-block's 16 bytes: low nibbles first, then high (Q5_0, Q5_1, IQ4_*).
int32_t nibble_at(const uint8_t* qs, int l) {
    return l < 16 ? qs[l] & 0xF : qs[l - 16] >> 4;
}
// Q2_K / Q3_K 2-bit code of weight l of 32-block j.
int32_t code_q2k(const uint8_t* qs, int j, int l) {
    return (qs[32 * (j / 4) + l] >> (2 * (j % 4))) & 3;
}

// Block b's contribution to its lane (the contract in matmul_kquant.h) for the types added after
// Q6_K. row: the row's blocks; xq, xd, xs: activation block b's.
float add_block(int kind, const uint8_t* row, int64_t b, const int8_t* xq, float xd, int32_t xs,
                float acc) {
    const int j = static_cast<int>(b % 8);
    const int64_t s = b / 8;
    switch (kind) {
        case kQuantKindQ5_0:
        case kQuantKindQ5_1: {
            const bool q51 = kind == kQuantKindQ5_1;
            const uint8_t* blk = row + b * (q51 ? 24 : 22);
            const uint8_t* qh = blk + (q51 ? 4 : 2);
            int32_t sum = 0;
            for (int l = 0; l < 32; ++l) sum += (nibble_at(qh + 4, l) | bit_at(qh, l) << 4) * xq[l];
            if (!q51) return std::fma(static_cast<float>(sum - 16 * xs), f16_at(blk) * xd, acc);
            acc = std::fma(static_cast<float>(sum), f16_at(blk) * xd, acc);
            return std::fma(static_cast<float>(xs), f16_at(blk + 2) * xd, acc);
        }
        case kQuantKindIQ4NL: {
            const uint8_t* blk = row + b * 18;
            int32_t sum = 0;
            for (int l = 0; l < 32; ++l) sum += tensor::iq4nl_value(nibble_at(blk + 2, l)) * xq[l];
            return std::fma(static_cast<float>(sum), f16_at(blk) * xd, acc);
        }
        case kQuantKindIQ4XS: {
            const uint8_t* blk = row + s * 136;
            const int32_t ls = ((blk[4 + j / 2] >> 4 * (j % 2)) & 0xF) |
                               (((static_cast<int32_t>(blk[2] | blk[3] << 8) >> 2 * j) & 3) << 4);
            int32_t sum = 0;
            for (int l = 0; l < 32; ++l)
                sum += tensor::iq4nl_value(nibble_at(blk + 8 + 16 * j, l)) * xq[l];
            return std::fma(static_cast<float>((ls - 32) * sum), f16_at(blk) * xd, acc);
        }
        case kQuantKindQ2K: {
            const uint8_t* blk = row + s * 84;
            int32_t q[2] = {}, x[2] = {};
            for (int l = 0; l < 32; ++l) {
                q[l / 16] += code_q2k(blk + 16, j, l) * xq[l];
                x[l / 16] += xq[l];
            }
            const int32_t i = (blk[2 * j] & 0xF) * q[0] + (blk[2 * j + 1] & 0xF) * q[1];
            const int32_t mx = (blk[2 * j] >> 4) * x[0] + (blk[2 * j + 1] >> 4) * x[1];
            acc = std::fma(static_cast<float>(i), f16_at(blk + 80) * xd, acc);
            return std::fma(static_cast<float>(mx), -(f16_at(blk + 82) * xd), acc);
        }
        default: {  // Q3_K
            const uint8_t* blk = row + s * 110;
            int8_t sc[16];
            tensor::q3k_scales(blk + 96, sc);
            int32_t q[2] = {};
            for (int l = 0; l < 32; ++l)
                q[l / 16] += (code_q2k(blk + 32, j, l) - ((blk[l] >> j) & 1 ? 0 : 4)) * xq[l];
            const int32_t i = (sc[2 * j] - 32) * q[0] + (sc[2 * j + 1] - 32) * q[1];
            return std::fma(static_cast<float>(i), f16_at(blk + 108) * xd, acc);
        }
    }
}

// Q8_0 / Q4_0 / Q4_1 / row-major int4 row `row` against token t with int8-g32's / int4-g32's /
// int4-g32-asym's / int4's arithmetic (kernels/matmul_quant.h): one fma chain, block by block in
// k order.
float panel_contract_row(const QuantArgs& a, const uint8_t* row, int64_t t) {
    const int64_t nb = a.cols / 32;
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; ++b) {
        const int8_t* xq = a.xq + t * a.cols + b * 32;
        const float xd = a.xd[t * nb + b];
        const int32_t xs = a.xs[t * nb + b];
        int32_t sum = 0;
        if (a.kind == kQuantKindQ8_0) {
            const uint8_t* blk = row + b * 34;
            for (int l = 0; l < 32; ++l) sum += static_cast<int8_t>(blk[2 + l]) * xq[l];
            acc = std::fma(static_cast<float>(sum), f16_at(blk) * xd, acc);
            continue;
        }
        if (a.kind == kQuantKindQ4Rows) {  // codes 2i, 2i + 1 in byte i; scales in their array
            const uint8_t* codes = row + b * 16;
            for (int l = 0; l < 32; ++l) sum += ((codes[l / 2] >> (4 * (l % 2))) & 0x0f) * xq[l];
            const int64_t ng = a.cols / a.group, r = (row - a.data) / (a.cols / 2);
            const uint8_t* sp = a.scales + (r * ng + b * 32 / a.group) * 2;
            const auto bits = static_cast<uint16_t>(sp[0] | (sp[1] << 8));
            const float d = a.bf16_scales ? tensor::bf16_to_f32(bits) : tensor::f16_to_f32(bits);
            acc = std::fma(static_cast<float>(sum - 8 * xs), d * xd, acc);
            continue;
        }
        const bool q41 = a.kind == kQuantKindQ4_1;
        const uint8_t* blk = row + b * (q41 ? 20 : 18);
        for (int l = 0; l < 32; ++l) sum += nibble_at(blk + (q41 ? 4 : 2), l) * xq[l];
        if (!q41) sum -= 8 * xs;
        acc = std::fma(static_cast<float>(sum), f16_at(blk) * xd, acc);
        if (q41) acc = std::fma(static_cast<float>(xs), f16_at(blk + 2) * xd, acc);
    }
    return acc;
}

// Row-major FP8 row r against token t with the FP8 block-scaled contract (kernels/matmul_quant.h):
// per block four chains (chain k % 4) from zero, folded into y with the block's scale.
float fp8_rows_row(const QuantArgs& a, int64_t r, int64_t t) {
    const int64_t g = a.group, nb = (a.cols + g - 1) / g;
    const uint8_t* codes = a.data + r * a.cols;
    const float* x = a.x + t * a.cols;
    float s[1];
    const uint8_t* grid = a.scales + (r / a.scale_block_rows) * nb * 4;
    float y = 0.0f;
    for (int64_t b = 0; b < nb; ++b) {
        float part[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        const int64_t k1 = std::min(a.cols, (b + 1) * g);
        for (int64_t k = b * g; k < k1; ++k)
            part[k % 4] = std::fma(tensor::fp8_e4m3_to_f32(codes[k]), x[k], part[k % 4]);
        std::memcpy(s, grid + b * 4, 4);
        y = std::fma((part[0] + part[1]) + (part[2] + part[3]), s[0], y);
    }
    return y;
}

}  // namespace

void mm_kquant_scalar(const QuantArgs& a, int64_t r0, int64_t r1) {
    const int64_t cols = a.cols, nsb = cols / kKQuantBlock, nb = cols / 32;
    const int64_t bb = kKQuantKindBytes[a.kind - kQuantKindQ4K];
    const int64_t row_bytes = cols / kKQuantKindElems[a.kind - kQuantKindQ4K] * bb;
    for (int64_t t = 0; t < a.n; ++t)
        for (int64_t r = r0; r < r1; ++r) {
            if (a.kind == kQuantKindFp8Rows) {
                a.y[t * a.ldy + r] = fp8_rows_row(a, r, t);
                continue;
            }
            if (kquant_kind_is_panel_contract(a.kind)) {  // one chain in k order
                a.y[t * a.ldy + r] = panel_contract_row(a, a.data + r * row_bytes, t);
                continue;
            }
            float acc[8] = {};
            if (a.kind > kQuantKindQ6K) {
                for (int64_t b = 0; b < nb; ++b)
                    acc[b % 8] =
                        add_block(a.kind, a.data + r * row_bytes, b, a.xq + t * cols + b * 32,
                                  a.xd[t * nb + b], a.xs[t * nb + b], acc[b % 8]);
            }
            for (int64_t s = 0; s < nsb && a.kind <= kQuantKindQ6K; ++s) {
                const uint8_t* blk = a.data + (r * nsb + s) * bb;
                const int8_t* xq = a.xq + t * cols + s * kKQuantBlock;
                const float* xd = a.xd + t * nb + s * 8;
                const int32_t* xs = a.xs + t * nb + s * 8;
                if (a.kind == kQuantKindQ6K) {
                    const float d = f16_at(blk + 208);
                    const auto* sc = reinterpret_cast<const int8_t*>(blk + 192);
                    for (int j = 0; j < 8; ++j) {
                        int32_t lo = 0, hi = 0;
                        for (int l = 0; l < 16; ++l) lo += code_q6k(blk, j, l) * xq[j * 32 + l];
                        for (int l = 16; l < 32; ++l) hi += code_q6k(blk, j, l) * xq[j * 32 + l];
                        const int32_t i = sc[2 * j] * lo + sc[2 * j + 1] * hi;
                        acc[j] = std::fma(static_cast<float>(i), d * xd[j], acc[j]);
                    }
                    continue;
                }
                const float d = f16_at(blk), dmin = f16_at(blk + 2);
                for (int j = 0; j < 8; ++j) {
                    int32_t sc, m, sum = 0;
                    scale_min(j, blk + 4, sc, m);
                    for (int l = 0; l < 32; ++l)
                        sum +=
                            (a.kind == kQuantKindQ4K ? code_q4k(blk, j, l) : code_q5k(blk, j, l)) *
                            xq[j * 32 + l];
                    acc[j] = std::fma(static_cast<float>(sc * sum), d * xd[j], acc[j]);
                    acc[j] = std::fma(static_cast<float>(m * xs[j]), -(dmin * xd[j]), acc[j]);
                }
            }
            a.y[t * a.ldy + r] =
                ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
        }
}

}  // namespace detail

}  // namespace warden::kernels
