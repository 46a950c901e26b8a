// Scalar reference matmul over the packed panel layout (kernels/matmul.h): each output is the
// canonical chain acc = fma(W[r, k], x[t, k], acc) for k = 0..cols-1 from acc = 0.0f, in
// float. This IS the contract: the SIMD variants must reproduce it bit for bit (they run the
// same chains, several rows/tokens side by side). Slow on purpose (clear; std::fma).
#include <cmath>
#include <cstring>

#include "kernels/kernels_internal.h"
#include "tensor/float_convert.h"
#include "tensor/fp8.h"

namespace warden::kernels::detail {
namespace {

constexpr int64_t kPanel = 16;  // kernels::kPanelRows

template <typename W, typename Load>
void matmul_ref(const W* w, int64_t cols, const float* x, int64_t n, float* y, int64_t ldy,
                int64_t r0, int64_t r1, Load load) {
    for (int64_t t = 0; t < n; ++t) {
        const float* xt = x + t * cols;
        for (int64_t r = r0; r < r1; ++r) {
            const W* wr = w + (r / kPanel) * cols * kPanel + r % kPanel;  // stride kPanel over k
            float acc = 0.0f;
            for (int64_t k = 0; k < cols; ++k) acc = std::fma(load(wr[k * kPanel]), xt[k], acc);
            y[t * ldy + r] = acc;
        }
    }
}

void mm_f32(const float* w, int64_t cols, const float* x, int64_t n, float* y, int64_t ldy,
            int64_t r0, int64_t r1) {
    matmul_ref(w, cols, x, n, y, ldy, r0, r1, [](float v) { return v; });
}

void mm_bf16(const bf16* w, int64_t cols, const float* x, int64_t n, float* y, int64_t ldy,
             int64_t r0, int64_t r1) {
    matmul_ref(w, cols, x, n, y, ldy, r0, r1, [](bf16 v) { return tensor::bf16_to_f32(v); });
}

// ---- quantized weights: the reference arithmetic of kernels/matmul_quant.h, element by
// element from the layout definition.
float scale_f32(const QuantArgs& a, const uint8_t* p) {
    const uint16_t bits = static_cast<uint16_t>(p[0] | (p[1] << 8));
    return a.bf16_scales ? tensor::bf16_to_f32(bits) : tensor::f16_to_f32(bits);
}

void mm_quant(const QuantArgs& a, int64_t r0, int64_t r1) {
    if (a.kind >= kQuantKindQ4K) {
        mm_kquant_scalar(a, r0, r1);
        return;
    }
    const int64_t cols = a.cols, nb = cols / 32;
    for (int64_t t = 0; t < a.n; ++t) {
        const float* x = a.x + t * cols;
        for (int64_t r = r0; r < r1; ++r) {
            const int64_t lr = r % kPanel, lane = lr % 8;
            const bool high = lr >= 8;
            float acc = 0.0f;
            if (a.kind == 0) {  // Q4
                const int64_t gb = 32 + (a.asym ? 32 : 0) + a.group * 8;
                const uint8_t* panel = a.data + (r / kPanel) * (cols / a.group) * gb;
                auto code = [&](int64_t k) {
                    const uint8_t* qs = panel + (k / a.group) * gb + (a.asym ? 64 : 32);
                    const int64_t i = k % a.group;
                    const uint8_t byte = qs[(i / 4) * 32 + lane * 4 + i % 4];
                    return static_cast<int32_t>(high ? byte >> 4 : byte & 0x0f);
                };
                for (int64_t b = 0; b < nb; ++b) {
                    const uint8_t* blk = panel + (b * 32 / a.group) * gb;
                    const float d = scale_f32(a, blk + lr * 2);
                    if (a.act_f32) {
                        const float m = a.asym ? scale_f32(a, blk + 32 + lr * 2) : 0.0f;
                        for (int64_t k = b * 32; k < b * 32 + 32; ++k) {
                            const float q = static_cast<float>(code(k));
                            const float w = a.asym ? std::fma(q, d, m) : (q - 8.0f) * d;
                            acc = std::fma(w, x[k], acc);
                        }
                        continue;
                    }
                    const int8_t* xq = a.xq + t * cols + b * 32;
                    const float xd = a.xd[t * nb + b];
                    const int32_t xs = a.xs[t * nb + b];
                    int32_t i = 0;
                    for (int64_t k = 0; k < 32; ++k) i += code(b * 32 + k) * xq[k];
                    if (!a.asym) i -= 8 * xs;
                    acc = std::fma(static_cast<float>(i), d * xd, acc);
                    if (a.asym)
                        acc = std::fma(static_cast<float>(xs), scale_f32(a, blk + 32 + lr * 2) * xd,
                                       acc);
                }
            } else if (a.kind == 1) {  // Q8: a scale per row (group 0) or per 32-block (group 32)
                const bool per_block = a.group != 0;
                const uint8_t* panel =
                    a.data + (r / kPanel) * (per_block ? nb * kQ8BlockBytes : 32 + cols * 16);
                for (int64_t b = 0; b < nb; ++b) {
                    // The block's 8 quads of codes; with group 32 its scales are the 32 bytes
                    // before.
                    const uint8_t* qs =
                        per_block ? panel + b * kQ8BlockBytes + 32 : panel + 32 + b * 512;
                    int32_t i = 0;
                    for (int64_t kk = 0; kk < 32; ++kk) {
                        const auto q = static_cast<int8_t>(
                            qs[(kk / 4) * 64 + (high ? 32 : 0) + lane * 4 + kk % 4]);
                        i += q * a.xq[t * cols + b * 32 + kk];
                    }
                    const float xd = a.xd[t * nb + b];
                    acc = std::fma(static_cast<float>(i),
                                   per_block ? scale_f32(a, qs - 32 + lr * 2) * xd : xd, acc);
                }
                if (!per_block) acc = acc * scale_f32(a, panel + lr * 2);
            } else {  // FP8: per block (the whole row per channel) four chains, then its scale
                const int64_t g = a.group ? a.group : cols;
                const int64_t fb = a.group ? (cols + g - 1) / g : 1;
                const uint8_t* panel = a.data + (r / kPanel) * (fb * 64 + cols * 16);
                for (int64_t b = 0; b < fb; ++b) {
                    float part[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                    const int64_t k1 = cols < (b + 1) * g ? cols : (b + 1) * g;
                    for (int64_t k = b * g; k < k1; ++k)
                        part[k % 4] =
                            std::fma(tensor::fp8_e4m3_to_f32(panel[fb * 64 + k * 16 + lr]), x[k],
                                     part[k % 4]);
                    float s;
                    std::memcpy(&s, panel + b * 64 + lr * 4, 4);
                    const float sum = (part[0] + part[1]) + (part[2] + part[3]);
                    acc = a.group ? std::fma(sum, s, acc) : sum * s;
                }
            }
            a.y[t * a.ldy + r] = acc;
        }
    }
}

}  // namespace

const MatmulTable& matmul_scalar() {
    static const MatmulTable t{mm_f32, mm_bf16, kPanel, mm_quant, false, nullptr};
    return t;
}

}  // namespace warden::kernels::detail
