// AMX-INT8 GEMMs for W4A8 and W8A8 weights over several tokens (layouts and the arithmetic
// contract: kernels/matmul_quant.h), bit-identical to the AVX-512 VNNI kernels and the scalar
// reference: each 32-block's integer dot sum (exact, whatever unit adds it) comes from a tile
// multiply, and the float steps per output are the contract's, in its order, on zmm registers.
//
// Tiles (kernels/amx_tile.h): activations are A (16 tokens x the block's 32 int8 codes, read in
// place from quantize_acts' rows), weights are B (8 rows of 64 bytes: row j holds the 4 codes
// k = 4j..4j+3 of each of the panel's 16 output rows), the int32 sums C (16 tokens x 16 rows).
// One TDPB*D per 32-block and 16 tokens: the contract scales every 32-block's sum by its own
// activation scale, so a block's sums must leave the tile before the next block's are added.
// Up to 4 token groups (C in tiles 0-3) share each B tile; A is tile 4 (16 tokens) or 5 (the
// last, ragged group), B tile 6.
//
// Weight layout: the int8 panels (per channel and group 32) already are B tiles: a quad of
// matmul_quant.h is 16 rows x 4 codes, row r's codes at bytes 4r..4r+3, exactly a B row, and a
// 32-block's 8 quads are contiguous (stride 64). They are read in place: no repacking, no extra
// memory. The int4 panels hold two rows per byte; each 32-block of a panel is widened to one
// 512-byte B tile of codes 0..15 once per 64 tokens (four ands, two shifts and four shuffles per
// block, against 4 tile multiplies and 64 token steps), also without a second copy of the weights:
// a load-time int8 copy would double-and-a-half the int4 weight memory while batch-1 decode keeps
// reading the nibble panels.
// Signedness: int8 weights x int8 activations is TDPBSSD; int4 codes (0..15) are unsigned, so
// TDPBSUD (signed A, unsigned B), and symmetric int4 adds -8 * xs as the contract says.
//
// Compiled twice: natively (this file, -mamx-* and the AVX-512 flags, CMakeLists.txt) and in the
// tests on SIMDe and the tile model (tests/kernels/test_matmul_quant_amx_emulated.cpp, with
// WARDEN_AMX_EMULATE), so the kernel runs and is checked bit for bit on any CPU.
//
// ODR: helpers live in the anonymous namespace; only intrinsics headers and kernels_internal.h.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include "kernels/amx_tile.h"
#include "kernels/avx512_compat.h"
#include "kernels/cpu_features.h"
#include "kernels/kernels_internal.h"

#ifdef WARDEN_AMX_EMULATE
#define WARDEN_AMX_TILES_ENTRY mm_quant_amx_tiles_emulated
#else
#define WARDEN_AMX_TILES_ENTRY mm_quant_amx_tiles
#endif

namespace warden::kernels::detail {
#ifdef WARDEN_AMX_EMULATE
void mm_quant_amx_tiles_emulated(const QuantArgs& a, int64_t r0, int64_t r1);
#endif
namespace {

using Tiles = amx::Tiles;
using amx::with_group;

constexpr int64_t kNr = 16;
constexpr int kGroups = 4;                 // token groups (C tiles) per chunk
constexpr int64_t kChunk = kGroups * kNr;  // tokens per chunk
constexpr int kTileA = 4, kTileALast = 5, kTileB = 6;
// Fewest tokens for which mm_quant_amx takes the tiles; fewer go to the VNNI kernels (at batch 1
// their tuned panel pairs and prefetch serve decode, which is memory-bound). Both give the same
// bits, so the threshold never changes a result. Not tuned: no AMX host was at hand.
constexpr int64_t kAmxMinTokens = 8;

enum class Fmt { Q4Sym, Q4Asym, Q8, Q8G32 };

// The tile shapes of a chunk of `groups` token groups, the last with last_rows tokens; loaded
// only when it changes (the ragged chunk at the end of a call).
struct ChunkConfig {
    amx::TileConfig cur;
    bool loaded = false;
    void set(int groups, int last_rows) {
        amx::TileConfig c;
        for (int g = 0; g < groups; ++g) {
            c.rows[g] = static_cast<uint8_t>(g == groups - 1 ? last_rows : kNr);
            c.colsb[g] = 64;
        }
        c.rows[kTileA] = kNr;
        c.colsb[kTileA] = 32;
        c.rows[kTileALast] = static_cast<uint8_t>(last_rows);
        c.colsb[kTileALast] = 32;
        c.rows[kTileB] = 8;
        c.colsb[kTileB] = 64;
        if (loaded && __builtin_memcmp(&c, &cur, sizeof c) == 0) return;
        Tiles::config(c);
        cur = c;
        loaded = true;
    }
};

// C tile G = A x B for one token group: A (the group's 16 or fewer tokens, one 32-code block
// each, rows `lda` bytes apart) loaded into tile 4, or 5 for the last group.
template <int G, bool kUnsignedB>
inline void group_dot(bool last, const int8_t* xa, int64_t lda) {
    Tiles::zero<G>();
    if (last) {
        Tiles::load<kTileALast>(xa, lda);
        if constexpr (kUnsignedB)
            Tiles::dpbsud<G, kTileALast, kTileB>();
        else
            Tiles::dpbssd<G, kTileALast, kTileB>();
    } else {
        Tiles::load<kTileA>(xa, lda);
        if constexpr (kUnsignedB)
            Tiles::dpbsud<G, kTileA, kTileB>();
        else
            Tiles::dpbssd<G, kTileA, kTileB>();
    }
}

// 256 bytes of int4 quads (one 32-block of a panel: 8 quads, each 16 rows x 4 columns as
// nibbles, matmul_quant.h) -> the block's B tile of codes 0..15 (8 rows x 64 bytes). Quad j's
// low nibbles are rows 0-7 in B row j's first 32 bytes, in order; its high nibbles rows 8-15.
inline void unpack_q4_block(const uint8_t* q, uint8_t* b) {
    const zi m4 = WZ(mm512_set1_epi8)(0x0f);
    for (int jj = 0; jj < 4; ++jj) {  // quads 2jj and 2jj + 1
        const zi v = WZ(mm512_loadu_si512)(q + 64 * jj);
        const zi lo = WZ(mm512_and_si512)(v, m4);
        const zi hi = WZ(mm512_and_si512)(WZ(mm512_srli_epi16)(v, 4), m4);
        WZ(mm512_store_si512)(b + 128 * jj, WZ(mm512_shuffle_i64x2)(lo, hi, 0x44));
        WZ(mm512_store_si512)(b + 128 * jj + 64, WZ(mm512_shuffle_i64x2)(lo, hi, 0xee));
    }
}

// 16 u16 scales (f16 or bf16 bits) -> 16 f32, row r in lane r.
inline zf load_scales16(const uint8_t* p, bool bf16) {
    return bf16 ? bf16x16_to_f32(p) : f16x16_to_f32(p);
}

// Rows [r0, r1) for all a.n tokens, in chunks of up to 64 tokens.
template <Fmt F>
void gemm(const QuantArgs& a, int64_t r0, int64_t r1) {
    constexpr bool kQ4 = F == Fmt::Q4Sym || F == Fmt::Q4Asym, kAsym = F == Fmt::Q4Asym;
    const int64_t cols = a.cols, nb = cols / 32;
    const int64_t G = kQ4 ? a.group : 32, spg = G / 32, gb = 32 + (kAsym ? 32 : 0) + G * 8;
    const int64_t pb = kQ4 ? cols / G * gb : F == Fmt::Q8 ? 32 + cols * 16 : nb * kQ8BlockBytes;
    alignas(64) uint8_t bbuf[8 * 64];
    alignas(64) int32_t cbuf[kGroups][kNr][kNr];
    alignas(64) float acc[kChunk][kNr];
    ChunkConfig cfg;
    for (int64_t t0 = 0; t0 < a.n; t0 += kChunk) {
        const int64_t tn = a.n - t0 < kChunk ? a.n - t0 : kChunk;
        const int groups = static_cast<int>((tn + kNr - 1) / kNr);
        const int last_rows = static_cast<int>(tn - (groups - 1) * kNr);
        cfg.set(groups, last_rows);
        for (int64_t p = r0 / kNr; p * kNr < r1; ++p) {
            const uint8_t* panel = a.data + p * pb;
            const int64_t base = p * kNr;
            const int64_t j0 = r0 > base ? r0 - base : 0, j1 = r1 - base < kNr ? r1 - base : kNr;
            for (int64_t i = 0; i < tn; ++i) WZ(mm512_store_ps)(acc[i], WZ(mm512_setzero_ps)());
            for (int64_t b = 0; b < nb; ++b) {
                zf d = WZ(mm512_setzero_ps)(), m = WZ(mm512_setzero_ps)();
                const uint8_t* wb;
                if constexpr (kQ4) {
                    const uint8_t* blk = panel + b / spg * gb;
                    d = load_scales16(blk, a.bf16_scales);
                    if constexpr (kAsym) m = load_scales16(blk + 32, a.bf16_scales);
                    unpack_q4_block(blk + (kAsym ? 64 : 32) + b % spg * 256, bbuf);
                    wb = bbuf;
                } else if constexpr (F == Fmt::Q8) {
                    wb = panel + 32 + b * 512;
                } else {
                    const uint8_t* blk = panel + b * kQ8BlockBytes;
                    d = load_scales16(blk, a.bf16_scales);
                    wb = blk + 32;
                }
                Tiles::load<kTileB>(wb, 64);
                for (int g = 0; g < groups; ++g)
                    with_group(g, [&]<int Gt>() {
                        group_dot<Gt, kQ4>(g == groups - 1, a.xq + (t0 + g * kNr) * cols + b * 32,
                                           cols);
                    });
                for (int g = 0; g < groups; ++g)
                    with_group(g, [&]<int Gt>() { Tiles::store<Gt>(cbuf[Gt], 64); });
                for (int64_t i = 0; i < tn; ++i) {
                    const int64_t xb = (t0 + i) * nb + b;
                    zi s = WZ(mm512_load_si512)(cbuf[i / kNr][i % kNr]);
                    if constexpr (F == Fmt::Q4Sym)
                        s = WZ(mm512_add_epi32)(s, WZ(mm512_set1_epi32)(-8 * a.xs[xb]));
                    const zf xdv = WZ(mm512_set1_ps)(a.xd[xb]);
                    zf v = WZ(mm512_load_ps)(acc[i]);
                    if constexpr (F == Fmt::Q8)
                        v = fmadd(i32_to_f32(s), xdv, v);
                    else
                        v = fmadd(i32_to_f32(s), WZ(mm512_mul_ps)(d, xdv), v);
                    if constexpr (kAsym)
                        v = fmadd(WZ(mm512_set1_ps)(static_cast<float>(a.xs[xb])),
                                  WZ(mm512_mul_ps)(m, xdv), v);
                    WZ(mm512_store_ps)(acc[i], v);
                }
            }
            for (int64_t i = 0; i < tn; ++i) {
                zf v = WZ(mm512_load_ps)(acc[i]);
                if constexpr (F == Fmt::Q8)
                    v = WZ(mm512_mul_ps)(v, load_scales16(panel, a.bf16_scales));
                store_lanes(v, a.y + (t0 + i) * a.ldy + base, j0, j1);
            }
        }
    }
    if (cfg.loaded) Tiles::release();
}

}  // namespace

void WARDEN_AMX_TILES_ENTRY(const QuantArgs& a, int64_t r0, int64_t r1) {
    if (a.n <= 0 || r0 >= r1) return;
    if (a.kind == 1)
        a.group == 0 ? gemm<Fmt::Q8>(a, r0, r1) : gemm<Fmt::Q8G32>(a, r0, r1);
    else
        a.asym ? gemm<Fmt::Q4Asym>(a, r0, r1) : gemm<Fmt::Q4Sym>(a, r0, r1);
}

#ifndef WARDEN_AMX_EMULATE
void mm_quant_amx(const QuantArgs& a, int64_t r0, int64_t r1) {
    if (amx_quant_kind(a) && a.n >= kAmxMinTokens) {
        mm_quant_amx_tiles(a, r0, r1);
        return;
    }
    mm_quant_avx512(a, r0, r1);
}

const MatmulTable& matmul_amx() {
    static const MatmulTable t = [] {
        MatmulTable m = matmul_avx512();
        m.quant = mm_quant_amx;
        if (amx_bf16_supported()) m.bf16_tiles = mm_bf16_amx_tiles;
        return m;
    }();
    return t;
}

void amx_tile_op_native(int op, int c_rows, int c_colsb, int a_colsb, const void* a, int64_t lda,
                        const void* b, int64_t ldb, void* c, int64_t ldc) {
    amx::tile_op<amx::Native>(op, c_rows, c_colsb, a_colsb, a, lda, b, ldb, c, ldc);
}
#endif

}  // namespace warden::kernels::detail
