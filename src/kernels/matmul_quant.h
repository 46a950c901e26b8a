#pragma once
// Quantized weight layouts for kernels::matmul (WeightType Q4, Q8, FP8) and their arithmetic
// contract. Like the f32/bf16 layout, weights live in panels of 16 output rows, one contiguous
// byte stream per panel, so decode streams every weight byte exactly once, in order.
//
// Q4 (int4, group G = 32 or 128 along k, scales f16 or bf16, symmetric or asymmetric):
//   a panel is cols/G group blocks, each:
//     [16 x u16 scale d][16 x u16 min m, asym only][G/4 quads x 32 bytes of nibbles]
//   quad j of group g holds k = g*G + 4j + kk (kk = 0..3): byte lane*4 + kk has row `lane` in
//   its low nibble and row `lane + 8` in its high nibble (lane = 0..7). Value of code q:
//   symmetric  w = d * (q - 8)        (GGUF Q4_0 mapping)
//   asymmetric w = fma(q, d, m)       (GGUF Q4_1 mapping, m = -d * zero_point)
// Q8 (int8 per output channel, scale f16 or bf16): a panel is
//   [16 x u16 scale][cols/4 quads x 64 bytes]: quad j = rows 0-7 (byte lane*4 + kk) then
//   rows 8-15, k = 4j + kk, codes -128..127, w = d * q. warden's quantizer writes -127..127;
//   -128 comes only from imported files (a Q8_0 or compressed-tensors int8 block may hold it) and
//   every kernel computes it exactly (the AVX2 sign trick's pair sums peak at 2 * 128 * 127).
// Q8 group 32 (int8-g32: a scale per 32 weights, GGUF Q8_0's mapping, so llama.cpp's Q8_0
//   files import without loss): a panel is cols/32 blocks, each
//   [16 x u16 scale d][8 quads x 64 bytes], the quads as above (k = 32b + 4j + kk), w = d * q.
// FP8 (e4m3 per output channel, f32 scales): a panel is [16 x f32 scale][cols x 16 codes],
//   code of (r, k) at k*16 + r%16, w = s * e4m3(code).
// FP8 block-scaled (group G > 0, fp8-bG: a scale per G columns of a row, the layout of FP8
//   checkpoints such as DeepSeek-V3's, whose 128x128 blocks give each row's 128-column block its
//   block's scale): a panel is [nb x 16 x f32 scale][cols x 16 codes], nb = ceil(cols / G), the
//   scale of (r, block b) at b*64 + (r%16)*4, the code of (r, k) at nb*64 + k*16 + r%16,
//   w = s(r, k / G) * e4m3(code).
// Padding rows of the last panel are zero codes with zero scales.
// Row-major int4 (Q4 with row_major, symmetric, W4A8; WeightMatrix::scales): a compressed-tensors
//   checkpoint's packed codes as stored, row r at data + r * cols / 2 bytes, byte i holding the
//   codes of k = 2i (low nibble) and 2i + 1 (high), w = d * (q - 8), its group scales in their own
//   array. It computes the Q4 W4A8 contract below, so it gives the panels' outputs bit for bit:
//   one token reads eight rows per pass (kernels/matmul_kquant.h, kind kQuantKindQ4Rows), several
//   form panels per call (pack_q4_rows_panel).
// Row-major FP8 (FP8 with row_major, block-scaled, cols and group multiples of 4): a checkpoint's
//   e4m3 codes as stored, row r at data + r * cols, and its f32 scale grid (WeightMatrix::scales,
//   scale_block_rows), computing the FP8 block-scaled contract below: one token reads eight rows
//   per pass (kind kQuantKindFp8Rows), several form panels per call (pack_fp8_rows_panel).
// Q4K / Q5K / Q6K (GGUF K-quant blocks as stored) and their arithmetic: kernels/matmul_kquant.h.
//
// Arithmetic contract (identical in every ISA, so results are bit-exact across ISAs, thread
// splits and batch sizes: each token row is computed alone):
//   activations for W4A8/W8A8 are quantized per token row in blocks of 32 (quantize_acts):
//     a = max|x| over the block, xd = a / 127, xq = nearbyint(x * (127 / a)) (0 when a == 0),
//     xs = sum of the block's xq.
//     xz (optional, for the AVX2 W4A8 kernel) = the block's zero-point correction as two int16
//     halves: low = -8 * sum of xq[k] with k % 4 in {0, 1}, high = -8 * the sum over k % 4 in
//     {2, 3} (each within +-16256). Their sum is -8 * xs, so it changes no result.
//   Q4 W4A8: acc = 0; for each 32-block b (in k order), with the block's group scale d (and m):
//     i = sum_k q*xq - 8*xs (sym) or sum_k q*xq (asym)          (exact int32)
//     acc = fma(float(i), d*xd, acc); asym: acc = fma(float(xs), m*xd, acc)
//   Q4 W4A16 (act_f32): acc = fma(w(r,k), x[k], acc) over k, w as above in f32, i.e. exactly
//     the f32 matmul of the dequantized matrix.
//   Q8 W8A8: acc = fma(float(sum_k q*xq), xd, acc) per 32-block; y = acc * d.
//   Q8 group 32: acc = fma(float(sum_k q*xq), d*xd, acc) per 32-block with the block's d; y = acc.
//   FP8: four partial sums, acc[k % 4] = fma(e4m3(code), x[k], acc[k % 4]) over k (four
//        independent chains, so the kernel is not bound by the latency of one fma chain);
//        y = ((acc[0] + acc[1]) + (acc[2] + acc[3])) * s.
//   FP8 block-scaled: y = 0; per block b in k order, four chains from zero over its columns as
//        above (chain k % 4), p = (c[0] + c[1]) + (c[2] + c[3]), y = fma(p, s(r, b), y). G % 4 ==
//        0, so chain k % 4 is chain (k - b*G) % 4.
// Q4 and Q8 need cols % 32 == 0 (and % group for Q4); FP8 takes any cols (the last block of a
// block-scaled row may be partial).
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kernels/matmul.h"

namespace warden::kernels {

constexpr int64_t kActBlock = 32;  // activation quantization block (W4A8 / W8A8)

// Bytes of the packed buffer of a quantized matrix (whole panels).
int64_t quant_panel_bytes(const WeightMatrix& w);
int64_t quant_packed_bytes(const WeightMatrix& w);
// Throws util::Error when the shape does not fit the type (group not dividing cols, ...).
void check_quant_shape(const WeightMatrix& w);

// One row in code form, independent of the panel layout (what quantizers produce, what the
// GGUF/safetensors writers consume).
struct QuantRow {
    std::vector<uint8_t> q;   // Q4: 0..15; Q8: int8 bits; FP8: e4m3 codes   [cols];
                              // K-quants: the row's GGUF blocks as stored [row bytes]
    std::vector<uint16_t> d;  // Q4, Q8 group 32: per group; Q8: 1 (f16/bf16 bits)
    std::vector<uint16_t> m;  // Q4 asym: per group
    float scale = 0.0f;       // FP8 per-channel scale
    std::vector<float> s;     // FP8 block-scaled: per block of group columns
};
// Scales of an FP8 row, and scale vectors at the front of its panel: 1 per channel,
// ceil(cols / group) block-scaled.
inline int64_t fp8_blocks(const WeightMatrix& w) {
    return w.group ? (w.cols + w.group - 1) / w.group : 1;
}
// Writes row r into its panel (packed must be quant_packed_bytes(w) zeroed bytes).
void pack_quant_row(const WeightMatrix& w, int64_t r, const QuantRow& row, uint8_t* packed);
// FP8 rows as stored, without a QuantRow: the codes of rows [r0, r1) from row-major source codes
// (row r at src + (r - r0) * cols), panel by panel (whole panels by 16x16 byte transposes), and
// row r's scales (s[0] per channel, fp8_blocks(w) of them block-scaled). Together the same bytes
// as pack_quant_row.
void pack_fp8_codes(const WeightMatrix& w, int64_t r0, int64_t r1, const uint8_t* src,
                    uint8_t* packed);
void pack_fp8_scales(const WeightMatrix& w, int64_t r, const float* s, uint8_t* packed);
// Q4 rows from 4-bit codes stored row-major, without a QuantRow (a checkpoint's codes are the
// panels' codes, only in another order): 32 codes per 16-byte chunk, chunk c of row r at
// data + (r - r0) * row_stride + c * chunk_stride. Chunk byte i holds codes 2i (low nibble) and
// 2i + 1 (high), the order of compressed-tensors' packed words, or with split_halves codes i and
// i + 16, the order of GGUF Q4_0/Q4_1 blocks.
struct Q4CodeRows {
    const uint8_t* data = nullptr;
    int64_t row_stride = 0;
    int64_t chunk_stride = 16;
    bool split_halves = false;
};
// The codes of rows [r0, r1) (whole panels by SSE2 transposes) and row r's group scales (d and,
// asymmetric, m: cols / group each). Together the same bytes as pack_quant_row.
void pack_q4_codes(const WeightMatrix& w, int64_t r0, int64_t r1, const Q4CodeRows& src,
                   uint8_t* packed);
void pack_q4_scales(const WeightMatrix& w, int64_t r, const uint16_t* d, const uint16_t* m,
                    uint8_t* packed);
// One int8-g32 panel (quant_panel_bytes of an int8-g32 matrix of `cols`) from n <= 16 rows of
// GGUF Q8_0 blocks (row i at src + i * row_bytes; rows n..15 get zero codes and scales): the bytes
// pack_quant_row writes for those rows imported block for block. The multi-token Q8_0 matmul
// (WeightType::Q8_0, read in place) hands each panel it forms so to the int8-g32 kernels.
void pack_q8_0_panel(const uint8_t* src, int64_t row_bytes, int64_t n, int64_t cols,
                     uint8_t* panel);
// One int4-g32 panel with f16 scales (quant_panel_bytes of such a matrix of `cols`; asym:
// int4-g32-asym) from n <= 16 rows of GGUF Q4_0 (Q4_1 when asym) blocks, row i at src + i *
// row_bytes; rows n..15 get zero codes and scales: the bytes pack_q4_codes and pack_q4_scales
// write for those rows. The multi-token Q4_0 / Q4_1 matmul (read in place) hands each panel it
// forms so to the int4 kernels, and the loader builds a Q4_0 / Q4_1 file's panels with it.
void pack_q4_block_panel(const uint8_t* src, int64_t row_bytes, int64_t n, int64_t cols, bool asym,
                         uint8_t* panel);
// Panel p (rows [16p, 16p + 16) of w, rows past w.rows zero codes and scales) of a row-major int4
// matrix w as the panel layout of the same group and scale dtype: the bytes pack_q4_codes and
// pack_q4_scales write for those rows.
void pack_q4_rows_panel(const WeightMatrix& w, int64_t p, uint8_t* panel);
// Panel p of a row-major FP8 matrix w as the fp8-bG panel layout: the bytes pack_fp8_codes and
// pack_fp8_scales write for those rows (rows past w.rows zero codes and scales).
void pack_fp8_rows_panel(const WeightMatrix& w, int64_t p, uint8_t* panel);
// Bytes a row-major int4 or FP8 matrix reads: its codes and its scales (FP8: its scale grid).
int64_t rows_bytes(const WeightMatrix& w);
QuantRow unpack_quant_row(const WeightMatrix& w, int64_t r);
// Dequantized row (exactly the values the W4A16 / reference arithmetic uses).
void dequant_row(const WeightMatrix& w, int64_t r, float* out);
float quant_scale_to_f32(const WeightMatrix& w, uint16_t bits);

// Activation quantization of n rows of `cols` (cols % 32 == 0), see the contract above.
// Runs the active ISA's variant; every variant gives identical bytes (tested). xz may be null.
void quantize_acts(const float* x, int64_t n, int64_t cols, int8_t* xq, float* xd, int32_t* xs,
                   int32_t* xz = nullptr);
void quantize_acts_isa(Isa isa, const float* x, int64_t n, int64_t cols, int8_t* xq, float* xd,
                       int32_t* xs, int32_t* xz = nullptr);

}  // namespace warden::kernels
