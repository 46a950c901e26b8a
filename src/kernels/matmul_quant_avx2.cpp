// AVX2 (+FMA, F16C) kernels for quantized weights (layouts and the arithmetic contract:
// kernels/matmul_quant.h). Bit-exact with the scalar reference in matmul_scalar.cpp: integer
// group dots are exact (any summation order gives the same int32), and the float steps are
// the same operations in the same order per output (one lane = one output row).
//
// W4A8 (the llama.cpp Q4_0 x Q8_0 AVX2 trick, transposed to 16-row panels): a 32-byte load
// holds 4 consecutive k of 16 rows as nibbles; (v & 0xf) is rows 0-7 and (v >> 4 & 0xf) rows
// 8-15, each 32-bit lane one row's 4 codes. _mm256_maddubs_epi16 against the broadcast 4
// activation bytes gives per-row pair sums (<= 2*15*127, exact); 8 quads (one 32-block) are
// summed in int16 and widened once with _mm256_madd_epi16. Symmetric weights start each int16
// sum at its half of the zero-point correction (xz: -8 * the activations it will meet), so no
// per-block subtract of 8 * xs is left to do. Exact: at every point the sum is, per k of its 16,
// either (q - 8) * x (added) or -8 * x (not yet), each within +-1016, so within +-16256.
// Tokens are processed panel by panel (all tokens of a panel while it is in L1/L2), so decode
// reads each weight byte once and prefill reuses each panel across the batch. A thread reads one
// panel at a time, so its weights arrive as one sequential stream: a batch-1 variant that took
// two panels per pass (sharing each activation broadcast over 32 rows) was faster with the
// weights in cache but read DRAM as two interleaved streams, which one core of this machine reads
// at 62-87% of one stream's bandwidth; removing it made batch-1 decode faster
// (docs/WEIGHT_QUANT.md, Tried and dropped). With 8 or more tokens the first 4-token pass
// also stores the panel's codes unpacked to bytes (QuantArgs::unpack) and every later pass loads
// them ready to multiply. A pass is issue-bound
// (16 maddubs + 16 adds per token and 32-block cannot shrink without VNNI) and the unpacking
// (and, shift, and per 32-byte load, shared by 4 tokens) was 6 of its ~46 vector instructions
// per token and block. Without them a 512-token GEMM on one matrix runs 10-19% faster, on a
// model's 16 layers of weights streamed from DRAM 5.6%.
//
// ODR: helpers live in the anonymous namespace; only <immintrin.h> and kernels_internal.h.
#include <immintrin.h>

#include "kernels/fp8_avx2.h"
#include "kernels/kernels_internal.h"
#include "kernels/matmul_panel_avx2.h"

namespace warden::kernels::detail {
namespace {

constexpr int64_t kNr = 16;
// Software prefetch distance (bytes ahead in the panel stream) of the W4A8 kernel; a macro so
// bench/kernels/bench_gemv_decode.cpp can try other values (-DWARDEN_Q4_PREFETCH=...). 2048 made
// batch-1 decode faster than 1024 and than 3072 on a Zen 3 host (alternating builds).
#ifndef WARDEN_Q4_PREFETCH
#define WARDEN_Q4_PREFETCH 2048
#endif
constexpr int64_t kQ4Prefetch = WARDEN_Q4_PREFETCH;

// 16 u16 scales (f16 or bf16 bits) -> rows 0-7, 8-15 as f32.
inline void load_scales(const uint8_t* p, bool bf16, __m256& s0, __m256& s1) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16));
    if (bf16) {
        s0 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(a), 16));
        s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(b), 16));
    } else {
        s0 = _mm256_cvtph_ps(a);
        s1 = _mm256_cvtph_ps(b);
    }
}

inline __m256i bcast4(const int8_t* p) {
    int32_t v;
    __builtin_memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

// Pins v to a register at this point. The int16 block sums are chains of adds; without this,
// GCC's reassociation turns each chain of 8 into a balanced tree, which needs all 8 products
// live at once: with several tokens per weight load that is more values than the 16 ymm
// registers, and the spills (a store and a reload per product) cost more than the arithmetic.
#define WARDEN_KEEP_IN_REG(v) asm("" : "+x"(v))

// kAsym is a template argument so the symmetric (default) path has no per-block branches.
// NT tokens (t .. t+NT-1) share one pass over the panel: each 32-byte load of weights is unpacked
// once (load, and, shift, and) and used by every token, which is what prefill spends most of its
// time on. Each token's own arithmetic is the NT = 1 sequence unchanged, so results are
// bit-identical whatever the blocking. Token t+i's outputs are at y + i * a.ldy.
// Src: where the codes come from. With many tokens the first pass reads the nibbles and also
// stores them unpacked to ub (Src::NibblesUnpack: for 32-block b and quad j, rows 0-7 at
// ub + b * 512 + j * 64, rows 8-15 32 bytes after), and every later pass loads them from there
// (Src::Unpacked). The unpacking rides on the first pass rather than a pass of its own because
// that pass is the one streaming the panel from DRAM: alone, the copy would wait on memory with
// nothing to overlap (batched decode was 6-9% slower that way). Same bytes, same results.
enum class Src { Nibbles, NibblesUnpack, Unpacked };

template <bool kAsym, int NT, Src kSrc>
void q4_a8_panel(const QuantArgs& a, const uint8_t* panel, uint8_t* ub, int64_t t, float* y,
                 int64_t j0, int64_t j1) {
    const int64_t cols = a.cols, G = a.group, gb = 32 + (kAsym ? 32 : 0) + G * 8, ng = cols / G,
                  spg = G / 32;
    const int64_t nb = cols / 32;
    const int64_t q4pf = a.q4_avx2_prefetch >= 0 ? a.q4_avx2_prefetch : kQ4Prefetch;
    const __m256i m4 = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
    __m256 acc0[NT], acc1[NT];
    for (int i = 0; i < NT; ++i) acc0[i] = acc1[i] = _mm256_setzero_ps();
    for (int64_t g = 0; g < ng; ++g) {
        const uint8_t* blk = panel + g * gb;
        __m256 d0, d1, m0 = _mm256_setzero_ps(), m1 = _mm256_setzero_ps();
        load_scales(blk, a.bf16_scales, d0, d1);
        if (kAsym) load_scales(blk + 32, a.bf16_scales, m0, m1);
        const uint8_t* qs = blk + (kAsym ? 64 : 32);
        for (int64_t sb = 0; sb < spg; ++sb) {
            const int64_t b = g * spg + sb;
            const uint8_t* qq = qs + sb * 256;
            uint8_t* uq = kSrc != Src::Nibbles ? ub + b * 512 : nullptr;
            if (q4pf > 0 && kSrc != Src::Unpacked)
                for (int pf = 0; pf < 4; ++pf)
                    _mm_prefetch(reinterpret_cast<const char*>(qq) + q4pf + pf * 64, _MM_HINT_T0);
            __m256i s0[NT], s1[NT];
            for (int i = 0; i < NT; ++i)
                s0[i] = s1[i] =
                    kAsym ? _mm256_setzero_si256() : _mm256_set1_epi32(a.xz[(t + i) * nb + b]);
#pragma GCC unroll 8
            for (int j = 0; j < 8; ++j) {
                __m256i lo, hi;
                if constexpr (kSrc == Src::Unpacked) {
                    lo = _mm256_load_si256(reinterpret_cast<const __m256i*>(uq + j * 64));
                    hi = _mm256_load_si256(reinterpret_cast<const __m256i*>(uq + j * 64 + 32));
                } else {
                    const __m256i v =
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qq + j * 32));
                    lo = _mm256_and_si256(v, m4);
                    hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
                    if constexpr (kSrc == Src::NibblesUnpack) {
                        _mm256_store_si256(reinterpret_cast<__m256i*>(uq + j * 64), lo);
                        _mm256_store_si256(reinterpret_cast<__m256i*>(uq + j * 64 + 32), hi);
                    }
                }
                for (int i = 0; i < NT; ++i) {
                    const __m256i xv = bcast4(a.xq + (t + i) * cols + b * 32 + 4 * j);
                    s0[i] = _mm256_add_epi16(s0[i], _mm256_maddubs_epi16(lo, xv));
                    s1[i] = _mm256_add_epi16(s1[i], _mm256_maddubs_epi16(hi, xv));
                    WARDEN_KEEP_IN_REG(s0[i]);
                    WARDEN_KEEP_IN_REG(s1[i]);
                }
            }
            for (int i = 0; i < NT; ++i) {
                const int64_t xb = (t + i) * nb + b;
                const __m256i i0 = _mm256_madd_epi16(s0[i], ones),
                              i1 = _mm256_madd_epi16(s1[i], ones);
                const __m256 xdv = _mm256_set1_ps(a.xd[xb]);
                acc0[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i0), _mm256_mul_ps(d0, xdv), acc0[i]);
                acc1[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i1), _mm256_mul_ps(d1, xdv), acc1[i]);
                if (kAsym) {
                    const __m256 xsv = _mm256_set1_ps(static_cast<float>(a.xs[xb]));
                    acc0[i] = _mm256_fmadd_ps(xsv, _mm256_mul_ps(m0, xdv), acc0[i]);
                    acc1[i] = _mm256_fmadd_ps(xsv, _mm256_mul_ps(m1, xdv), acc1[i]);
                }
            }
        }
    }
    for (int i = 0; i < NT; ++i) avx2::store_panel(acc0[i], acc1[i], y + i * a.ldy, j0, j1);
}

// W4A16: w = (q - 8) * d or fma(q, d, m) in f32, then the plain f32 chain over k.
template <bool kAsym>
void q4_a16_panel(const QuantArgs& a, const uint8_t* panel, int64_t t, float* y, int64_t j0,
                  int64_t j1) {
    const int64_t cols = a.cols, G = a.group, gb = 32 + (kAsym ? 32 : 0) + G * 8, ng = cols / G;
    const float* x = a.x + t * cols;
    const __m256i m4 = _mm256_set1_epi8(0x0f), mb = _mm256_set1_epi32(0xff);
    const __m256 eight = _mm256_set1_ps(8.0f);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    for (int64_t g = 0; g < ng; ++g) {
        const uint8_t* blk = panel + g * gb;
        __m256 d0, d1, m0 = _mm256_setzero_ps(), m1 = _mm256_setzero_ps();
        load_scales(blk, a.bf16_scales, d0, d1);
        if (kAsym) load_scales(blk + 32, a.bf16_scales, m0, m1);
        const uint8_t* qs = blk + (kAsym ? 64 : 32);
        const float* xg = x + g * G;
        for (int64_t j = 0; j < G / 4; ++j) {
            const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + j * 32));
            const __m256i lo = _mm256_and_si256(v, m4);
            const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
            __m256i l[4] = {lo, _mm256_srli_epi32(lo, 8), _mm256_srli_epi32(lo, 16),
                            _mm256_srli_epi32(lo, 24)};
            __m256i h[4] = {hi, _mm256_srli_epi32(hi, 8), _mm256_srli_epi32(hi, 16),
                            _mm256_srli_epi32(hi, 24)};
#pragma GCC unroll 4
            for (int kk = 0; kk < 4; ++kk) {
                const __m256 q0 = _mm256_cvtepi32_ps(_mm256_and_si256(l[kk], mb));
                const __m256 q1 = _mm256_cvtepi32_ps(_mm256_and_si256(h[kk], mb));
                __m256 w0, w1;
                if (kAsym) {
                    w0 = _mm256_fmadd_ps(q0, d0, m0);
                    w1 = _mm256_fmadd_ps(q1, d1, m1);
                } else {
                    w0 = _mm256_mul_ps(_mm256_sub_ps(q0, eight), d0);
                    w1 = _mm256_mul_ps(_mm256_sub_ps(q1, eight), d1);
                }
                const __m256 xb = _mm256_broadcast_ss(xg + 4 * j + kk);
                acc0 = _mm256_fmadd_ps(w0, xb, acc0);
                acc1 = _mm256_fmadd_ps(w1, xb, acc1);
            }
        }
    }
    avx2::store_panel(acc0, acc1, y, j0, j1);
}

// W8A8. kGroup: a scale per 32-block (int8-g32, each block's 16 scales ahead of its 512 code
// bytes) folded into the block's fma; otherwise one scale per row, applied once at the end.
// NT tokens (t .. t+NT-1) share one pass over the panel: each 32-byte load of codes and its
// |w| are made once, and each token adds sign(x, w) * |w| (maddubs, then madd) to its own int32
// sums. Integer sums are exact, and each token's float steps are the NT = 1 sequence, so results
// are bit-identical whatever NT. With the tokens in one pass the codes come from DRAM once and
// every token's work overlaps the prefetched stream (one token per pass made a 5-token step of the
// default model's int8 head 3.3x a 1-token one).
template <bool kGroup, int NT>
void q8_a8_panel(const QuantArgs& a, const uint8_t* panel, int64_t t, float* y, int64_t j0,
                 int64_t j1) {
    const int64_t cols = a.cols, nb = cols / 32;
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc0[NT], acc1[NT];
    for (int i = 0; i < NT; ++i) acc0[i] = acc1[i] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* qq = kGroup ? panel + b * kQ8BlockBytes + 32 : panel + 32 + b * 512;
        // 512 bytes a block, 544 with its scales (int8-g32): 9 lines then, so the prefetch keeps
        // up.
        for (int pf = 0; pf < (kGroup ? 9 : 8); ++pf)
            _mm_prefetch(reinterpret_cast<const char*>(qq) + 1024 + pf * 64, _MM_HINT_T0);
        __m256i i0[NT], i1[NT];
        for (int i = 0; i < NT; ++i) i0[i] = i1[i] = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int j = 0; j < 8; ++j) {
            const __m256i v0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qq + j * 64));
            const __m256i v1 =
                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qq + j * 64 + 32));
            const __m256i a0 = _mm256_abs_epi8(v0), a1 = _mm256_abs_epi8(v1);
            for (int i = 0; i < NT; ++i) {
                const __m256i xv = bcast4(a.xq + (t + i) * cols + b * 32 + 4 * j);
                i0[i] = _mm256_add_epi32(
                    i0[i],
                    _mm256_madd_epi16(_mm256_maddubs_epi16(a0, _mm256_sign_epi8(xv, v0)), ones));
                i1[i] = _mm256_add_epi32(
                    i1[i],
                    _mm256_madd_epi16(_mm256_maddubs_epi16(a1, _mm256_sign_epi8(xv, v1)), ones));
                if constexpr (NT > 1) {
                    WARDEN_KEEP_IN_REG(i0[i]);
                    WARDEN_KEEP_IN_REG(i1[i]);
                }
            }
        }
        __m256 d0 = _mm256_setzero_ps(), d1 = _mm256_setzero_ps();
        if constexpr (kGroup) load_scales(qq - 32, a.bf16_scales, d0, d1);
        for (int i = 0; i < NT; ++i) {
            const __m256 xdv = _mm256_set1_ps(a.xd[(t + i) * nb + b]);
            if constexpr (kGroup) {
                acc0[i] =
                    _mm256_fmadd_ps(_mm256_cvtepi32_ps(i0[i]), _mm256_mul_ps(d0, xdv), acc0[i]);
                acc1[i] =
                    _mm256_fmadd_ps(_mm256_cvtepi32_ps(i1[i]), _mm256_mul_ps(d1, xdv), acc1[i]);
            } else {
                acc0[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i0[i]), xdv, acc0[i]);
                acc1[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i1[i]), xdv, acc1[i]);
            }
        }
    }
    for (int i = 0; i < NT; ++i) {
        if constexpr (kGroup) {
            avx2::store_panel(acc0[i], acc1[i], y + i * a.ldy, j0, j1);
        } else {
            __m256 d0, d1;
            load_scales(panel, a.bf16_scales, d0, d1);
            avx2::store_panel(_mm256_mul_ps(acc0[i], d0), _mm256_mul_ps(acc1[i], d1), y + i * a.ldy,
                              j0, j1);
        }
    }
}

// Scale vectors at the front of an FP8 panel: one per channel, one per block block-scaled.
inline int64_t fp8_blocks(const QuantArgs& a) {
    return a.group ? (a.cols + a.group - 1) / a.group : 1;
}

// Column k of the FP8 contract's four chains (matmul_quant.h) for one token: the panel's 16 codes
// at k (rows 0-7, 8-15) widened in registers, times x[k], into chain k % 4 (l, h). kRaw: the codes
// widened without their * 2^120 against x * 2^120 (QuantArgs::x_e4m3): the same products exactly,
// two multiplies per 16 weights fewer.
template <bool kRaw>
[[gnu::always_inline]] inline void fp8_column(const avx2::E4m3x16& dec, const uint8_t* qs,
                                              const float* x, int64_t k, __m256& l, __m256& h) {
    __m256 wl, wh;
    if constexpr (kRaw)
        dec.raw(qs + k * 16, wl, wh);
    else
        dec(qs + k * 16, wl, wh);
    const __m256 xb = _mm256_broadcast_ss(x + k);
    l = _mm256_fmadd_ps(wl, xb, l);
    h = _mm256_fmadd_ps(wh, xb, h);
}

// FP8, one token: the four chains over each block's columns (the whole row per channel), eight
// independent fma chains (16 rows x 4) so the kernel does not wait on one chain's latency; the
// chains are named locals (as arrays GCC kept them in memory and stored each back every column).
// Per channel y = ((c0 + c1) + (c2 + c3)) * s; block-scaled each block's sums are folded in,
// y = fma(sum, s_b, y), and the chains restart from zero (blocks are multiples of 4 columns).
template <bool kRaw>
void fp8_panel(const QuantArgs& a, const uint8_t* panel, const float* x, float* y, int64_t j0,
               int64_t j1) {
    const int64_t cols = a.cols, nb = fp8_blocks(a), g = a.group ? a.group : cols;
    const uint8_t* qs = panel + nb * 64;
    const avx2::E4m3x16 dec;
    __m256 y0 = _mm256_setzero_ps(), y1 = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
        const int64_t k1 = cols - b * g < g ? cols : (b + 1) * g;
        __m256 l0 = _mm256_setzero_ps(), l1 = l0, l2 = l0, l3 = l0, h0 = l0, h1 = l0, h2 = l0,
               h3 = l0;
        int64_t k = b * g;
        for (; k + 4 <= k1; k += 4) {
            _mm_prefetch(reinterpret_cast<const char*>(qs + k * 16) + 1024, _MM_HINT_T0);
            fp8_column<kRaw>(dec, qs, x, k, l0, h0);
            fp8_column<kRaw>(dec, qs, x, k + 1, l1, h1);
            fp8_column<kRaw>(dec, qs, x, k + 2, l2, h2);
            fp8_column<kRaw>(dec, qs, x, k + 3, l3, h3);
        }
        if (k < k1) fp8_column<kRaw>(dec, qs, x, k, l0, h0);
        if (k + 1 < k1) fp8_column<kRaw>(dec, qs, x, k + 1, l1, h1);
        if (k + 2 < k1) fp8_column<kRaw>(dec, qs, x, k + 2, l2, h2);
        const __m256 p0 = _mm256_add_ps(_mm256_add_ps(l0, l1), _mm256_add_ps(l2, l3));
        const __m256 p1 = _mm256_add_ps(_mm256_add_ps(h0, h1), _mm256_add_ps(h2, h3));
        const float* s = reinterpret_cast<const float*>(panel + b * 64);
        if (a.group) {
            y0 = _mm256_fmadd_ps(p0, _mm256_loadu_ps(s), y0);
            y1 = _mm256_fmadd_ps(p1, _mm256_loadu_ps(s + 8), y1);
        } else {
            y0 = _mm256_mul_ps(p0, _mm256_loadu_ps(s));
            y1 = _mm256_mul_ps(p1, _mm256_loadu_ps(s + 8));
        }
    }
    avx2::store_panel(y0, y1, y, j0, j1);
}

// FP8 with several tokens (prefill, batched decode, a --prefill-weights fp8 copy). fp8_panel would
// widen every code once per token, so each block of kFp8Kc columns of the panel is widened once
// per tile of up to kFp8Tokens tokens into f32 scratch that stays in L1, transposed so that one
// vector holds two rows' four consecutive columns: the contract's four chains of a row (chain
// k % 4) are then the four lanes of a vector, and a token's chains for 8 rows are 4 vectors
// instead of 8 (fp8_panel's l0-l3, h0-h3 per 16 rows). That leaves registers for kFp8Mt tokens
// per pass, which share every weight load: per 32 weights a token costs one 4-column broadcast
// and four fmas, with the weights an fma operand. A row's chains are summed at the end as the
// contract does ((c0 + c1) + (c2 + c3), two horizontal adds), so the results are fp8_panel's
// bits. Block-scaled panels fold each scale block's sums into the token's totals (fp8_panel's
// arithmetic). Scratch is on the stack (44 KiB): no heap, and no standard-library templates in
// this -mavx2 file (the ODR note above).
constexpr int64_t kFp8Kc = 256;
constexpr int64_t kFp8Tokens = 64;
constexpr int kFp8Mt = 3;  // tokens per pass: 12 accumulators and 3 broadcasts in 16 registers

// Columns [k0, k0 + n) (n <= 4, k0 % 4 == 0) of the panel's codes qs, widened into the quad
// layout at dst: for half h (rows 8h..8h+7), vector j (rows 8h+j and 8h+j+4) at dst + (h*4 + j)*8,
// lanes 0-3 the first row's four columns, 4-7 the second's; columns past n are zero.
inline void fp8_widen_quad(const avx2::E4m3x16& dec, const uint8_t* qs, int64_t k0, int64_t n,
                           float* dst) {
    __m256 lo[4], hi[4];
    for (int c = 0; c < 4; ++c) {
        if (c < n) {
            dec(qs + (k0 + c) * 16, lo[c], hi[c]);
        } else {
            lo[c] = hi[c] = _mm256_setzero_ps();
        }
    }
    for (int h = 0; h < 2; ++h) {
        const __m256* a = h ? hi : lo;
        const __m256 t0 = _mm256_unpacklo_ps(a[0], a[1]), t1 = _mm256_unpackhi_ps(a[0], a[1]);
        const __m256 t2 = _mm256_unpacklo_ps(a[2], a[3]), t3 = _mm256_unpackhi_ps(a[2], a[3]);
        float* d = dst + h * 32;
        _mm256_store_ps(d, _mm256_shuffle_ps(t0, t2, 0x44));       // rows 0, 4
        _mm256_store_ps(d + 8, _mm256_shuffle_ps(t0, t2, 0xee));   // rows 1, 5
        _mm256_store_ps(d + 16, _mm256_shuffle_ps(t1, t3, 0x44));  // rows 2, 6
        _mm256_store_ps(d + 24, _mm256_shuffle_ps(t1, t3, 0xee));  // rows 3, 7
    }
}

// Rows 0-7 of a half from its four chain vectors: (c0 + c1) + (c2 + c3) per row, in row order.
inline __m256 fp8_quad_sums(const __m256 (&c)[4]) {
    return _mm256_hadd_ps(_mm256_hadd_ps(c[0], c[1]), _mm256_hadd_ps(c[2], c[3]));
}

// M tokens' chains of half h over columns [0, kn) of a widened range (wq: its first quad; x: token
// 0's first column, tokens ldx apart). kFold (block-scaled; the range is one scale block): the
// chains start at zero and their sums are folded into the totals tot[m * 16 + h * 8 ..] with the
// block's scales s (fma(sum, s, total)); otherwise they continue from and return to
// chains[m * 64 + h * 32 ..]. A last partial quad updates only its columns' chains (a blend:
// adding a zero product could turn a -0 chain into +0).
template <int M, bool kFold>
void fp8_quads(const float* wq, int h, int64_t kn, const float* x, int64_t ldx, float* chains,
               float* tot, const uint8_t* s) {
    __m256 acc[M][4];
    for (int m = 0; m < M; ++m)
        for (int j = 0; j < 4; ++j)
            acc[m][j] =
                kFold ? _mm256_setzero_ps() : _mm256_load_ps(chains + m * 64 + h * 32 + j * 8);
    const float* w = wq + h * 32;
    int64_t k = 0;
    for (; k + 4 <= kn; k += 4, w += 64) {
        __m256 xq[M];
        for (int m = 0; m < M; ++m)
            xq[m] = _mm256_broadcast_ps(reinterpret_cast<const __m128*>(x + m * ldx + k));
        for (int j = 0; j < 4; ++j) {
            const __m256 wj = _mm256_load_ps(w + j * 8);
            for (int m = 0; m < M; ++m) acc[m][j] = _mm256_fmadd_ps(wj, xq[m], acc[m][j]);
        }
    }
    if (k < kn) {  // the row's last 1-3 columns (never past the row: x is read lane by lane)
        const int n = static_cast<int>(kn - k);
        const __m256 keep = _mm256_castsi256_ps(
            _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 0, 1, 2, 3)));
        for (int m = 0; m < M; ++m) {
            const float* xm = x + m * ldx + k;
            const __m128 v = _mm_setr_ps(xm[0], n > 1 ? xm[1] : 0.0f, n > 2 ? xm[2] : 0.0f, 0.0f);
            const __m256 xv = _mm256_set_m128(v, v);
            for (int j = 0; j < 4; ++j) {
                const __m256 f = _mm256_fmadd_ps(_mm256_load_ps(w + j * 8), xv, acc[m][j]);
                acc[m][j] = _mm256_blendv_ps(acc[m][j], f, keep);
            }
        }
    }
    for (int m = 0; m < M; ++m) {
        if constexpr (kFold) {
            float* t = tot + m * 16 + h * 8;
            const __m256 sc = _mm256_loadu_ps(reinterpret_cast<const float*>(s) + h * 8);
            _mm256_store_ps(t, _mm256_fmadd_ps(fp8_quad_sums(acc[m]), sc, _mm256_load_ps(t)));
        } else {
            for (int j = 0; j < 4; ++j)
                _mm256_store_ps(chains + m * 64 + h * 32 + j * 8, acc[m][j]);
        }
    }
}

template <bool kFold>
void fp8_quads_any(int mt, const float* wq, int h, int64_t kn, const float* x, int64_t ldx,
                   float* chains, float* tot, const uint8_t* s) {
    if (mt == 3)
        fp8_quads<3, kFold>(wq, h, kn, x, ldx, chains, tot, s);
    else if (mt == 2)
        fp8_quads<2, kFold>(wq, h, kn, x, ldx, chains, tot, s);
    else
        fp8_quads<1, kFold>(wq, h, kn, x, ldx, chains, tot, s);
}

void fp8_panel_multi(const QuantArgs& a, const uint8_t* panel, int64_t base, int64_t j0,
                     int64_t j1) {
    const int64_t cols = a.cols;
    const uint8_t* qs = panel + fp8_blocks(a) * 64;
    // Block-scaled: widened blocks of whole scale blocks (G divides kc).
    const int64_t kc = a.group ? kFp8Kc / a.group * a.group : kFp8Kc;
    const avx2::E4m3x16 dec;
    alignas(32) float wq[kFp8Kc * 16];
    alignas(32) float chains[kFp8Tokens * 64];  // per token: half 0's 4 vectors, then half 1's
    alignas(32) float tots[kFp8Tokens * 16];    // block-scaled: per token, rows 0-15
    for (int64_t t0 = 0; t0 < a.n; t0 += kFp8Tokens) {
        const int64_t tn = a.n - t0 < kFp8Tokens ? a.n - t0 : kFp8Tokens;
        for (int64_t i = 0; i < tn * 64; i += 8) _mm256_store_ps(chains + i, _mm256_setzero_ps());
        for (int64_t i = 0; i < tn * 16; i += 8) _mm256_store_ps(tots + i, _mm256_setzero_ps());
        for (int64_t kb = 0; kb < cols; kb += kc) {
            const int64_t kn = cols - kb < kc ? cols - kb : kc;
            for (int64_t q = 0; q * 4 < kn; ++q) {
                if ((q & 1) == 0)
                    _mm_prefetch(reinterpret_cast<const char*>(qs + (kb + 4 * q) * 16) + 1024,
                                 _MM_HINT_T0);
                fp8_widen_quad(dec, qs, kb + 4 * q, kn - 4 * q < 4 ? kn - 4 * q : 4, wq + q * 64);
            }
            const int64_t gs = a.group ? a.group : kn;  // one fold range per scale block
            for (int64_t g0 = 0; g0 < kn; g0 += gs) {
                const int64_t gn = kn - g0 < gs ? kn - g0 : gs;
                const uint8_t* sb = a.group ? panel + (kb + g0) / a.group * 64 : nullptr;
                for (int h = 0; h < 2; ++h)
                    for (int64_t t = 0; t < tn; t += kFp8Mt) {
                        const int mt = static_cast<int>(tn - t < kFp8Mt ? tn - t : kFp8Mt);
                        const float* x = a.x + (t0 + t) * cols + kb + g0;
                        if (a.group)
                            fp8_quads_any<true>(mt, wq + g0 / 4 * 64, h, gn, x, cols, nullptr,
                                                tots + t * 16, sb);
                        else
                            fp8_quads_any<false>(mt, wq + g0 / 4 * 64, h, gn, x, cols,
                                                 chains + t * 64, nullptr, nullptr);
                    }
            }
        }
        for (int64_t t = 0; t < tn; ++t) {  // after the last block (or none, when cols is 0)
            float* y = a.y + (t0 + t) * a.ldy + base;
            if (a.group) {
                avx2::store_panel(_mm256_load_ps(tots + t * 16), _mm256_load_ps(tots + t * 16 + 8),
                                  y, j0, j1);
                continue;
            }
            __m256 c0[4], c1[4];
            for (int j = 0; j < 4; ++j) {
                c0[j] = _mm256_load_ps(chains + t * 64 + j * 8);
                c1[j] = _mm256_load_ps(chains + t * 64 + 32 + j * 8);
            }
            const __m256 s0 = _mm256_loadu_ps(reinterpret_cast<const float*>(panel));
            const __m256 s1 = _mm256_loadu_ps(reinterpret_cast<const float*>(panel) + 8);
            avx2::store_panel(_mm256_mul_ps(fp8_quad_sums(c0), s0),
                              _mm256_mul_ps(fp8_quad_sums(c1), s1), y, j0, j1);
        }
    }
}

}  // namespace

// Activation quantizer of kernels/matmul_quant.h, bit-identical to the scalar definition in
// matmul_quant.cpp: max|x| is exact in any order (NaN lanes are skipped like std::fmax does:
// _mm256_max_ps returns its second operand when one is NaN), d and 127/a are the same scalar
// divisions, v * id is one f32 multiply, _mm256_round_ps(nearest) is nearbyint under the
// default rounding mode, NaN -> 0 before the clamp, and the block sum is an exact int32 sum.
void quantize_acts_avx2(const float* x, int64_t n, int64_t cols, int8_t* xq, float* xd, int32_t* xs,
                        int32_t* xz) {
    const int64_t nb = cols / 32;
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256 hi = _mm256_set1_ps(127.0f), lo = _mm256_set1_ps(-127.0f);
    const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int64_t t = 0; t < n; ++t)
        for (int64_t b = 0; b < nb; ++b) {
            const float* v = x + t * cols + b * 32;
            __m256 f[4];
            for (int i = 0; i < 4; ++i) f[i] = _mm256_loadu_ps(v + 8 * i);
            __m256 m = _mm256_setzero_ps();
            for (int i = 0; i < 4; ++i) m = _mm256_max_ps(_mm256_and_ps(f[i], absmask), m);
            __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
            m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
            m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
            const float a = _mm_cvtss_f32(m4);
            const float d = a / 127.0f;
            const float id = a > 0.0f ? 127.0f / a : 0.0f;
            const __m256 idv = _mm256_set1_ps(id);
            __m256i q[4];
            for (int i = 0; i < 4; ++i) {
                __m256 r = _mm256_round_ps(_mm256_mul_ps(f[i], idv),
                                           _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
                r = _mm256_and_ps(r, _mm256_cmp_ps(r, r, _CMP_ORD_Q));  // NaN -> +0
                r = _mm256_min_ps(_mm256_max_ps(r, lo), hi);
                q[i] = _mm256_cvtps_epi32(r);
            }
            const __m256i s32 =
                _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
            __m128i s4 =
                _mm_add_epi32(_mm256_castsi256_si128(s32), _mm256_extracti128_si256(s32, 1));
            // xz: the word zero_point_pairs in matmul_quant.cpp makes (not shared: the ODR note).
            // Lane j of s4 sums k % 8 in {j, j + 4}, so k % 4 in {0, 1} is lanes 0 + 1.
            if (xz) {
                const __m128i pairs = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
                const auto h16 = [](int32_t sum) {
                    return static_cast<uint32_t>(
                        static_cast<uint16_t>(static_cast<int16_t>(-8 * sum)));
                };
                xz[t * nb + b] = static_cast<int32_t>(h16(_mm_cvtsi128_si32(pairs)) |
                                                      h16(_mm_extract_epi32(pairs, 2)) << 16);
            }
            s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
            s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
            // packs work per 128-bit lane: (q0 q1) -> 16-bit [q0l q1l q0h q1h], then with (q2 q3)
            // -> bytes in lane order 0,2,4,6 | 1,3,5,7 of 4-element groups; the dword permute
            // restores k order.
            const __m256i p01 = _mm256_packs_epi32(q[0], q[1]),
                          p23 = _mm256_packs_epi32(q[2], q[3]);
            const __m256i p = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p01, p23), perm);
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(xq + t * cols + b * 32), p);
            xd[t * nb + b] = d;
            xs[t * nb + b] = _mm_cvtsi128_si32(s4);
        }
}

void mm_quant_avx2(const QuantArgs& a, int64_t r0, int64_t r1) {
    if (a.kind >= kQuantKindQ4K) {
        mm_kquant_avx2(a, r0, r1);
        return;
    }
    int64_t pb;
    switch (a.kind) {
        case 0:
            pb = a.cols / a.group * (32 + (a.asym ? 32 : 0) + a.group * 8);
            break;
        case 1:
            pb = a.group == 0 ? 32 + a.cols * 16 : a.cols / 32 * kQ8BlockBytes;
            break;
        default:
            pb = fp8_blocks(a) * 64 + a.cols * 16;
            break;
    }
    for (int64_t p = r0 / kNr; p * kNr < r1; ++p) {
        const uint8_t* panel = a.data + p * pb;
        const int64_t base = p * kNr;
        const int64_t j0 = r0 > base ? r0 - base : 0;
        const int64_t j1 = r1 - base < kNr ? r1 - base : kNr;
        if (a.kind == 0 && !a.act_f32) {  // W4A8: tokens in fours share the weight unpacking
            const bool unpack =
                a.unpack != nullptr;  // the caller decides when it pays (matmul.cpp)
            // Tokens [t, t + NT) in one pass over the panel (the first pass unpacks, when
            // unpacking).
            const auto tile = [&]<int NT>(int64_t t) {
                float* y = a.y + t * a.ldy + base;
                const auto pass = [&]<Src kSrc>() {
                    if (a.asym)
                        q4_a8_panel<true, NT, kSrc>(a, panel, a.unpack, t, y, j0, j1);
                    else
                        q4_a8_panel<false, NT, kSrc>(a, panel, a.unpack, t, y, j0, j1);
                };
                if (!unpack)
                    pass.template operator()<Src::Nibbles>();
                else if (t == 0)
                    pass.template operator()<Src::NibblesUnpack>();
                else
                    pass.template operator()<Src::Unpacked>();
            };
            int64_t t = 0;
            // Five tokens (a 4-token speculative verify) in one pass: a 4 + 1 split streamed
            // the panel twice, and the lone token's pass cost twice a token of the 4-pass.
            // (for_token_tiles<4, 5> here made 8- and 16-token calls 12-15% slower.)
            if (a.n == 5 && !unpack) {
                tile.template operator()<5>(0);
                continue;
            }
            for (; t + 4 <= a.n; t += 4) tile.template operator()<4>(t);
            // The remainder in one pass too (each pass streams the panel's weights again).
            switch (a.n - t) {
                case 3:
                    tile.template operator()<3>(t);
                    break;
                case 2:
                    tile.template operator()<2>(t);
                    break;
                case 1:
                    tile.template operator()<1>(t);
                    break;
                default:
                    break;
            }
            continue;
        }
        if (a.kind == 2 && a.n > 1) {
            fp8_panel_multi(a, panel, base, j0, j1);
            continue;
        }
        if (a.kind == 1) {  // W8A8: up to 5 tokens per pass (more would spill the int32 sums)
            for_token_tiles<5>(a.n, [&]<int NT>(int64_t t) {
                float* y = a.y + t * a.ldy + base;
                if (a.group == 0)
                    q8_a8_panel<false, NT>(a, panel, t, y, j0, j1);
                else
                    q8_a8_panel<true, NT>(a, panel, t, y, j0, j1);
            });
            continue;
        }
        for (int64_t t = 0; t < a.n; ++t) {
            float* y = a.y + t * a.ldy + base;
            if (a.kind == 0) {
                if (a.asym) {
                    q4_a16_panel<true>(a, panel, t, y, j0, j1);
                } else {
                    q4_a16_panel<false>(a, panel, t, y, j0, j1);
                }
            } else {
                if (a.x_e4m3 && a.n == 1)
                    fp8_panel<true>(a, panel, a.x_e4m3, y, j0, j1);
                else
                    fp8_panel<false>(a, panel, a.x + t * a.cols, y, j0, j1);
            }
        }
    }
}

}  // namespace warden::kernels::detail
