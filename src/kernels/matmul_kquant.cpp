// K-quant layout helpers and the scalar reference kernel (kernels/matmul_kquant.h), written
// element by element from llama.cpp's block definitions.
#include "kernels/matmul_kquant.h"

#include <cmath>
#include <cstring>

#include "kernels/kernels_internal.h"
#include "tensor/float_convert.h"
#include "tensor/ggml_types.h"
#include "util/error.h"

namespace warden::kernels {

int64_t kquant_row_bytes(const WeightMatrix& w) {
    return w.cols / kKQuantBlock * kquant_block_bytes(w.type);
}

const uint8_t* kquant_row(const WeightMatrix& w, int64_t r) {
    return static_cast<const uint8_t*>(w.data) + r * kquant_row_bytes(w);
}

void kquant_dequant_row(const WeightMatrix& w, int64_t r, float* out) {
    const tensor::GgmlType t = w.type == WeightType::Q4K   ? tensor::GgmlType::Q4_K
                               : w.type == WeightType::Q5K ? tensor::GgmlType::Q5_K
                                                           : tensor::GgmlType::Q6_K;
    tensor::dequantize_row(t, kquant_row(w, r), out, w.cols);
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

}  // namespace

void mm_kquant_scalar(const QuantArgs& a, int64_t r0, int64_t r1) {
    const int64_t cols = a.cols, nsb = cols / kKQuantBlock, nb = cols / 32;
    const int64_t bb = a.kind == kQuantKindQ4K ? 144 : (a.kind == kQuantKindQ5K ? 176 : 210);
    for (int64_t t = 0; t < a.n; ++t)
        for (int64_t r = r0; r < r1; ++r) {
            float acc[8] = {};
            for (int64_t s = 0; s < nsb; ++s) {
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
