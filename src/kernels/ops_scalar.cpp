// Scalar reference implementations of the element-wise / reduction kernels. They favour
// clarity and accuracy (double accumulation where it is cheap) because every SIMD variant is
// tested against them.
#include <cmath>
#include <limits>

#include "kernels/kernels_internal.h"
#include "tensor/float_convert.h"

namespace warden::kernels::detail {
namespace {

void rmsnorm(const float* x, const float* w, float* y, int64_t n, float eps) {
    double ss = 0.0;
    for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
    const float inv =
        n > 0 ? static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps)) : 0.0f;
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * inv * (w ? w[i] : 1.0f);
}

void silu_mul(const float* gate, const float* up, float* out, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        const float g = gate[i];
        out[i] = g / (1.0f + std::exp(-g)) * up[i];
    }
}

void softmax_stats(float* x, int64_t n, float* max_out, float* sum_out) {
    *max_out = 0.0f;
    *sum_out = 0.0f;
    if (n <= 0) return;
    float mx = x[0];
    for (int64_t i = 1; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) {
        x[i] = std::exp(x[i] - mx);
        sum += x[i];
    }
    *max_out = mx;
    *sum_out = static_cast<float>(sum);
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void softmax(float* x, int64_t n) {
    float mx, sum;
    softmax_stats(x, n, &mx, &sum);
}

float dot_f32(const float* a, const float* b, int64_t n) {
    double s = 0.0;
    for (int64_t i = 0; i < n; ++i) s += static_cast<double>(a[i]) * b[i];
    return static_cast<float>(s);
}

float dot_bf16(const float* a, const bf16* b, int64_t n) {
    double s = 0.0;
    for (int64_t i = 0; i < n; ++i) s += static_cast<double>(a[i]) * tensor::bf16_to_f32(b[i]);
    return static_cast<float>(s);
}

void axpy_f32(float a, const float* x, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

void axpy_bf16(float a, const bf16* x, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] += a * tensor::bf16_to_f32(x[i]);
}

void f32_to_bf16_row(const float* x, bf16* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = tensor::f32_to_bf16(x[i]);
}

void bf16_to_f32_row(const bf16* x, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = tensor::bf16_to_f32(x[i]);
}

}  // namespace

// The contract of kernels::argmax, as written.
int64_t argmax_scalar(const float* x, int64_t n) {
    int64_t best = 0;
    for (int64_t i = 1; i < n; ++i)
        if (x[i] > x[best]) best = i;
    return best;
}

int64_t argmax_merge(const float* lane_max, const int32_t* lane_idx, int lanes, const float* x,
                     int64_t i, int64_t n) {
    float best_v = -std::numeric_limits<float>::infinity();
    int64_t best = -1;
    for (int l = 0; l < lanes; ++l)  // ties (+0 against -0 too) go to the lower index
        if (lane_idx[l] >= 0 &&
            (lane_max[l] > best_v || (lane_max[l] == best_v && lane_idx[l] < best))) {
            best_v = lane_max[l];
            best = lane_idx[l];
        }
    for (; i < n; ++i)  // after every lane's index: only a strictly larger value wins
        if (x[i] > best_v) {
            best_v = x[i];
            best = i;
        }
    return best < 0 ? 0 : best;
}

const OpsTable& ops_scalar() {
    static const OpsTable t{rmsnorm,         silu_mul,        softmax,      softmax_stats,
                            dot_f32,         dot_bf16,        axpy_f32,     axpy_bf16,
                            f32_to_bf16_row, bf16_to_f32_row, argmax_scalar};
    return t;
}

}  // namespace warden::kernels::detail
