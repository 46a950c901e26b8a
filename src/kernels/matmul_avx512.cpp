// AVX-512 matmul for f32 and bf16 weights over the packed panel layout of kernels/matmul.h:
// y[t, r] = x[t, :] . W[r, :], with W in panels of 16 output rows, element (r, k) at
// panel * cols * 16 + k * 16 + r % 16. A panel's 16 rows at one k are exactly one zmm register
// (f32) or one 32-byte load widened to it (bf16), so every lane is one output row.
//
// Bit-exactness contract (the same as matmul_avx2.cpp and the scalar reference): every output is
// ONE sequential chain acc = fma(W[r, k], x[t, k], acc), k = 0..cols-1, from acc = 0.0f.
// Vectorisation only runs such chains side by side; nothing is reassociated, so results equal
// the other ISAs' bit for bit, for every n, row range and thread split.
//
// Why a separate AVX-512 kernel: with several tokens (prefill, batched decode) f32/bf16 matmul is
// bound by FMA throughput, and a CPU with two 512-bit FMA pipes (Zen 5, Sapphire Rapids) does
// twice the multiply-adds per cycle on zmm that it does on ymm (a register-only FMA loop measured
// 245 against 122 GFLOP/s per core on the Zen 5 VM). The register tile is kMt tokens x 2 panels
// (24 zmm accumulators, 2 weight vectors, 1 broadcast): per column, 2 weight loads feed 24 FMAs.
// Across cache blocks of kKc columns the chain continues: the accumulators are LOADED from y
// before the k loop, so the result is still the single chain.
//
// One token (decode) is bound by memory bandwidth, not by the FMA width: n == 1 runs the AVX2
// kernel, which already streams at the read loop's rate (docs/BENCHMARKS.md, Batch-1 decode per
// weight format).
//
// Tested on CPUs without AVX-512 too: tests/kernels/test_matmul_avx512_emulated.cpp compiles
// this file against SIMDe (kernels/avx512_compat.h) and compares it with the scalar kernels bit for
// bit.
//
// ODR: helpers live in the anonymous namespace; only intrinsics headers and kernels_internal.h.
#include "kernels/avx512_compat.h"
#include "kernels/kernels_internal.h"
#include "kernels/matmul_tile_avx512.h"

#ifndef WARDEN_MATMUL_AVX512_ENTRY
#define WARDEN_MATMUL_AVX512_ENTRY matmul_avx512
#endif

namespace warden::kernels::detail {
namespace {

using tile512::kMt;
using tile512::kNr;
using tile512::tile;
constexpr int64_t kKc = 256;         // columns per cache block
constexpr int64_t kBlockPanels = 4;  // panels per cache block (64 rows), read as two pairs

inline int64_t min64(int64_t a, int64_t b) {
    return a < b ? a : b;
}

// n > 1 tokens, rows [r0, r1). Per cache block of kKc columns and kBlockPanels panels (whose
// slices stay in L1/L2), the token tiles run over all tokens, two panels at a time.
template <typename W>
void gemm(const W* w, int64_t cols, const float* x, int64_t n, float* y, int64_t ldy, int64_t r0,
          int64_t r1) {
    if (cols == 0) {  // empty reduction: the result is zero, never left uninitialised
        for (int64_t t = 0; t < n; ++t)
            for (int64_t r = r0; r < r1; ++r) y[t * ldy + r] = 0.0f;
        return;
    }
    const int64_t ps = cols * kNr;
    const int64_t p_begin = r0 / kNr, p_end = (r1 + kNr - 1) / kNr;
    for (int64_t kb = 0; kb < cols; kb += kKc) {
        const int64_t kc = min64(kKc, cols - kb);
        for (int64_t pb = p_begin; pb < p_end; pb += kBlockPanels) {
            const int64_t np = min64(kBlockPanels, p_end - pb);
            for (int64_t t = 0; t < n; t += kMt) {
                const int mt = static_cast<int>(min64(kMt, n - t));
                for (int64_t i = 0; i < np; i += 2) {
                    const int64_t pr = (pb + i) * kNr;  // first row of the tile
                    tile(mt, static_cast<int>(min64(2, np - i)), kc, w + (pb + i) * ps + kb * kNr,
                         ps, x + t * cols + kb, cols, y + t * ldy + pr, ldy, pr, r0, r1, kb > 0);
                }
            }
        }
    }
}

#ifdef WARDEN_AVX512_EMULATE
constexpr bool kGemvOnAvx2 = false;  // the emulated build runs on any x86-64: one token runs gemm
#else
constexpr bool kGemvOnAvx2 = true;
#endif

void mm_f32(const float* w, int64_t cols, const float* x, int64_t n, float* y, int64_t ldy,
            int64_t r0, int64_t r1) {
    if (kGemvOnAvx2 && n == 1) {
        matmul_avx2().f32(w, cols, x, n, y, ldy, r0, r1);
    } else {
        gemm(w, cols, x, n, y, ldy, r0, r1);
    }
}
void mm_bf16(const bf16* w, int64_t cols, const float* x, int64_t n, float* y, int64_t ldy,
             int64_t r0, int64_t r1) {
    if (kGemvOnAvx2 && n == 1) {
        matmul_avx2().bf16(w, cols, x, n, y, ldy, r0, r1);
    } else {
        gemm(w, cols, x, n, y, ldy, r0, r1);
    }
}

}  // namespace

const MatmulTable& WARDEN_MATMUL_AVX512_ENTRY() {
    static const MatmulTable t{mm_f32, mm_bf16, kNr, mm_quant_avx512, false, nullptr};
    return t;
}

}  // namespace warden::kernels::detail
