#pragma once
// Element-wise and reduction kernels used by the forward pass. Each dispatches on
// active_isa(); the *_isa variants exist so tests can compare every ISA against the scalar one.
#include <cstdint>

#include "kernels/cpu_features.h"
#include "tensor/float_convert.h"

namespace warden::kernels {

using tensor::bf16_t;

// y = x / sqrt(mean(x^2) + eps) * w   (w may be nullptr: no gain). x and y may alias.
void rmsnorm(const float* x, const float* w, float* y, int64_t n, float eps);
// out = silu(gate) * up; out may alias gate or up.
void silu_mul(const float* gate, const float* up, float* out, int64_t n);
// In-place numerically stable softmax over n values.
void softmax(float* x, int64_t n);
// Dot products and y += a * x with f32 or bf16 second operand.
float dot_f32(const float* a, const float* b, int64_t n);
float dot_bf16(const float* a, const bf16_t* b, int64_t n);
void axpy_f32(float a, const float* x, float* y, int64_t n);
void axpy_bf16(float a, const bf16_t* x, float* y, int64_t n);
// Round-to-nearest-even conversion of a row.
void f32_to_bf16_row(const float* x, bf16_t* y, int64_t n);
void bf16_to_f32_row(const bf16_t* x, float* y, int64_t n);
// Index of the largest of x[0, n): the first of equal maxima (+0 and -0 are equal), NaNs never
// win; 0 when n <= 0 or x[0] is NaN. Exactly what `best = 0; for i: if (x[i] > x[best]) best =
// i` returns (the scalar kernel), which is torch.argmax's first-maximum rule for NaN-free rows.
// Greedy sampling runs it on every token's logits: the scalar loop's compare-and-select chain
// took ~150 us for a 32000-entry vocabulary, while the main thread's serial time between two
// decode steps is where the other threads wait.
int64_t argmax(const float* x, int64_t n);

// Explicit-ISA variants for tests.
void rmsnorm_isa(Isa isa, const float* x, const float* w, float* y, int64_t n, float eps);
void silu_mul_isa(Isa isa, const float* gate, const float* up, float* out, int64_t n);
void softmax_isa(Isa isa, float* x, int64_t n);
float dot_f32_isa(Isa isa, const float* a, const float* b, int64_t n);
float dot_bf16_isa(Isa isa, const float* a, const bf16_t* b, int64_t n);
void axpy_f32_isa(Isa isa, float a, const float* x, float* y, int64_t n);
void axpy_bf16_isa(Isa isa, float a, const bf16_t* x, float* y, int64_t n);
void f32_to_bf16_row_isa(Isa isa, const float* x, bf16_t* y, int64_t n);
void bf16_to_f32_row_isa(Isa isa, const bf16_t* x, float* y, int64_t n);
int64_t argmax_isa(Isa isa, const float* x, int64_t n);

}  // namespace warden::kernels
