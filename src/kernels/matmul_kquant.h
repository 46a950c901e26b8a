#pragma once
// GGUF block weight layouts (WeightType Q4K, Q5K, Q6K and the other is_kquant types): llama.cpp's
// blocks (super-blocks of 256 weights, or blocks of 32), kept byte for byte as the file has them,
// one row after another: row r at r * row_bytes, row_bytes = cols / block weights * block bytes
// (Q4_K 144, Q5_K 176, Q6_K 210, Q2_K 84, Q3_K 110, IQ4_XS 136; Q5_0 22, Q5_1 24, Q8_0 34,
// IQ4_NL 18),
//   rows rounded up to whole panels of 16 (kernels/matmul.h) where a matrix owns its bytes; padding
//   rows are zero bytes (zero scales, so their outputs are 0). The kernels read rows below w.rows
//   only, so a GGUF model's matrix reads the mapped file in place (model::Matrix::mapped).
// A row of K-quant blocks is already one contiguous stream per output row, which is what decode
// wants (a panel of 16 rows is 16 consecutive row streams), and loading it copies nothing: the
// file's codes and scales are what the kernels read, every weight dequantizes exactly to
// llama.cpp's dequantize_row_q4_K / q5_K / q6_K value (kquant_dequant_row, tensor::dequantize_row).
//   Q4_K block: [f16 d][f16 dmin][12 bytes: 8 6-bit scales sc, 8 6-bit mins m][128 bytes of
//     nibbles]; weight k of sub-block j (32 weights, j = 0..7) is d*sc_j * q - dmin*m_j, q the
//     low (j even) or high (j odd) nibble of byte (j/2)*32 + k%32.
//   Q5_K: as Q4_K with [32 bytes qh] before the nibbles: q += 16 * bit j of qh[k%32].
//   Q6_K block: [128 ql][64 qh][16 int8 scales][f16 d]: weight = d*sc * (q - 32), q 6 bits, a
//     scale per 16 weights (layout: llama.cpp's dequantize_row_q6_K).
//
// The other GGUF block types follow the same rules (one row of blocks after another, as stored):
//   Q2_K block (256): [16 bytes: scale (low nibble), min (high nibble) per 16 weights][64 qs]
//     [f16 d][f16 dmin]; weight l of 32-block j: d*sc*q - dmin*m, q = (qs[32*(j/4) + l] >>
//     2*(j%4)) & 3, sc/m of byte 2j (l < 16) or 2j+1.
//   Q3_K block (256): [32 hmask][64 qs][12 bytes: 16 6-bit scales][f16 d]; weight l of 32-block
//     j: d*(sc-32)*(q - 4*(1 - bit j of hmask[l])), q as Q2_K, scale 2j (l < 16) or 2j+1.
//   IQ4_XS block (256): [f16 d][u16 scales_h][4 scales_l][128 qs]; 32-block j: 6-bit scale ls,
//     weight l: d*(ls-32)*kv[nibble], kv the IQ4_NL code book, nibble l of 16 bytes at 16j (low
//     nibbles for l < 16, high ones for l >= 16).
//   Q5_0 (32): [f16 d][u32 qh][16 qs]: d*(q - 16), q = nibble | 16 * bit l of qh (nibbles as
//     IQ4_XS); Q5_1 (32): [f16 d][f16 m][u32 qh][16 qs]: d*q + m; IQ4_NL (32): [f16 d][16 qs]:
//     d*kv[nibble]; Q8_0 (32): [f16 d][32 int8 q]: d*q.
//
// Arithmetic contract (identical in every ISA: bit-exact across ISAs, thread splits and batch
// sizes, each token row computed alone). Activations are quantize_acts' int8 blocks of 32
// (kernels/matmul_quant.h: xq, xd, xs), so one activation block is one 32-block of weights. Eight
// float accumulators acc[j] start at 0; 32-block b of the row (in k order; b = 8s + j inside
// super-block s) adds to acc[b % 8], with xd, xs of activation block b (integer sums exact):
//   Q4_K/Q5_K: i = sc_j * sum q*xq,  acc = fma(float(i), d*xd, acc),
//              acc = fma(float(m_j * xs), -(dmin*xd), acc)
//   Q6_K:      i = sc_2j * sum_{first 16} (q-32)*xq + sc_2j+1 * sum_{last 16} (q-32)*xq,
//              acc = fma(float(i), d*xd, acc)
//   Q3_K:      as Q6_K with (sc - 32) and Q3_K's signed q
//   Q2_K:      i as Q6_K with q, mx = m_2j * sum_{first 16} xq + m_2j+1 * sum_{last 16} xq,
//              acc = fma(float(i), d*xd, acc), acc = fma(float(mx), -(dmin*xd), acc)
//   IQ4_XS:    i = (ls_j - 32) * sum kv*xq, acc = fma(float(i), d*xd, acc)
//   Q5_0:      i = sum q*xq - 16*xs, acc = fma(float(i), d*xd, acc)
//   Q5_1:      acc = fma(float(sum q*xq), d*xd, acc), acc = fma(float(xs), m*xd, acc)
//   IQ4_NL:    acc = fma(float(sum kv*xq), d*xd, acc)
// then y = ((acc0 + acc1) + (acc2 + acc3)) + ((acc4 + acc5) + (acc6 + acc7)). Eight independent
// lanes are what an 8-wide float vector holds, so the SIMD kernels keep eight blocks' sums in one
// register (32-block types: a row whose block count is not a multiple of 8 ends with single
// blocks, each computed as above in its lane).
// Q8_0, Q4_0 and Q4_1 are the exceptions: they compute int8-g32's, int4-g32's and
// int4-g32-asym's contracts (kernels/matmul_quant.h: one chain per row, block by block in k
// order), so a file gives the same outputs bit for bit whether its blocks are read in place or
// copied into panels; the SIMD kernels reduce eight rows' block sums into one vector, a lane per
// row, and over several tokens hand panels formed per call (kernels::pack_q8_0_panel,
// pack_q4_block_panel) to the panel kernels. The row-major int4 and FP8 layouts of
// kernels/matmul_quant.h run here too (kinds kQuantKindQ4Rows, kQuantKindFp8Rows), the same way.
#include <cstdint>
#include <optional>

#include "kernels/matmul.h"

namespace warden::kernels {

// Block traits (tensor/weight_format.h), named here for the kernels' own use.
using tensor::is_kquant;
using tensor::kKQuantBlock;
using tensor::kquant_block_bytes;
using tensor::kquant_block_elems;
using tensor::kquant_from_ggml;
using tensor::kquant_ggml_type;
using tensor::kquant_type_name;

// Bytes of one row (cols / block weights blocks).
int64_t kquant_row_bytes(const WeightMatrix& w);
// Row r's blocks (read-only view into w.data).
const uint8_t* kquant_row(const WeightMatrix& w, int64_t r);
// Row r dequantized exactly as llama.cpp's dequantize_row_* does.
void kquant_dequant_row(const WeightMatrix& w, int64_t r, float* out);
// detail::QuantArgs::kind of an is_kquant type.
int kquant_kind(WeightType t);

}  // namespace warden::kernels
