#pragma once
// Linear layers: y = x * W^T for a batch of token rows. Weights are stored row-major as
// [out_features, in_features] (one output channel per row, as in HF checkpoints), activations
// and outputs are f32, accumulation is f32 whatever the weight format.
#include <cstdint>
#include <span>

#include "kernels/cpu_features.h"
#include "tensor/weight_format.h"
#include "util/thread_pool.h"

namespace warden::kernels {

// Weight types (tensor/weight_format.h), named here for the kernels' own use.
// F32/BF16: the panel layout below. Q8, Q4, FP8: quantized panel layouts, see
// kernels/matmul_quant.h (per-output-channel or per-group scales stored inside each panel).
// Q4K, Q5K, Q6K and the other GGUF block types: llama.cpp's blocks kept as stored, row after row
// (kernels/matmul_kquant.h).
using tensor::WeightType;

// Weights are stored packed in panels of kPanelRows output rows: element (r, k) lives at
// index (r / kPanelRows) * cols * kPanelRows + k * kPanelRows + r % kPanelRows; rows past
// `rows` in the last panel are zero. Every ISA (and the scalar reference) computes each
// output as one sequential fused-multiply-add chain over k in this layout, so results are
// bit-identical across ISAs, thread counts and batch sizes: a sequence's outputs never
// depend on what it is batched with.
constexpr int64_t kPanelRows = 16;

struct WeightMatrix {
    WeightType type = WeightType::F32;
    int64_t rows = 0;            // out_features
    int64_t cols = 0;            // in_features
    const void* data = nullptr;  // packed panels of f32 or bf16 (uint16_t bits), see above
    // Quantized types only (kernels/matmul_quant.h):
    int32_t group = 0;  // Q4: weights per scale (32 or 128); Q8: 0 (per channel) or 32; FP8: 0
    bool asym = false;  // Q4: w = d*q + m (q in 0..15) instead of w = d*(q - 8)
    bool bf16_scales = false;  // Q4/Q8: scales (and mins) are bf16 instead of f16
    bool act_f32 = false;      // Q4: W4A16 (dequantize in registers, f32 activations)
                               // instead of W4A8 (int8 activations, integer group dots)
    // BF16 only: the same matrix repacked for AMX-BF16 tiles (kernels/matmul_bf16_tiles.h), or
    // null. Where it is set and the ISA is AMX with AMX-BF16, every call takes the tile kernel.
    const void* tiles = nullptr;
    // F32/BF16 only: rows as a file stores them (row r at data + r * cols elements, no panels): a
    // lookup table read where it is mapped (an embedding table), which only unpack_weight_row
    // reads; a matmul refuses it.
    // Q4 (symmetric, W4A8) too: 4-bit codes as a compressed-tensors checkpoint packs them; and
    // block-scaled FP8: e4m3 codes as an FP8 checkpoint stores them. Both are read in place with
    // the panels' arithmetic (kernels/matmul_quant.h, "Row-major int4", "Row-major FP8").
    bool row_major = false;
    // Q4 row_major: row r's cols / group scales (u16 f16 or bf16 bits) at scales + r * cols /
    // group elements. FP8 row_major: the checkpoint's f32 scale grid, the scale of row r's block b
    // at scales + (r / scale_block_rows) * ceil(cols / group) + b.
    const void* scales = nullptr;
    int64_t scale_block_rows = 0;
};

// Elements of the packed buffer for a [rows, cols] matrix (rows rounded up to a panel).
inline int64_t packed_weight_elems(int64_t rows, int64_t cols) {
    return (rows + kPanelRows - 1) / kPanelRows * kPanelRows * cols;
}
inline int64_t packed_index(int64_t r, int64_t k, int64_t cols) {
    return (r / kPanelRows) * cols * kPanelRows + k * kPanelRows + r % kPanelRows;
}
// Writes row r (cols f32 values; rounded to bf16 for BF16) into its panel slots.
void pack_weight_row(WeightType t, int64_t cols, int64_t r, const float* row, void* packed);
// Writes rows [r0, r1) of a BF16 matrix from bf16 source rows (row r at src + (r - r0) * cols
// elements, any alignment) panel by panel: the same bytes as pack_weight_row of their f32 values
// (NaNs quieted as f32_to_bf16 does), without the round trip through f32.
void pack_bf16_rows(int64_t cols, int64_t r0, int64_t r1, const uint8_t* src, void* packed);
// Reads row r back as f32 (embedding lookups, tests).
void unpack_weight_row(const WeightMatrix& w, int64_t r, float* out);

// An empty view carrying format f and a [rows, cols] shape (for layout sizes and shape checks).
WeightMatrix weight_layout(const tensor::WeightFormat& f, int64_t rows, int64_t cols);
// Bytes of a [rows, cols] matrix in format f (packed, whole panels).
int64_t weight_bytes(const tensor::WeightFormat& f, int64_t rows, int64_t cols);

// y[n, w.rows] = x[n, w.cols] * W^T. Splits output rows over the pool in whole panels; for
// n > 1 each weight tile is loaded once and reused across token rows (prefill is
// compute-bound, decode is bandwidth-bound: n == 1 must stream each weight byte exactly once).
// The one-matrix case of matmul_multi below.
void matmul(const WeightMatrix& w, const float* x, int64_t n, float* y, util::ThreadPool& pool);

// Several matmuls that share their input x ([n, cols]; every w.cols == cols), e.g. q/k/v or
// gate/up: y_i[n, w_i.rows] = x * W_i^T, any weight types mixed. Results are bit-identical to
// separate matmul() calls (every output is computed alone); the difference is cost:
// one activation quantization for all int8-activation matrices and one pool dispatch for the
// lot, with the panels of all matrices handed out to the threads in chunks from a shared
// counter (a thread slowed by another process on its core does less of the work instead of
// holding up the others at the join).
struct MatmulOut {
    const WeightMatrix* w;
    float* y;
};
void matmul_multi(std::span<const MatmulOut> outs, const float* x, int64_t n,
                  util::ThreadPool& pool);

// Several matmul_multi calls in one pool dispatch: group g computes its outs from its own input
// x [n, cols] (cols: the group's common w.cols; groups may differ). For the MoE layer, whose
// experts each take their own gathered rows: a batch-1 step's expert matmuls were ~2 small
// dispatches per expert, each with its barrier. Bit-identical to one matmul() per matrix; every
// group's activations are quantized once. Groups with n <= 0 or no outs are skipped.
struct MatmulGroup {
    std::span<const MatmulOut> outs;
    const float* x;
    int64_t n;
};
void matmul_grouped(std::span<const MatmulGroup> groups, util::ThreadPool& pool);

// Same computation with an explicit ISA on rows [row_begin, row_end) of W, single-threaded.
// Used by tests to compare every variant against Isa::Scalar.
void matmul_rows(Isa isa, const WeightMatrix& w, const float* x, int64_t n, float* y,
                 int64_t row_begin, int64_t row_end);

}  // namespace warden::kernels
