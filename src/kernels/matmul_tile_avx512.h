#pragma once
// The f32 register tile shared by the AVX-512 matmul files (matmul_avx512.cpp: f32/bf16 weights;
// matmul_quant_avx512.cpp: W4A16, whose blocks are dequantized to f32 first): up to kMt tokens x
// 2 panels of 16 rows, every output ONE sequential chain acc = fma(W[r, k], x[t, k], acc) in k
// order (the contract of kernels/matmul.h and of W4A16 in kernels/matmul_quant.h).
// Include only from *_avx512.cpp files, after kernels/avx512_compat.h: everything here has internal
// linkage, so each file (and its SIMDe-emulated test copy) has its own.
#include <cstdint>

#include "kernels/avx512_compat.h"

namespace warden::kernels::detail {
namespace {

namespace tile512 {

constexpr int64_t kNr = 16;  // rows per panel = lanes of a zmm = kernels::kPanelRows
constexpr int kMt = 12;      // tokens per register tile

// A panel's 16 weights at one column, as f32 (bf16 bits widened exactly).
inline zf panel_weights(const float* p) {
    return WZ(mm512_loadu_ps)(p);
}
inline zf panel_weights(const uint16_t* p) {
    return bf16x16_to_f32(p);
}

// C[M tokens][NP panels x 16 rows] = the chains continued over kc more columns. p: the first
// panel's [kc][16] slice (used in place), the next panel ps elements further; x: token 0's
// columns of this block (tokens ldx apart); y: token 0, the first panel's row 0 (tokens ldy
// apart), all NP x 16 rows present (tile() hands partial panels a scratch tile). accumulate: the
// chains already hold earlier columns' terms in y. M and NP are template parameters and every
// loop over them is unrolled, so the accumulators live in registers.
template <int M, int NP, typename W>
void micro(int64_t kc, const W* p, int64_t ps, const float* x, int64_t ldx, float* y, int64_t ldy,
           bool accumulate) {
    zf c[M][NP];
#pragma GCC unroll 16
    for (int m = 0; m < M; ++m)
#pragma GCC unroll 2
        for (int i = 0; i < NP; ++i)
            c[m][i] =
                accumulate ? WZ(mm512_loadu_ps)(y + m * ldy + i * kNr) : WZ(mm512_setzero_ps)();
    for (int64_t k = 0; k < kc; ++k) {
        zf w[NP];
#pragma GCC unroll 2
        for (int i = 0; i < NP; ++i) w[i] = panel_weights(p + i * ps + k * kNr);
#pragma GCC unroll 16
        for (int m = 0; m < M; ++m) {
            const zf xb = WZ(mm512_set1_ps)(x[m * ldx + k]);
#pragma GCC unroll 2
            for (int i = 0; i < NP; ++i) c[m][i] = fmadd(w[i], xb, c[m][i]);
        }
    }
#pragma GCC unroll 16
    for (int m = 0; m < M; ++m)
#pragma GCC unroll 2
        for (int i = 0; i < NP; ++i) WZ(mm512_storeu_ps)(y + m * ldy + i * kNr, c[m][i]);
}

template <int NP, typename W>
void micro_any(int mt, int64_t kc, const W* p, int64_t ps, const float* x, int64_t ldx, float* y,
               int64_t ldy, bool acc) {
    switch (mt) {
        case 12:
            micro<12, NP>(kc, p, ps, x, ldx, y, ldy, acc);
            break;
        case 11:
            micro<11, NP>(kc, p, ps, x, ldx, y, ldy, acc);
            break;
        case 10:
            micro<10, NP>(kc, p, ps, x, ldx, y, ldy, acc);
            break;
        case 9:
            micro<9, NP>(kc, p, ps, x, ldx, y, ldy, acc);
            break;
        case 8:
            micro<8, NP>(kc, p, ps, x, ldx, y, ldy, acc);
            break;
        case 7:
            micro<7, NP>(kc, p, ps, x, ldx, y, ldy, acc);
            break;
        case 6:
            micro<6, NP>(kc, p, ps, x, ldx, y, ldy, acc);
            break;
        case 5:
            micro<5, NP>(kc, p, ps, x, ldx, y, ldy, acc);
            break;
        case 4:
            micro<4, NP>(kc, p, ps, x, ldx, y, ldy, acc);
            break;
        case 3:
            micro<3, NP>(kc, p, ps, x, ldx, y, ldy, acc);
            break;
        case 2:
            micro<2, NP>(kc, p, ps, x, ldx, y, ldy, acc);
            break;
        default:
            micro<1, NP>(kc, p, ps, x, ldx, y, ldy, acc);
            break;
    }
}

// One register tile: mt tokens x np (1 or 2) panels from row pr, of which rows [r0, r1) exist
// (relative to the matrix). A panel cut by the row range or the matrix end runs on a scratch tile
// holding its rows (the others zero) and is copied back, so micro() itself never masks. (With the
// partial-panel copies inside micro(), GCC 12 kept half of the 24 accumulators on the stack, a
// load and a store around every other FMA: 115 instead of ~190 GFLOP/s per core.)
template <typename W>
void tile(int mt, int np, int64_t kc, const W* p, int64_t ps, const float* x, int64_t ldx, float* y,
          int64_t ldy, int64_t pr, int64_t r0, int64_t r1, bool acc) {
    const int64_t j0 = r0 > pr ? r0 - pr : 0, j1 = r1 - pr < np * kNr ? r1 - pr : np * kNr;
    if (j0 == 0 && j1 == np * kNr) {
        if (np == 2) {
            micro_any<2>(mt, kc, p, ps, x, ldx, y, ldy, acc);
        } else {
            micro_any<1>(mt, kc, p, ps, x, ldx, y, ldy, acc);
        }
        return;
    }
    alignas(64) float tmp[kMt][2 * kNr] = {};
    for (int m = 0; m < mt; ++m)
        for (int64_t j = j0; j < j1; ++j) tmp[m][j] = acc ? y[m * ldy + j] : 0.0f;
    if (np == 2) {
        micro_any<2>(mt, kc, p, ps, x, ldx, tmp[0], 2 * kNr, acc);
    } else {
        micro_any<1>(mt, kc, p, ps, x, ldx, tmp[0], 2 * kNr, acc);
    }
    for (int m = 0; m < mt; ++m)
        for (int64_t j = j0; j < j1; ++j) y[m * ldy + j] = tmp[m][j];
}

}  // namespace tile512

}  // namespace
}  // namespace warden::kernels::detail
