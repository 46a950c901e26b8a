#pragma once
// f32 rows -> GGUF blocks of the types llama.cpp's K-quant mixes are made of (Q4_K, Q5_K, Q6_K
// and their fallbacks for rows that are not whole 256-blocks: Q5_0, Q5_1, Q8_0), for `warden
// quantize --weights q4_k_m` and the like (convert/gguf_type_mix.h).
//
// The search, per 256-weight super-block, minimises the squared error weighted by
// importance[i] * sqrt(sigma^2 + x_i^2) (sigma^2 the super-block's mean square; importance 1
// without an importance matrix), the weighting the int4 quantizer uses (quant/quantizer.h):
//  1. each sub-block (32 weights for Q4_K/Q5_K, 16 for Q6_K) gets its best float scale (and min)
//     from a grid of inverse scales, each refit by weighted least squares;
//  2. the sub-block scales are coded against the super-block scale (6-bit Q4_K/Q5_K, int8 Q6_K),
//     the super-block scale searched the same way, weighted by each sub-block's total weight;
//  3. with the coded scales fixed, each sub-block tries its integer scale (and min) and the
//     neighbours +-1, re-rounding its codes, and keeps the best; then the super-block scale(s)
//     are refit by least squares to the integer scales and codes, and kept where that lowers the
//     error. Steps 1-2 are what llama.cpp's k-quants do; step 3 only ever lowers the error of
//     what is stored.
// Every scale is rounded to its stored f16 before the codes that use it are chosen.
#include <cstdint>

#include "tensor/ggml_types.h"

namespace warden::quant {

// The block types quantize_ggml_row writes.
bool can_quantize_ggml(tensor::GgmlType t);

// One row of n values (finite; n a multiple of t's block) -> ggml_row_bytes(t, n) bytes at dst.
// importance: n non-negative per-column weights, or nullptr for uniform. Throws util::Error for a
// type it does not write, a bad n, or a non-finite value.
void quantize_ggml_row(tensor::GgmlType t, const float* x, int64_t n, const float* importance,
                       uint8_t* dst);

// quantize_ggml_row of `rows` rows at once, row r at x + r * n written at dst + r *
// ggml_row_bytes(t, n), all with the same importance: the same bytes, with the rows' statistics
// computed side by side (faster than a row at a time).
void quantize_ggml_rows(tensor::GgmlType t, const float* x, int64_t rows, int64_t n,
                        const float* importance, uint8_t* dst);

}  // namespace warden::quant
