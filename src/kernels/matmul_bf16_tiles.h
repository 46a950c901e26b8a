#pragma once
// bf16 weights on AMX-BF16 tiles: the layouts of the weight copy (repacked once at load) and of
// the activations (split per call), shared by the loader, matmul.cpp and the tile kernel
// (matmul_bf16_amx.cpp).
//
// Weights. TDPBF16PS multiplies A (16 rows x 32 bf16) by B (16 rows x 16 pairs of bf16): B row kp
// holds, for each output column n, the pair of elements k = 2kp, 2kp + 1 ("VNNI pairs"). The tile
// copy of a [rows, cols] bf16 matrix is, per 16-row panel and per block of 32 columns, one such B
// tile of 1024 bytes: element (r, k) at byte
//   (r / 16) * kb * 1024 + (k / 32) * 1024 + (k % 32 / 2) * 64 + (r % 16) * 4 + (k % 2) * 2,
// kb = ceil(cols / 32); rows past `rows` and columns past `cols` are zero. A panel's tiles are one
// contiguous stream, as the panel layout's are (kernels/matmul.h).
//
// Activations. TDPBF16PS takes bf16 activations, where every other kernel keeps them f32. Each
// x is split into hi = bf16(x) and lo = bf16(x - hi) (x - hi is exact in f32), and the kernel
// multiplies the weights by both: w * hi and w * lo are exact in f32 (8-bit by 8-bit significands)
// and |x - hi - lo| <= 2^-16 |x|, so the activations lose about what f32 accumulation loses,
// instead of bf16's 2^-8, for twice the tile multiplies. The split is per element, so a token's
// result does not depend on its batch mates.
//
// Arithmetic (the contract every M follows, hence batch invariance): per output (token t, row r),
// an f32 accumulator c starts at +0; for each 32-column block b in order, TDPBF16PS with hi
// (c += even + odd, the even and odd pair elements of the block each summed by one f32 fma chain
// over the 16 pairs in order, kernels/amx_tile.h), then the same with lo. Denormal inputs and
// results flush to zero as the instruction does. The result differs from the panel kernels' one
// fma chain over k (kernels/matmul.h), so where a matrix has a tile copy and AMX-BF16 runs, every
// call of it, M = 1 included, takes the tile kernel.
//
// Tile-only matrices. The loader keeps only the tile copy of a matrix it gives one (the panels are
// freed: a bf16 model takes its own size once, not twice); WeightMatrix::data is then null and
// ::tiles holds the weights. Such a matrix takes the tile kernel on every ISA: natively where the
// active ISA has it, else on the software tile model (matmul_bf16_amx_model.cpp), with the same
// results, so a model keeps its outputs if the ISA is changed after load (tests do).
#include <cstdint>

#include "kernels/matmul.h"

namespace warden::kernels {

constexpr int64_t kBf16TileK = 32;        // columns per B tile
constexpr int64_t kBf16TileBytes = 1024;  // one B tile: 16 pairs x 16 rows x 2 x 2 bytes
constexpr int64_t kBf16TileTokens = 16;   // tokens per A tile

// Columns rounded up to whole tiles: the row length of the split activations.
inline int64_t bf16_tile_cols(int64_t cols) {
    return (cols + kBf16TileK - 1) / kBf16TileK * kBf16TileK;
}
// Tokens rounded up to whole A tiles: the rows of the split activations.
inline int64_t bf16_tile_tokens(int64_t n) {
    return (n + kBf16TileTokens - 1) / kBf16TileTokens * kBf16TileTokens;
}
// Bytes of the tile copy of a [rows, cols] bf16 matrix.
int64_t bf16_tile_bytes(int64_t rows, int64_t cols);
// Writes the tile copy of w (BF16, packed panels, kernels/matmul.h) to out (bf16_tile_bytes(w.rows,
// w.cols) bytes, 64-byte aligned for the tile loads).
void pack_bf16_tiles(const WeightMatrix& w, void* out);
// Row r of a bf16 matrix from its tile copy (w.tiles), as f32: the lookup of a tile-only matrix.
void unpack_bf16_tile_row(const WeightMatrix& w, int64_t r, float* out);
// x [n, cols] -> hi and lo, each [bf16_tile_tokens(n), bf16_tile_cols(cols)] bf16 bits, padding
// rows and columns zero. hi = bf16(x) rounded to nearest even (a NaN stays a NaN; a finite x that
// would round to infinity is truncated instead, so it stays finite), lo = bf16(x - hi) likewise,
// or zero where x is infinite or NaN.
void split_bf16_acts(const float* x, int64_t n, int64_t cols, uint16_t* hi, uint16_t* lo);
// Whether bf16 matrices loaded now are put in the tile layout: the active ISA is AMX and the CPU
// has AMX-BF16 (kernels/cpu_features.h), or WARDEN_BF16_TILE_MODEL=1 (tests: the whole AMX-BF16
// model path on any CPU, on the software tile model, slowly). Decided at load, like the ISA.
bool bf16_tiles_wanted();

}  // namespace warden::kernels
