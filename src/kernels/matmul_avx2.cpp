// AVX2 + FMA matmul over the packed panel layout of kernels/matmul.h: y[t, r] = x[t, :] . W[r, :]
// where W is stored in panels of 16 output rows, element (r, k) at panel * cols * 16 + k * 16 +
// r % 16. Bit-exactness contract: every output is ONE sequential chain
// acc = fma(W[r, k], x[t, k], acc), k = 0..cols-1, from acc = 0.0f, exactly like the scalar
// reference. Vectorisation only runs many such chains side by side (one lane = one output);
// nothing is ever reassociated, so results are identical for every n, row range and thread
// split (batch invariance). This file also serves Isa::AVX512 (see matmul.cpp).
//
// n == 1 (decode) is bandwidth bound: gemv_group() walks 4 panels at once (4 contiguous
// streams, one per panel), and for each k broadcasts x[k] and does 2 FMAs per panel (16
// rows), i.e. 8 independent chains, enough to cover the FMA latency. Every weight byte is
// read exactly once. Software prefetch runs kPrefetchBytes ahead in each stream (hardware
// prefetchers stop at 4 KiB pages and restart cold).
//
// n > 1 (prefill, verification) is compute bound: the packed panel IS the micro-kernel's
// [k][16 rows] operand, read in place for f32 and bf16 alike (bf16 is decoded in registers, see
// panel_weights). A 6-token x 16-row register tile (12 accumulators, 2 weight vectors, x
// broadcast from memory) runs over all tokens. Few tokens: panel by panel over all columns (one
// prefetched stream). Otherwise per cache block of kKc columns and 4 panels;
// across kc blocks the chain continues: the accumulators are LOADED from y before the k loop
// (not summed separately and added afterwards), so the result is the single chain.
#include <immintrin.h>

#include "kernels/kernels_internal.h"
#include "kernels/matmul_panel_avx2.h"

namespace warden::kernels::detail {
namespace {

constexpr int64_t kNr = 16;               // rows per panel (2 ymm) = kernels::kPanelRows
constexpr int kMt = 6;                    // tokens per register tile
constexpr int64_t kKc = 256;              // columns per cache block
constexpr int64_t kBlockPanels = 4;       // panels per cache block (64 rows)
constexpr int64_t kPrefetchBytes = 1024;  // software prefetch distance in each panel stream
constexpr int64_t kSmallN = 12;           // up to this many tokens, panels are streamed whole

inline int64_t min64(int64_t a, int64_t b) {
    return a < b ? a : b;
}
inline int64_t max64(int64_t a, int64_t b) {
    return a > b ? a : b;
}

// ---------------------------------------------------------------- decode (n == 1)

// P consecutive panels starting at `w` (panel stride cols * 16 elements); y points at the
// first panel's row 0; rows [r0, r1) (relative to that) are written.
template <int P>
void gemv_group_f32(const float* w, int64_t cols, const float* x, float* y, int64_t r0,
                    int64_t r1) {
    const int64_t ps = cols * kNr;
    __m256 a0[P], a1[P];
#pragma GCC unroll 8
    for (int i = 0; i < P; ++i) a0[i] = a1[i] = _mm256_setzero_ps();
    for (int64_t k = 0; k < cols; ++k) {
        const float* p = w + k * kNr;
#pragma GCC unroll 8
        for (int i = 0; i < P; ++i)  // one 64-byte line per panel per k
            _mm_prefetch(reinterpret_cast<const char*>(p + i * ps) + kPrefetchBytes, _MM_HINT_T0);
        const __m256 xb = _mm256_broadcast_ss(x + k);
#pragma GCC unroll 8
        for (int i = 0; i < P; ++i) {
            a0[i] = _mm256_fmadd_ps(_mm256_loadu_ps(p + i * ps), xb, a0[i]);
            a1[i] = _mm256_fmadd_ps(_mm256_loadu_ps(p + i * ps + 8), xb, a1[i]);
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < P; ++i)
        avx2::store_panel(a0[i], a1[i], y + i * kNr, max64(r0 - i * kNr, 0),
                          min64(r1 - i * kNr, kNr));
}

// bf16: one 32-byte load gives a panel's 16 weights at k; as 8 dwords, the low halves are the
// even rows and the high halves the odd rows, so (v << 16) and (v & 0xffff0000) are the exact
// f32 values of rows 0,2,..,14 and 1,3,..,15 (1 load + 2 ALU ops instead of 2 widening
// loads). The chains live in that even/odd order and are interleaved back at the end.
template <int P>
void gemv_group_bf16(const bf16* w, int64_t cols, const float* x, float* y, int64_t r0,
                     int64_t r1) {
    const int64_t ps = cols * kNr;
    const __m256i hi_mask = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
    __m256 ev[P], od[P];
#pragma GCC unroll 8
    for (int i = 0; i < P; ++i) ev[i] = od[i] = _mm256_setzero_ps();
    auto step = [&](int64_t k) {
        const bf16* p = w + k * kNr;
        const __m256 xb = _mm256_broadcast_ss(x + k);
#pragma GCC unroll 8
        for (int i = 0; i < P; ++i) {
            const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i * ps));
            ev[i] = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(v, 16)), xb, ev[i]);
            od[i] = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_and_si256(v, hi_mask)), xb, od[i]);
        }
    };
    int64_t k = 0;
    for (; k + 2 <= cols; k += 2) {  // 2 k steps = one 64-byte line per panel
        const bf16* p = w + k * kNr;
#pragma GCC unroll 8
        for (int i = 0; i < P; ++i)
            _mm_prefetch(reinterpret_cast<const char*>(p + i * ps) + kPrefetchBytes, _MM_HINT_T0);
        step(k);
        step(k + 1);
    }
    if (k < cols) step(k);
#pragma GCC unroll 8
    for (int i = 0; i < P; ++i) {
        // ev = [r0 r2 r4 r6 | r8 r10 r12 r14], od = [r1 r3 r5 r7 | r9 r11 r13 r15]
        const __m256 lo = _mm256_unpacklo_ps(ev[i], od[i]);  // [r0 r1 r2 r3 | r8 r9 r10 r11]
        const __m256 hi = _mm256_unpackhi_ps(ev[i], od[i]);  // [r4 r5 r6 r7 | r12 .. r15]
        avx2::store_panel(_mm256_permute2f128_ps(lo, hi, 0x20),
                          _mm256_permute2f128_ps(lo, hi, 0x31), y + i * kNr, max64(r0 - i * kNr, 0),
                          min64(r1 - i * kNr, kNr));
    }
}

template <typename W, int P>
void gemv_group(const W* w, int64_t cols, const float* x, float* y, int64_t r0, int64_t r1) {
    if constexpr (sizeof(W) == 2) {
        gemv_group_bf16<P>(w, cols, x, y, r0, r1);
    } else {
        gemv_group_f32<P>(w, cols, x, y, r0, r1);
    }
}

template <typename W>
void gemv(const W* w, int64_t cols, const float* x, float* y, int64_t r0, int64_t r1) {
    const int64_t ps = cols * kNr;
    int64_t p = r0 / kNr;
    const int64_t p_end = (r1 + kNr - 1) / kNr;
    for (; p + 4 <= p_end; p += 4)
        gemv_group<W, 4>(w + p * ps, cols, x, y + p * kNr, r0 - p * kNr, r1 - p * kNr);
    switch (p_end - p) {  // leftover panels (< 4)
        case 3:
            gemv_group<W, 3>(w + p * ps, cols, x, y + p * kNr, r0 - p * kNr, r1 - p * kNr);
            break;
        case 2:
            gemv_group<W, 2>(w + p * ps, cols, x, y + p * kNr, r0 - p * kNr, r1 - p * kNr);
            break;
        case 1:
            gemv_group<W, 1>(w + p * ps, cols, x, y + p * kNr, r0 - p * kNr, r1 - p * kNr);
            break;
        default:
            break;
    }
}

// ---------------------------------------------------------------- prefill (n > 1)

// C[M tokens][16 rows] = chain continued over kc more columns. panel: [kc][16] f32 (any
// alignment); y points at the panel's row 0 of token 0; only rows [j0, j1) exist/are written.
// accumulate: the chains already hold kb > 0 terms in y; load them so that the result is the
// one sequential chain. M is a template parameter so the accumulators live in registers
// (2*M <= 12 ymm + 2 for the weights + 1 broadcast).
// Natural row order [r0..r7], [r8..r15] <-> the even/odd order in which bf16 panels are
// decoded in registers: ev = [r0 r2 r4 r6 | r8 r10 r12 r14], od = [r1 r3 r5 r7 | r9 .. r15].
inline void to_even_odd(__m256 lo, __m256 hi, __m256& ev, __m256& od) {
    const __m256 a = _mm256_permute2f128_ps(lo, hi, 0x20);  // [r0..r3 | r8..r11]
    const __m256 b = _mm256_permute2f128_ps(lo, hi, 0x31);  // [r4..r7 | r12..r15]
    ev = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0));
    od = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1));
}
inline void from_even_odd(__m256 ev, __m256 od, __m256& lo, __m256& hi) {
    const __m256 a = _mm256_unpacklo_ps(ev, od);  // [r0 r1 r2 r3 | r8 r9 r10 r11]
    const __m256 b = _mm256_unpackhi_ps(ev, od);  // [r4 r5 r6 r7 | r12 .. r15]
    lo = _mm256_permute2f128_ps(a, b, 0x20);
    hi = _mm256_permute2f128_ps(a, b, 0x31);
}

// The 16 weights of a panel at column k as two vectors. f32: rows 0-7 and 8-15. bf16: one
// 32-byte load, (v << 16) = even rows, (v & 0xffff0000) = odd rows, both exact, so prefill
// reads the packed bf16 panel in place (no conversion pass, half the bytes).
inline void panel_weights(const float* p, __m256& w0, __m256& w1) {
    w0 = _mm256_loadu_ps(p);
    w1 = _mm256_loadu_ps(p + 8);
}
inline void panel_weights(const bf16* p, __m256& w0, __m256& w1) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    w0 = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
    w1 = _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
}

// C[M tokens][16 rows] = chain continued over kc more columns. panel: [kc][16] of W; y points
// at the panel's row 0 of token 0; only rows [j0, j1) exist/are written.
// accumulate: the chains already hold kb > 0 terms in y; load them so that the result is the
// one sequential chain. M is a template parameter so the accumulators live in registers
// (2*M <= 12 ymm + 2 for the weights + 1 broadcast). For bf16 the accumulators hold rows in
// even/odd order; each lane is still exactly one row's chain.
// kPrefetch: the panel is streamed from memory once (few tokens), so prefetch it ahead as gemv
// does.
template <int M, bool kPrefetch, typename W>
void micro(int64_t kc, const W* panel, const float* x, int64_t ldx, float* y, int64_t ldy,
           int64_t j0, int64_t j1, bool accumulate) {
    constexpr bool kEvenOdd = sizeof(W) == 2;
    __m256 c0[M], c1[M];
    const bool full = j0 == 0 && j1 == kNr;
    // Every loop over m is fully unrolled so c0/c1 stay in registers (GCC otherwise keeps the
    // arrays on the stack and spills them every k step).
    if (!accumulate) {
#pragma GCC unroll 16
        for (int m = 0; m < M; ++m) c0[m] = c1[m] = _mm256_setzero_ps();
    } else {
        alignas(32) float tmp[M][kNr];
        const bool direct = full;
        if (!direct) {  // partial panel: rows outside [j0, j1) do not exist in y; they start at 0
            for (int m = 0; m < M; ++m)
                for (int64_t j = 0; j < kNr; ++j)
                    tmp[m][j] = (j >= j0 && j < j1) ? y[m * ldy + j] : 0.0f;
        }
#pragma GCC unroll 16
        for (int m = 0; m < M; ++m) {
            const float* src = direct ? y + m * ldy : tmp[m];
            c0[m] = _mm256_loadu_ps(src);
            c1[m] = _mm256_loadu_ps(src + 8);
            if constexpr (kEvenOdd) to_even_odd(c0[m], c1[m], c0[m], c1[m]);
        }
    }
    for (int64_t k = 0; k < kc; ++k) {
        if constexpr (kPrefetch)
            _mm_prefetch(reinterpret_cast<const char*>(panel + k * kNr) + kPrefetchBytes,
                         _MM_HINT_T0);
        __m256 w0, w1;
        panel_weights(panel + k * kNr, w0, w1);
#pragma GCC unroll 16
        for (int m = 0; m < M; ++m) {
            const __m256 xb = _mm256_broadcast_ss(x + m * ldx + k);
            c0[m] = _mm256_fmadd_ps(w0, xb, c0[m]);
            c1[m] = _mm256_fmadd_ps(w1, xb, c1[m]);
        }
    }
    if constexpr (kEvenOdd) {
#pragma GCC unroll 16
        for (int m = 0; m < M; ++m) from_even_odd(c0[m], c1[m], c0[m], c1[m]);
    }
    if (full) {
#pragma GCC unroll 16
        for (int m = 0; m < M; ++m) {
            _mm256_storeu_ps(y + m * ldy, c0[m]);
            _mm256_storeu_ps(y + m * ldy + 8, c1[m]);
        }
        return;
    }
    alignas(32) float tmp[M][kNr];
#pragma GCC unroll 16
    for (int m = 0; m < M; ++m) {
        _mm256_store_ps(tmp[m], c0[m]);
        _mm256_store_ps(tmp[m] + 8, c1[m]);
    }
    for (int m = 0; m < M; ++m)
        for (int64_t j = j0; j < j1; ++j) y[m * ldy + j] = tmp[m][j];
}

template <bool kPrefetch = false, typename W>
void micro_any(int mt, int64_t kc, const W* panel, const float* x, int64_t ldx, float* y,
               int64_t ldy, int64_t j0, int64_t j1, bool acc) {
    switch (mt) {
        case 6:
            micro<6, kPrefetch>(kc, panel, x, ldx, y, ldy, j0, j1, acc);
            break;
        case 5:
            micro<5, kPrefetch>(kc, panel, x, ldx, y, ldy, j0, j1, acc);
            break;
        case 4:
            micro<4, kPrefetch>(kc, panel, x, ldx, y, ldy, j0, j1, acc);
            break;
        case 3:
            micro<3, kPrefetch>(kc, panel, x, ldx, y, ldy, j0, j1, acc);
            break;
        case 2:
            micro<2, kPrefetch>(kc, panel, x, ldx, y, ldy, j0, j1, acc);
            break;
        default:
            micro<1, kPrefetch>(kc, panel, x, ldx, y, ldy, j0, j1, acc);
            break;
    }
}

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
    if (n <= kSmallN) {
        // Few tokens (speculative verification, small batches) use each panel once or twice:
        // walk the panels in memory order, each over all its columns, so the weights arrive as
        // one prefetched sequential stream. Column blocks would revisit every panel cols / kKc
        // times at a stride of a whole panel, which left a 2-token step 2.3x a 1-token one.
        for (int64_t p = p_begin; p < p_end; ++p) {
            const int64_t pr = p * kNr;
            for (int64_t t = 0; t < n; t += kMt)
                micro_any<true>(static_cast<int>(min64(kMt, n - t)), cols, w + p * ps, x + t * cols,
                                cols, y + t * ldy + pr, ldy, max64(r0 - pr, 0), min64(r1 - pr, kNr),
                                false);
        }
        return;
    }
    for (int64_t kb = 0; kb < cols; kb += kKc) {
        const int64_t kc = min64(kKc, cols - kb);
        const bool acc = kb > 0;
        for (int64_t pb = p_begin; pb < p_end; pb += kBlockPanels) {
            const int64_t np = min64(kBlockPanels, p_end - pb);
            const W* panels[kBlockPanels];  // [kc][16] slices of the packed panels, used in place
            for (int64_t i = 0; i < np; ++i) panels[i] = w + (pb + i) * ps + kb * kNr;
            for (int64_t t = 0; t < n; t += kMt) {
                const int mt = static_cast<int>(min64(kMt, n - t));
                for (int64_t i = 0; i < np; ++i) {
                    const int64_t pr = (pb + i) * kNr;  // first row of the panel
                    micro_any(mt, kc, panels[i], x + t * cols + kb, cols, y + t * ldy + pr, ldy,
                              max64(r0 - pr, 0), min64(r1 - pr, kNr), acc);
                }
            }
        }
    }
}

template <typename W>
void matmul_impl(const W* w, int64_t cols, const float* x, int64_t n, float* y, int64_t ldy,
                 int64_t r0, int64_t r1) {
    if (n == 1) {
        gemv(w, cols, x, y, r0, r1);
    } else {
        gemm(w, cols, x, n, y, ldy, r0, r1);
    }
}

void mm_f32(const float* w, int64_t cols, const float* x, int64_t n, float* y, int64_t ldy,
            int64_t r0, int64_t r1) {
    matmul_impl(w, cols, x, n, y, ldy, r0, r1);
}
void mm_bf16(const bf16* w, int64_t cols, const float* x, int64_t n, float* y, int64_t ldy,
             int64_t r0, int64_t r1) {
    matmul_impl(w, cols, x, n, y, ldy, r0, r1);
}

}  // namespace

const MatmulTable& matmul_avx2() {
    static const MatmulTable t{mm_f32, mm_bf16, kNr, mm_quant_avx2, true, nullptr};
    return t;
}

}  // namespace warden::kernels::detail
