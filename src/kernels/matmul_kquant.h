#pragma once
// K-quant weight layouts (WeightType Q4K, Q5K, Q6K): llama.cpp's GGUF super-blocks of 256
// weights, kept byte for byte as the file has them, one row after another:
//   row r at r * row_bytes, row_bytes = cols / 256 * block bytes (Q4_K 144, Q5_K 176, Q6_K 210),
//   rows rounded up to whole panels of 16 (kernels/matmul.h); padding rows are zero bytes (zero
//   scales, so their outputs are 0).
// A row of K-quant blocks is already one contiguous stream per output row, which is what decode
// wants (a panel of 16 rows is 16 consecutive row streams), and loading it is a copy: the file's
// codes and scales are what the kernels read, every weight dequantizes exactly to llama.cpp's
// dequantize_row_q4_K / q5_K / q6_K value (kquant_dequant_row, tensor::dequantize_row).
//   Q4_K block: [f16 d][f16 dmin][12 bytes: 8 6-bit scales sc, 8 6-bit mins m][128 bytes of
//     nibbles]; weight k of sub-block j (32 weights, j = 0..7) is d*sc_j * q - dmin*m_j, q the
//     low (j even) or high (j odd) nibble of byte (j/2)*32 + k%32.
//   Q5_K: as Q4_K with [32 bytes qh] before the nibbles: q += 16 * bit j of qh[k%32].
//   Q6_K block: [128 ql][64 qh][16 int8 scales][f16 d]: weight = d*sc * (q - 32), q 6 bits, a
//     scale per 16 weights (layout: llama.cpp's dequantize_row_q6_K).
//
// Arithmetic contract (identical in every ISA: bit-exact across ISAs, thread splits and batch
// sizes, each token row computed alone). Activations are quantize_acts' int8 blocks of 32
// (kernels/matmul_quant.h: xq, xd, xs), so one activation block is one Q4_K/Q5_K sub-block, or
// two Q6_K scale blocks. Eight float accumulators acc[j], one per 32-block position j inside the
// super-block, start at 0; for each super-block s in k order and each j (integer sums exact):
//   Q4_K/Q5_K: i = sc_j * sum q*xq,  acc[j] = fma(float(i), d*xd, acc[j]),
//              acc[j] = fma(float(m_j * xs), -(dmin*xd), acc[j])
//   Q6_K:      i = sc_2j * sum_{first 16} (q-32)*xq + sc_2j+1 * sum_{last 16} (q-32)*xq,
//              acc[j] = fma(float(i), d*xd, acc[j])
// (xd, xs: activation block 8s + j), then y = ((acc0 + acc1) + (acc2 + acc3)) + ((acc4 + acc5) +
// (acc6 + acc7)). Eight independent lanes are what an 8-wide float vector holds, so the SIMD
// kernels keep one super-block's sums in one register.
#include <cstdint>

#include "kernels/matmul.h"

namespace warden::kernels {

// Block traits (tensor/weight_format.h), named here for the kernels' own use.
using tensor::is_kquant;
using tensor::kKQuantBlock;
using tensor::kquant_block_bytes;
using tensor::kquant_type_name;

// Bytes of one row (cols / 256 super-blocks).
int64_t kquant_row_bytes(const WeightMatrix& w);
// Row r's blocks (read-only view into w.data).
const uint8_t* kquant_row(const WeightMatrix& w, int64_t r);
// Row r dequantized exactly as llama.cpp's dequantize_row_* does.
void kquant_dequant_row(const WeightMatrix& w, int64_t r, float* out);

}  // namespace warden::kernels
