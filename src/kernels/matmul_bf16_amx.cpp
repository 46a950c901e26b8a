// AMX-BF16 GEMM for bf16 weights with a tile copy (layouts and the arithmetic contract:
// kernels/matmul_bf16_tiles.h). Tiles (kernels/amx_tile.h): the f32 sums C of 16 tokens x 16 rows
// in tiles 0-3 (up to 4 token groups, 64 tokens, share each weight tile), the activations' hi and
// lo halves A in tiles 4 and 5 (16 tokens x 32 columns), the weights B in tile 6 (a 1024-byte tile
// of the copy, read in place). Unlike the INT8 kernels nothing is scaled per block, so C stays in
// the tiles across the whole row of blocks and is stored once per panel and token chunk. Every
// tile has 16 rows: the split activations are padded to whole A tiles with zero rows, whose sums
// are never written out; a token's sums do not depend on the other rows of its tile.
//
// Compiled twice: natively (this file, -mamx-* flags, CMakeLists.txt) and on the tile model
// (matmul_bf16_amx_model.cpp, WARDEN_AMX_EMULATE), so the kernel runs and is checked against the
// contract on any CPU.
//
// ODR: helpers live in the anonymous namespace; only amx_tile.h and kernels_internal.h.
#include "kernels/amx_tile.h"
#include "kernels/kernels_internal.h"

#ifdef WARDEN_AMX_EMULATE
#define WARDEN_BF16_AMX_ENTRY mm_bf16_amx_tiles_emulated
#else
#define WARDEN_BF16_AMX_ENTRY mm_bf16_amx_tiles
#endif

namespace warden::kernels::detail {
namespace {

using Tiles = amx::Tiles;
using amx::with_group;

constexpr int64_t kNr = 16;                // tokens per A/C tile, rows per panel
constexpr int kGroups = 4;                 // token groups (C tiles) per chunk
constexpr int64_t kChunk = kGroups * kNr;  // tokens per chunk
constexpr int64_t kTileK = 32, kTileBytes = 1024;
constexpr int kTileHi = 4, kTileLo = 5, kTileB = 6;

void gemm(const Bf16TileArgs& a, int64_t r0, int64_t r1) {
    const int64_t kb = (a.cols + kTileK - 1) / kTileK;
    const int64_t lda = kb * kTileK * 2;  // bytes per token row of hi / lo
    const int64_t panel_bytes = kb * kTileBytes;
    const int64_t np = (a.n + kNr - 1) / kNr * kNr;  // tokens padded to whole tiles
    amx::TileConfig cfg;
    for (int t = 0; t < kGroups; ++t) {
        cfg.rows[t] = kNr;
        cfg.colsb[t] = 64;
    }
    cfg.rows[kTileHi] = cfg.rows[kTileLo] = cfg.rows[kTileB] = kNr;
    cfg.colsb[kTileHi] = cfg.colsb[kTileLo] = cfg.colsb[kTileB] = 64;
    Tiles::config(cfg);
    alignas(64) float cbuf[kNr][kNr];
    const auto* hi = reinterpret_cast<const uint8_t*>(a.xhi);
    const auto* lo = reinterpret_cast<const uint8_t*>(a.xlo);
    for (int64_t t0 = 0; t0 < np; t0 += kChunk) {
        const int groups = static_cast<int>((np - t0 < kChunk ? np - t0 : kChunk) / kNr);
        for (int64_t p = r0 / kNr; p * kNr < r1; ++p) {
            const uint8_t* panel = a.tiles + p * panel_bytes;
            const int64_t base = p * kNr;
            const int64_t j0 = r0 > base ? r0 - base : 0, j1 = r1 - base < kNr ? r1 - base : kNr;
            for (int g = 0; g < groups; ++g) with_group(g, [&]<int G>() { Tiles::zero<G>(); });
            for (int64_t b = 0; b < kb; ++b) {
                Tiles::load<kTileB>(panel + b * kTileBytes, 64);
                for (int g = 0; g < groups; ++g)
                    with_group(g, [&]<int G>() {
                        const int64_t at = (t0 + g * kNr) * lda + b * kTileK * 2;
                        Tiles::load<kTileHi>(hi + at, lda);
                        Tiles::dpbf16ps<G, kTileHi, kTileB>();
                        Tiles::load<kTileLo>(lo + at, lda);
                        Tiles::dpbf16ps<G, kTileLo, kTileB>();
                    });
            }
            for (int g = 0; g < groups; ++g) {
                with_group(g, [&]<int G>() { Tiles::store<G>(cbuf, 64); });
                for (int64_t i = 0; i < kNr; ++i) {
                    const int64_t t = t0 + g * kNr + i;
                    if (t >= a.n) break;
                    float* y = a.y + t * a.ldy + base;
                    for (int64_t j = j0; j < j1; ++j) y[j] = cbuf[i][j];
                }
            }
        }
    }
    Tiles::release();
}

}  // namespace

void WARDEN_BF16_AMX_ENTRY(const Bf16TileArgs& a, int64_t r0, int64_t r1) {
    if (a.n <= 0 || r0 >= r1) return;
    gemm(a, r0, r1);
}

}  // namespace warden::kernels::detail
