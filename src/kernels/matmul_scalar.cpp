// Scalar reference matmul over the packed panel layout (kernels/matmul.h): each output is the
// canonical chain acc = fma(W[r, k], x[t, k], acc) for k = 0..cols-1 from acc = 0.0f, in
// float. This IS the contract: the SIMD variants must reproduce it bit for bit (they run the
// same chains, several rows/tokens side by side). Slow on purpose (clear; std::fma).
#include <cmath>

#include "kernels/kernels_internal.h"
#include "tensor/float_convert.h"

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

}  // namespace

const MatmulTable& matmul_scalar() {
    static const MatmulTable t{mm_f32, mm_bf16, kPanel};
    return t;
}

}  // namespace warden::kernels::detail
