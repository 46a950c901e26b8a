// AVX-512 kernels: VNNI for int4 (W4A8) and int8 (W8A8) weights, int4 dequantized to f32 (W4A16),
// and FP8 weights (layouts and the arithmetic contract: kernels/matmul_quant.h). Bit-exact with the
// scalar reference: the integer block dots are exact whatever the summation order, and the float
// steps per output are the contract's, in its order.
//
// Why VNNI: on AVX2 each 32-byte load of int4 weights costs about 9 vector instructions per token
// (and, shift, and to unpack; two vpmaddubsw and two vpaddw; a broadcast; a share of the block's
// int16 widening), which makes batch-1 decode issue-bound on small machines (docs/WEIGHT_QUANT.md).
// vpdpbusd multiplies u8 x s8 and adds four products into an int32 lane in one instruction, with
// no saturation and no widening step: each 64-byte load here costs one and, and per token one
// activation permute and two vpdpbusd.
//
// W4A8, one 64-byte load v = quads 2jj and 2jj+1 of a 32-block, two quads of 16 rows as
// nibbles: dword lane r of each 32-byte half holds row r in its low nibbles and row r+8 in its
// high nibbles. vpdpbusd has no saturation, so it can take the whole bytes: on v it sums
// (lo + 16 * hi) * x, on v & 0xf0 it sums 16 * hi * x; their difference is rows 0-7 and the
// second divided by 16 (exactly, an arithmetic shift) rows 8-15. That is one and per load instead
// of and, shift, and. The activations the two quads meet are dword 2jj of the block (x[8jj..8jj+3])
// in lanes 0-7 and dword 2jj+1 in lanes 8-15: one vpermd of the block's 32 activation bytes. At
// block end the two lane halves are added (two shuffles and an add give rows 0-15 in one
// register), then the contract's float step: acc = fma(float(i), d * xd, acc). Symmetric weights
// start the sums at the zero-point correction, so i = sum q * xq - 8 * xs as the contract says.
// W8A8: one 64-byte load = 4 k x 16 rows (dword = row); signed codes become unsigned by
// q ^ 0x80 = q + 128, and each block's sum starts at -128 * xs to take that back.
//
// Tested on CPUs without AVX-512 too: tests/kernels/test_matmul_quant_avx512_emulated.cpp compiles
// this file against SIMDe (portable implementations of the same intrinsics) and compares it
// with the scalar kernels bit for bit. Only the helpers with WARDEN_AVX512_EMULATE branches (here
// and in kernels/avx512_compat.h) differ between the two builds.
//
// ODR: helpers live in the anonymous namespace; only intrinsics headers and kernels_internal.h.
#include "kernels/avx512_compat.h"
#include "kernels/decode_tuning.h"
#include "kernels/kernels_internal.h"
#include "kernels/matmul_tile_avx512.h"

#ifndef WARDEN_AVX512_ENTRY
#define WARDEN_AVX512_ENTRY mm_quant_avx512
#endif

namespace warden::kernels::detail {
namespace {

constexpr int64_t kNr = 16;
// Batch 1 reads DecodeTuning::panels adjacent panels side by side and prefetches each panel
// stream DecodeTuning::*_prefetch bytes ahead (kernels/decode_tuning.h): the values that draw the
// most bandwidth depend on the CPU family. Sapphire Rapids-class VM, 1B-shaped decode matmuls at
// two threads: two panels took int4 23 -> 25.7-27.1 GB/s and int8 24.4-25.4 -> 26.8 GB/s, and with
// them the prefetch distance hardly mattered (none, 256, 512 within noise; prefetchnta 40% slower).
// AMD Zen 5 VM: the pair drew 10-20% less than one panel, and int4 did best without software
// prefetch (docs/WEIGHT_QUANT.md, Decode tuning per CPU). Several tokens always read one panel
// (compute-bound), prefetching at the table's distance.

// 64 weight bytes. In the symmetric int4 and the int8 layouts each block (int8 per channel: each
// panel) of codes follows 32 bytes of scales, so every other one starts 32 bytes past a cache line
// and each of its 64-byte loads spans two lines; kHalf reads two 32-byte halves instead (never
// split) and joins them. On the Zen 5 VM that drew 3-8% more
// DRAM bandwidth at batch 1 (decode_tuning.h says where it is used; batch 1 only).
template <bool kHalf>
inline zi load_bytes(const uint8_t* p) {
    if constexpr (kHalf)
        return WZ(mm512_inserti64x4)(
            WZ(mm512_castsi256_si512)(WZ(mm256_loadu_si256)(reinterpret_cast<const yi*>(p))),
            WZ(mm256_loadu_si256)(reinterpret_cast<const yi*>(p + 32)), 1);
    else
        return WZ(mm512_loadu_si512)(p);
}

// prefetcht0 of `lines` cache lines from p + dist; dist 0 = no software prefetch.
inline void prefetch(const uint8_t* p, int64_t dist, int lines) {
    if (dist == 0) return;
    for (int i = 0; i < lines; ++i) __builtin_prefetch(p + dist + i * 64, 0, 3);
}

// 16 u16 scales (f16 or bf16 bits) -> 16 f32, row r in lane r.
inline zf load_scales16(const uint8_t* p, bool bf16) {
    return bf16 ? bf16x16_to_f32(p) : f16x16_to_f32(p);
}

// v / 16 for lanes that are multiples of 16 (an arithmetic shift; exact). SIMDe 0.7.4 has no
// 512-bit srai_epi32, so the emulated build shifts lane by lane.
inline zi div16_exact(zi v) {
#ifdef WARDEN_AVX512_EMULATE
    alignas(64) int32_t i[kNr];
    WZ(mm512_store_si512)(i, v);
    for (int r = 0; r < kNr; ++r) i[r] >>= 4;
    return WZ(mm512_load_si512)(i);
#else
    return _mm512_srai_epi32(v, 4);
#endif
}

inline int32_t load4(const int8_t* p) {
    int32_t v;
    __builtin_memcpy(&v, p, 4);
    return v;
}

// vpermd indices for load jj: dword 2jj of the activation block in lanes 0-7, 2jj+1 in 8-15.
inline zi quad_pair_index(int jj) {
    alignas(64) int32_t idx[kNr];
    for (int r = 0; r < kNr; ++r) idx[r] = 2 * jj + (r < 8 ? 0 : 1);
    return WZ(mm512_load_si512)(idx);
}

// Pins v to a register at this point (see the AVX2 kernel: keeps GCC from re-associating the
// accumulator chains into trees that need more registers than there are).
#ifdef WARDEN_AVX512_EMULATE
#define WARDEN_KEEP_IN_REG(v) ((void)0)
#else
#define WARDEN_KEEP_IN_REG(v) asm("" : "+v"(v))
#endif

// NT tokens (t .. t+NT-1) share each load of the panel's weights, and NP adjacent panels (rows
// base .. base + 16 * NP - 1, pb bytes apart) are read block by block side by side; each (row,
// token)'s arithmetic is the NT = NP = 1 sequence, so results do not depend on the blocking.
// Why NP: on the Sapphire Rapids-class VM (decode_tuning.h), one core draws more of the memory
// bandwidth reading two panel streams than one, and the blocks of two panels are independent work
// for the out-of-order core while a load misses (in L2 the pair also computes faster: 44 -> 51
// GB/s).
template <bool kAsym, int NT, int NP, bool kHalf>
void q4_vnni_panel(const QuantArgs& a, const uint8_t* panel, int64_t pb, int64_t t, float* y,
                   int64_t j0, int64_t j1, int64_t pf) {
    const int64_t cols = a.cols, G = a.group, gb = 32 + (kAsym ? 32 : 0) + G * 8, ng = cols / G,
                  spg = G / 32;
    const int64_t nb = cols / 32;
    const zi mhi = WZ(mm512_set1_epi8)(static_cast<char>(0xf0));
    const zi perm[4] = {quad_pair_index(0), quad_pair_index(1), quad_pair_index(2),
                        quad_pair_index(3)};
    zf acc[NP][NT];
    for (int q = 0; q < NP; ++q)
        for (int i = 0; i < NT; ++i) acc[q][i] = WZ(mm512_setzero_ps)();
    for (int64_t g = 0; g < ng; ++g) {
        zf d[NP], m[NP];
        for (int q = 0; q < NP; ++q) {
            const uint8_t* blk = panel + q * pb + g * gb;
            d[q] = load_scales16(blk, a.bf16_scales);
            m[q] = kAsym ? load_scales16(blk + 32, a.bf16_scales) : WZ(mm512_setzero_ps)();
        }
        for (int64_t sb = 0; sb < spg; ++sb) {
            const int64_t b = g * spg + sb;
            zi xblk[NT];
            int32_t xs[NT];
            for (int i = 0; i < NT; ++i) {
                xs[i] = kAsym ? 0 : a.xs[(t + i) * nb + b];
                xblk[i] = WZ(mm512_castsi256_si512)(WZ(mm256_loadu_si256)(
                    reinterpret_cast<const yi*>(a.xq + (t + i) * cols + b * 32)));
            }
            for (int q = 0; q < NP; ++q) {
                const uint8_t* qq = panel + q * pb + g * gb + (kAsym ? 64 : 32) + sb * 256;
                prefetch(qq, pf, 4);
                zi sv[NT], sh[NT];
                for (int i = 0; i < NT; ++i) {
                    // Symmetric: rows 0-7 come out as sv - sh, rows 8-15 as sh / 16, so starting sh
                    // at -128 * xs and sv at -136 * xs gives each -8 * xs. Only lanes 0-7 carry it:
                    // the lanes of the two quads are added once at block end.
                    sv[i] = WZ(mm512_maskz_set1_epi32)(0x00ff, -136 * xs[i]);
                    sh[i] = WZ(mm512_maskz_set1_epi32)(0x00ff, -128 * xs[i]);
                }
#pragma GCC unroll 4
                for (int jj = 0; jj < 4; ++jj) {
                    const zi v = load_bytes<kHalf>(qq + jj * 64);
                    const zi h = WZ(mm512_and_si512)(v, mhi);  // 16 * (rows 8-15 codes)
                    for (int i = 0; i < NT; ++i) {
                        const zi xv = WZ(mm512_permutexvar_epi32)(perm[jj], xblk[i]);
                        sv[i] = WZ(mm512_dpbusd_epi32)(sv[i], v, xv);  // rows 0-7 + 16 * rows 8-15
                        sh[i] = WZ(mm512_dpbusd_epi32)(sh[i], h, xv);  // 16 * rows 8-15
                        WARDEN_KEEP_IN_REG(sv[i]);
                        WARDEN_KEEP_IN_REG(sh[i]);
                    }
                }
                for (int i = 0; i < NT; ++i) {
                    const int64_t xb = (t + i) * nb + b;
                    const zi lo = WZ(mm512_sub_epi32)(sv[i], sh[i]);  // rows 0-7
                    const zi hi = div16_exact(sh[i]);                 // rows 8-15
                    // Lanes 0-7 + lanes 8-15 of lo = rows 0-7; the same of hi = rows 8-15.
                    const zi sum = WZ(mm512_add_epi32)(WZ(mm512_shuffle_i64x2)(lo, hi, 0x44),
                                                       WZ(mm512_shuffle_i64x2)(lo, hi, 0xee));
                    const zf xdv = WZ(mm512_set1_ps)(a.xd[xb]);
                    acc[q][i] = fmadd(i32_to_f32(sum), WZ(mm512_mul_ps)(d[q], xdv), acc[q][i]);
                    if (kAsym) {
                        const zf xsv = WZ(mm512_set1_ps)(static_cast<float>(a.xs[xb]));
                        acc[q][i] = fmadd(xsv, WZ(mm512_mul_ps)(m[q], xdv), acc[q][i]);
                    }
                }
            }
        }
    }
    for (int q = 0; q < NP; ++q)
        for (int i = 0; i < NT; ++i)
            store_lanes(acc[q][i], y + i * a.ldy + q * kNr, q == 0 ? j0 : 0,
                        q == NP - 1 ? j1 : kNr);
}

// Several tokens (t .. t+NT-1, up to kMultiTokens) of one panel, the layout the other way round
// from q4_vnni_panel: each 32-block's four 64-byte loads and their nibble masks stay in eight
// registers while the NT tokens run through them one after another, so a token needs only its two
// block sums and its accumulator, and eight tokens fit the 32 registers (q4_vnni_panel keeps both
// sums of every token live across the loads: beyond four tokens it spills). Each (row, token)'s
// arithmetic is q4_vnni_panel's NT = 1 sequence, so results do not depend on NT.
template <bool kAsym, int NT>
void q4_vnni_multi(const QuantArgs& a, const uint8_t* panel, int64_t t, float* y, int64_t j0,
                   int64_t j1, int64_t pf) {
    const int64_t cols = a.cols, G = a.group, gb = 32 + (kAsym ? 32 : 0) + G * 8, ng = cols / G,
                  spg = G / 32, nb = cols / 32;
    const zi mhi = WZ(mm512_set1_epi8)(static_cast<char>(0xf0));
    const zi perm[4] = {quad_pair_index(0), quad_pair_index(1), quad_pair_index(2),
                        quad_pair_index(3)};
    zf acc[NT];
    for (int i = 0; i < NT; ++i) acc[i] = WZ(mm512_setzero_ps)();
    for (int64_t g = 0; g < ng; ++g) {
        const uint8_t* blk = panel + g * gb;
        const zf d = load_scales16(blk, a.bf16_scales);
        const zf m = kAsym ? load_scales16(blk + 32, a.bf16_scales) : WZ(mm512_setzero_ps)();
        for (int64_t sb = 0; sb < spg; ++sb) {
            const int64_t b = g * spg + sb;
            const uint8_t* qq = blk + (kAsym ? 64 : 32) + sb * 256;
            prefetch(qq, pf, 4);
            zi v[4], h[4];
#pragma GCC unroll 4
            for (int jj = 0; jj < 4; ++jj) {
                v[jj] = WZ(mm512_loadu_si512)(qq + jj * 64);
                h[jj] = WZ(mm512_and_si512)(v[jj], mhi);  // 16 * (rows 8-15 codes)
            }
            for (int i = 0; i < NT; ++i) {
                const int64_t xb = (t + i) * nb + b;
                const zi xblk = WZ(mm512_castsi256_si512)(WZ(mm256_loadu_si256)(
                    reinterpret_cast<const yi*>(a.xq + (t + i) * cols + b * 32)));
                // The zero-point start of q4_vnni_panel (symmetric only).
                const int32_t xs = kAsym ? 0 : a.xs[xb];
                zi sv = WZ(mm512_maskz_set1_epi32)(0x00ff, -136 * xs);
                zi sh = WZ(mm512_maskz_set1_epi32)(0x00ff, -128 * xs);
#pragma GCC unroll 4
                for (int jj = 0; jj < 4; ++jj) {
                    const zi xv = WZ(mm512_permutexvar_epi32)(perm[jj], xblk);
                    sv = WZ(mm512_dpbusd_epi32)(sv, v[jj], xv);
                    sh = WZ(mm512_dpbusd_epi32)(sh, h[jj], xv);
                }
                const zi lo = WZ(mm512_sub_epi32)(sv, sh);  // rows 0-7
                const zi hi = div16_exact(sh);              // rows 8-15
                const zi sum = WZ(mm512_add_epi32)(WZ(mm512_shuffle_i64x2)(lo, hi, 0x44),
                                                   WZ(mm512_shuffle_i64x2)(lo, hi, 0xee));
                const zf xdv = WZ(mm512_set1_ps)(a.xd[xb]);
                acc[i] = fmadd(i32_to_f32(sum), WZ(mm512_mul_ps)(d, xdv), acc[i]);
                if (kAsym) {
                    const zf xsv = WZ(mm512_set1_ps)(static_cast<float>(a.xs[xb]));
                    acc[i] = fmadd(xsv, WZ(mm512_mul_ps)(m, xdv), acc[i]);
                }
                WARDEN_KEEP_IN_REG(acc[i]);
            }
        }
    }
    for (int i = 0; i < NT; ++i) store_lanes(acc[i], y + i * a.ldy, j0, j1);
}

// kGroup: int8-g32, each 32-block's 16 scales ahead of its 512 code bytes, folded into the
// block's fma; otherwise one scale per row, applied at the end (matmul_quant.h). NP adjacent panels
// (pb bytes apart) are read side by side, as in q4_vnni_panel.
template <bool kGroup, int NP, bool kHalf>
void q8_vnni_panel(const QuantArgs& a, const uint8_t* panel, int64_t pb, int64_t t, float* y,
                   int64_t j0, int64_t j1, int64_t pf) {
    const int64_t cols = a.cols, nb = cols / 32;
    const int8_t* xq = a.xq + t * cols;
    const zi flip = WZ(mm512_set1_epi8)(static_cast<char>(0x80));
    zf acc[NP];
    for (int q = 0; q < NP; ++q) acc[q] = WZ(mm512_setzero_ps)();
    for (int64_t b = 0; b < nb; ++b) {
        const zi s0 = WZ(mm512_set1_epi32)(-128 * a.xs[t * nb + b]);
        const zf xdv = WZ(mm512_set1_ps)(a.xd[t * nb + b]);
        for (int q = 0; q < NP; ++q) {
            const uint8_t* qq =
                (kGroup ? panel + b * kQ8BlockBytes + 32 : panel + 32 + b * 512) + q * pb;
            prefetch(qq, pf, kGroup ? 9 : 8);  // 544 B a block with scales
            zi s = s0;
#pragma GCC unroll 8
            for (int j = 0; j < 8; ++j) {
                const zi v = WZ(mm512_xor_si512)(load_bytes<kHalf>(qq + j * 64), flip);
                s = WZ(mm512_dpbusd_epi32)(s, v, WZ(mm512_set1_epi32)(load4(xq + b * 32 + 4 * j)));
            }
            if constexpr (kGroup)
                acc[q] =
                    fmadd(i32_to_f32(s),
                          WZ(mm512_mul_ps)(load_scales16(qq - 32, a.bf16_scales), xdv), acc[q]);
            else
                acc[q] = fmadd(i32_to_f32(s), xdv, acc[q]);
        }
    }
    for (int q = 0; q < NP; ++q) {
        const int64_t q0 = q == 0 ? j0 : 0, q1 = q == NP - 1 ? j1 : kNr;
        if constexpr (kGroup)
            store_lanes(acc[q], y + q * kNr, q0, q1);
        else
            store_lanes(WZ(mm512_mul_ps)(acc[q], load_scales16(panel + q * pb, a.bf16_scales)),
                        y + q * kNr, q0, q1);
    }
}

// Several tokens (t .. t+NT-1) of one panel: each 64-byte load of codes (and its sign flip, and
// a block's 16 group scales) is shared by the NT tokens, which the one-token kernel above repeats
// per token. Each (row, token)'s arithmetic is the one-token sequence (its block sum from
// -128 * xs, then the same fma per block and, per channel, the same final multiply), so the
// results do not depend on NT.
template <bool kGroup, int NT>
void q8_vnni_multi(const QuantArgs& a, const uint8_t* panel, int64_t t, float* y, int64_t j0,
                   int64_t j1, int64_t pf) {
    const int64_t cols = a.cols, nb = cols / 32;
    const int8_t* xq = a.xq + t * cols;
    const zi flip = WZ(mm512_set1_epi8)(static_cast<char>(0x80));
    zf acc[NT];
    for (int i = 0; i < NT; ++i) acc[i] = WZ(mm512_setzero_ps)();
    for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* qq = kGroup ? panel + b * kQ8BlockBytes + 32 : panel + 32 + b * 512;
        prefetch(qq, pf, kGroup ? 9 : 8);
        zi s[NT];
        for (int i = 0; i < NT; ++i) s[i] = WZ(mm512_set1_epi32)(-128 * a.xs[(t + i) * nb + b]);
#pragma GCC unroll 8
        for (int j = 0; j < 8; ++j) {
            const zi v = WZ(mm512_xor_si512)(WZ(mm512_loadu_si512)(qq + j * 64), flip);
            for (int i = 0; i < NT; ++i) {
                s[i] = WZ(mm512_dpbusd_epi32)(
                    s[i], v, WZ(mm512_set1_epi32)(load4(xq + i * cols + b * 32 + 4 * j)));
                WARDEN_KEEP_IN_REG(s[i]);
            }
        }
        const zf d = kGroup ? load_scales16(qq - 32, a.bf16_scales) : WZ(mm512_setzero_ps)();
        for (int i = 0; i < NT; ++i) {
            const zf xdv = WZ(mm512_set1_ps)(a.xd[(t + i) * nb + b]);
            acc[i] = fmadd(i32_to_f32(s[i]), kGroup ? WZ(mm512_mul_ps)(d, xdv) : xdv, acc[i]);
        }
    }
    const zf scale = kGroup ? WZ(mm512_setzero_ps)() : load_scales16(panel, a.bf16_scales);
    for (int i = 0; i < NT; ++i)
        store_lanes(kGroup ? acc[i] : WZ(mm512_mul_ps)(acc[i], scale), y + i * a.ldy, j0, j1);
}

// Scale vectors at the front of an FP8 panel: one per channel, one per block block-scaled.
inline int64_t fp8_blocks(const QuantArgs& a) {
    return a.group ? (a.cols + a.group - 1) / a.group : 1;
}

// FP8, one token (a.n == 1): the contract's four chains (matmul_quant.h), acc[k % 4] =
// fma(e4m3(code), x[k], acc[k % 4]), over 16 rows per register, then ((c0 + c1) + (c2 + c3)) * s:
// the AVX2 kernel's arithmetic in its order, so the results are its bits. Each 16 codes cost one
// widening load, a shift, an and and a multiply (AVX2: two shuffles, two shifts, two ands, two
// multiplies for the same 16), which is what bounded fp8 decode there (compute, not memory). NP
// adjacent panels side by side, as in q4_vnni_panel. Several tokens: fp8_panel_multi below.
// kRaw: the codes widened without their * 2^120 against x * 2^120 (QuantArgs::x_e4m3, one
// token): the same products exactly, one multiply per 16 weights fewer.
template <int NP, bool kRaw>
void fp8_panel(const QuantArgs& a, const uint8_t* panel, int64_t pb, int64_t t, float* y,
               int64_t j0, int64_t j1, int64_t pf) {
    const int64_t cols = a.cols;
    const float* x = kRaw ? a.x_e4m3 : a.x + t * cols;
    const auto widen = [](const uint8_t* p) { return kRaw ? e4m3x16_raw(p) : e4m3x16_to_f32(p); };
    // Block-scaled (a.group > 0): the chains run block by block, each block's sum folded into tot
    // with its scales, fma(sum, s, tot); the codes follow the nb scale vectors.
    const int64_t nb = fp8_blocks(a);
    const int64_t gc = a.group ? a.group : cols;
    const uint8_t* qs = panel + nb * 64;
    zf acc[NP][4], tot[NP];
    for (int q = 0; q < NP; ++q) tot[q] = WZ(mm512_setzero_ps)();
    for (int64_t b = 0; b < nb; ++b) {
        const int64_t k1 = cols - b * gc < gc ? cols : (b + 1) * gc;
        for (int q = 0; q < NP; ++q)
            for (int i = 0; i < 4; ++i) acc[q][i] = WZ(mm512_setzero_ps)();
        int64_t k = b * gc;
        for (; k + 4 <= k1; k += 4) {
            for (int q = 0; q < NP; ++q)
                prefetch(qs + q * pb + k * 16, pf, 1);  // 4 columns = a line
            for (int i = 0; i < 4; ++i) {
                const zf xb = WZ(mm512_set1_ps)(x[k + i]);
                for (int q = 0; q < NP; ++q)
                    acc[q][i] = fmadd(widen(qs + q * pb + (k + i) * 16), xb, acc[q][i]);
            }
        }
        for (; k < k1; ++k) {
            const zf xb = WZ(mm512_set1_ps)(x[k]);
            for (int q = 0; q < NP; ++q)
                acc[q][k % 4] = fmadd(widen(qs + q * pb + k * 16), xb, acc[q][k % 4]);
        }
        for (int q = 0; q < NP; ++q) {
            const zf sum = WZ(mm512_add_ps)(WZ(mm512_add_ps)(acc[q][0], acc[q][1]),
                                            WZ(mm512_add_ps)(acc[q][2], acc[q][3]));
            const zf s =
                WZ(mm512_loadu_ps)(reinterpret_cast<const float*>(panel + q * pb + b * 64));
            tot[q] = a.group ? fmadd(sum, s, tot[q]) : WZ(mm512_mul_ps)(sum, s);
        }
    }
    for (int q = 0; q < NP; ++q)
        store_lanes(tot[q], y + q * kNr, q == 0 ? j0 : 0, q == NP - 1 ? j1 : kNr);
}

// FP8 with several tokens (prefill, batched decode, a --prefill-weights fp8 copy). Widening a code
// costs four instructions per 16 weights, so each block of kFp8Kc columns of the panel is widened
// once into f32 scratch (16 KiB, in L1) and reused by every token. Then the block is an f32 GEMM
// whose outputs each keep the contract's four chains: a register tile of kFp8Mt tokens x 4 chains
// (24 zmm accumulators) meets, per column, one weight load, kFp8Mt broadcasts and kFp8Mt FMAs
// (the AVX2 kernel: two weight loads and a broadcast per two ymm FMAs, one token at a time).
// Chain i takes the columns k % 4 == i in k order; kFp8Kc is a multiple of 4, so every block
// starts at chain 0, and the tokens' chains wait in scratch between blocks. The sums and the scale
// are applied as fp8_panel does, so the results are its bits (and the scalar kernel's).
constexpr int64_t kFp8Kc = 256;
constexpr int kFp8Mt = 6;
constexpr int64_t kFp8Tokens = 10 * kFp8Mt;  // tokens whose chains wait in scratch (15 KiB)

// M tokens' chains (chains: 4 x 16 floats per token) continued over columns [0, kn) of the widened
// block wbuf ([kn][16] f32); x: token 0's columns of the block, tokens ldx apart.
template <int M>
void fp8_micro(const float* wbuf, int64_t kn, const float* x, int64_t ldx, float* chains) {
    zf c[M][4];
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m)
#pragma GCC unroll 4
        for (int i = 0; i < 4; ++i) c[m][i] = WZ(mm512_load_ps)(chains + m * 64 + i * kLanes);
    int64_t k = 0;
    for (; k + 4 <= kn; k += 4) {
#pragma GCC unroll 4
        for (int i = 0; i < 4; ++i) {
            const zf w = WZ(mm512_load_ps)(wbuf + (k + i) * kLanes);
#pragma GCC unroll 8
            for (int m = 0; m < M; ++m)
                c[m][i] = fmadd(w, WZ(mm512_set1_ps)(x[m * ldx + k + i]), c[m][i]);
        }
    }
#pragma GCC unroll 3
    for (int i = 0; i < 3; ++i) {  // the last block's tail: columns k + i of chain i
        if (k + i >= kn) break;
        const zf w = WZ(mm512_load_ps)(wbuf + (k + i) * kLanes);
#pragma GCC unroll 8
        for (int m = 0; m < M; ++m)
            c[m][i] = fmadd(w, WZ(mm512_set1_ps)(x[m * ldx + k + i]), c[m][i]);
    }
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m)
#pragma GCC unroll 4
        for (int i = 0; i < 4; ++i) WZ(mm512_store_ps)(chains + m * 64 + i * kLanes, c[m][i]);
}

void fp8_micro_any(int mt, const float* wbuf, int64_t kn, const float* x, int64_t ldx,
                   float* chains) {
    switch (mt) {
        case 6:
            fp8_micro<6>(wbuf, kn, x, ldx, chains);
            break;
        case 5:
            fp8_micro<5>(wbuf, kn, x, ldx, chains);
            break;
        case 4:
            fp8_micro<4>(wbuf, kn, x, ldx, chains);
            break;
        case 3:
            fp8_micro<3>(wbuf, kn, x, ldx, chains);
            break;
        case 2:
            fp8_micro<2>(wbuf, kn, x, ldx, chains);
            break;
        default:
            fp8_micro<1>(wbuf, kn, x, ldx, chains);
            break;
    }
}

// All a.n tokens of one panel; y: token 0's row 0 of the panel; rows [j0, j1) are written.
// Block-scaled (a.group > 0): widened blocks of whole scale blocks, each scale block's chains
// started from zero and folded into the token's sums in `tots` with its scales, as fp8_panel.
void fp8_panel_multi(const QuantArgs& a, const uint8_t* panel, float* y, int64_t j0, int64_t j1,
                     int64_t pf) {
    const int64_t cols = a.cols;
    const int64_t nb = fp8_blocks(a);
    const int64_t kc = a.group ? kFp8Kc / a.group * a.group : kFp8Kc;
    const uint8_t* qs = panel + nb * 64;
    alignas(64) float wbuf[kFp8Kc * kLanes];
    alignas(64) float chains[kFp8Tokens * 64];
    alignas(64) float tots[kFp8Tokens * kLanes];
    const zf s = WZ(mm512_loadu_ps)(reinterpret_cast<const float*>(panel));
    for (int64_t t0 = 0; t0 < a.n; t0 += kFp8Tokens) {
        const int64_t tn = a.n - t0 < kFp8Tokens ? a.n - t0 : kFp8Tokens;
        for (int64_t i = 0; i < tn * 64; i += kLanes)
            WZ(mm512_store_ps)(chains + i, WZ(mm512_setzero_ps)());
        for (int64_t i = 0; i < tn * kLanes; i += kLanes)
            WZ(mm512_store_ps)(tots + i, WZ(mm512_setzero_ps)());
        for (int64_t kb = 0; kb < cols; kb += kc) {
            const int64_t kn = cols - kb < kc ? cols - kb : kc;
            for (int64_t k = 0; k < kn; ++k) {
                if ((k & 3) == 0) prefetch(qs + (kb + k) * 16, pf, 1);
                WZ(mm512_store_ps)(wbuf + k * kLanes, e4m3x16_to_f32(qs + (kb + k) * 16));
            }
            for (int64_t t = 0; t < tn; t += kFp8Mt) {
                const int mt = static_cast<int>(tn - t < kFp8Mt ? tn - t : kFp8Mt);
                const float* x = a.x + (t0 + t) * cols + kb;
                if (a.group == 0) {
                    fp8_micro_any(mt, wbuf, kn, x, cols, chains + t * 64);
                    continue;
                }
                for (int64_t g0 = 0; g0 < kn; g0 += a.group) {
                    const int64_t gn = kn - g0 < a.group ? kn - g0 : a.group;
                    fp8_micro_any(mt, wbuf + g0 * kLanes, gn, x + g0, cols, chains + t * 64);
                    const zf sb = WZ(mm512_loadu_ps)(
                        reinterpret_cast<const float*>(panel + (kb + g0) / a.group * 64));
                    for (int m = 0; m < mt; ++m) {
                        float* c = chains + (t + m) * 64;
                        const zf sum = WZ(mm512_add_ps)(
                            WZ(mm512_add_ps)(WZ(mm512_load_ps)(c), WZ(mm512_load_ps)(c + 16)),
                            WZ(mm512_add_ps)(WZ(mm512_load_ps)(c + 32), WZ(mm512_load_ps)(c + 48)));
                        float* tt = tots + (t + m) * kLanes;
                        WZ(mm512_store_ps)(tt, fmadd(sum, sb, WZ(mm512_load_ps)(tt)));
                        for (int i = 0; i < 64; i += kLanes)
                            WZ(mm512_store_ps)(c + i, WZ(mm512_setzero_ps)());
                    }
                }
            }
        }
        for (int64_t t = 0; t < tn; ++t) {  // after the last block (or none, when cols is 0)
            if (a.group) {
                store_lanes(WZ(mm512_load_ps)(tots + t * kLanes), y + (t0 + t) * a.ldy, j0, j1);
                continue;
            }
            const float* c = chains + t * 64;
            const zf sum = WZ(mm512_add_ps)(
                WZ(mm512_add_ps)(WZ(mm512_load_ps)(c), WZ(mm512_load_ps)(c + 16)),
                WZ(mm512_add_ps)(WZ(mm512_load_ps)(c + 32), WZ(mm512_load_ps)(c + 48)));
            store_lanes(WZ(mm512_mul_ps)(sum, s), y + (t0 + t) * a.ldy, j0, j1);
        }
    }
}

// W4A16 (act_f32): w = (q - 8) * d or fma(q, d, m) in f32, then the plain f32 chain over k
// (matmul_quant.h), so a dequantized block is exactly an f32 weight block. A quad (32 bytes: byte
// lane * 4 + kk holds row lane in its low nibble, row lane + 8 in its high nibble, at column kk)
// is broadcast to both 256-bit halves of a zmm; one variable shift per column then brings row r's
// code to the low bits of lane r (lanes 0-7 by 8 * kk, lanes 8-15 by 8 * kk + 4), and vpermps,
// which reads only the low four bits of each index, looks up the code's value as f32 (q - 8, or q
// for asymmetric weights) in a 16-entry register: no mask, no subtraction, no conversion. Three
// instructions per 16 weights before the scale (AVX2: nine, as two halves).
struct Q4A16Dequant {
    zi shift[4];
    zf codes;  // f32 value of codes 0..15: q - 8 (symmetric) or q (asymmetric)
    explicit Q4A16Dequant(bool asym) {
        for (int kk = 0; kk < 4; ++kk)
            shift[kk] = WZ(mm512_setr_epi32)(8 * kk, 8 * kk, 8 * kk, 8 * kk, 8 * kk, 8 * kk, 8 * kk,
                                             8 * kk, 8 * kk + 4, 8 * kk + 4, 8 * kk + 4, 8 * kk + 4,
                                             8 * kk + 4, 8 * kk + 4, 8 * kk + 4, 8 * kk + 4);
        const float o = asym ? 0.0f : -8.0f;
        codes = WZ(mm512_setr_ps)(o, o + 1, o + 2, o + 3, o + 4, o + 5, o + 6, o + 7, o + 8, o + 9,
                                  o + 10, o + 11, o + 12, o + 13, o + 14, o + 15);
    }
    static zi quad(const uint8_t* p) {
        return WZ(mm512_broadcast_i64x4)(WZ(mm256_loadu_si256)(reinterpret_cast<const yi*>(p)));
    }
    // Rows 0-15 at column kk of the quad v, with the group's scales d (and mins m).
    template <bool kAsym>
    zf weights(zi v, int kk, zf d, zf m) const {
        const zf q = WZ(mm512_permutexvar_ps)(WZ(mm512_srlv_epi32)(v, shift[kk]), codes);
        if constexpr (kAsym)
            return fmadd(q, d, m);
        else
            return WZ(mm512_mul_ps)(q, d);
    }
};

// One token: NP adjacent panels side by side (NP independent chains, each panel's one chain
// would otherwise wait on the FMA latency), each quad dequantized in registers as it is used.
template <bool kAsym, int NP>
void q4_a16_gemv(const QuantArgs& a, const uint8_t* panel, int64_t pb, float* y, int64_t j0,
                 int64_t j1, int64_t pf) {
    const int64_t G = a.group, gb = 32 + (kAsym ? 32 : 0) + G * 8, ng = a.cols / G;
    const Q4A16Dequant dq(kAsym);
    zf acc[NP];
    for (int q = 0; q < NP; ++q) acc[q] = WZ(mm512_setzero_ps)();
    for (int64_t g = 0; g < ng; ++g) {
        zf d[NP], m[NP];
        for (int q = 0; q < NP; ++q) {
            const uint8_t* blk = panel + q * pb + g * gb;
            d[q] = load_scales16(blk, a.bf16_scales);
            m[q] = kAsym ? load_scales16(blk + 32, a.bf16_scales) : WZ(mm512_setzero_ps)();
        }
        const float* xg = a.x + g * G;
        const int64_t qoff = g * gb + (kAsym ? 64 : 32);
        for (int64_t j = 0; j < G / 4; ++j) {
            zi v[NP];
            for (int q = 0; q < NP; ++q) {
                if ((j & 1) == 0) prefetch(panel + q * pb + qoff + j * 32, pf, 1);
                v[q] = Q4A16Dequant::quad(panel + q * pb + qoff + j * 32);
            }
            for (int kk = 0; kk < 4; ++kk) {
                const zf xb = WZ(mm512_set1_ps)(xg[4 * j + kk]);
                for (int q = 0; q < NP; ++q)
                    acc[q] = fmadd(dq.weights<kAsym>(v[q], kk, d[q], m[q]), xb, acc[q]);
            }
        }
    }
    for (int q = 0; q < NP; ++q)
        store_lanes(acc[q], y + q * kNr, q == 0 ? j0 : 0, q == NP - 1 ? j1 : kNr);
}

// Several tokens: each block of kFp8Kc columns (a multiple of every group size) of a pair of
// panels is dequantized once into f32 scratch (32 KiB) and runs the f32 register tile of
// matmul_avx512.cpp (kernels/matmul_tile_avx512.h) over all tokens.
template <bool kAsym>
void q4_a16_gemm(const QuantArgs& a, int64_t r0, int64_t r1, int64_t pb) {
    const int64_t G = a.group, gb = 32 + (kAsym ? 32 : 0) + G * 8, cols = a.cols;
    const Q4A16Dequant dq(kAsym);
    alignas(64) float wbuf[2 * kFp8Kc * kLanes];
    const int64_t p_end = (r1 + kNr - 1) / kNr;
    for (int64_t p = r0 / kNr; p < p_end; p += 2) {
        const int np = p + 2 <= p_end ? 2 : 1;
        for (int64_t kb = 0; kb < cols; kb += kFp8Kc) {
            const int64_t kc = cols - kb < kFp8Kc ? cols - kb : kFp8Kc;
            for (int q = 0; q < np; ++q) {
                const uint8_t* panel = a.data + (p + q) * pb;
                float* wq = wbuf + q * kc * kLanes;
                for (int64_t g = kb / G; g < (kb + kc) / G; ++g) {
                    const uint8_t* blk = panel + g * gb;
                    const zf d = load_scales16(blk, a.bf16_scales);
                    const zf m =
                        kAsym ? load_scales16(blk + 32, a.bf16_scales) : WZ(mm512_setzero_ps)();
                    const uint8_t* qs = blk + (kAsym ? 64 : 32);
                    float* wg = wq + (g * G - kb) * kLanes;
                    for (int64_t j = 0; j < G / 4; ++j) {
                        const zi v = Q4A16Dequant::quad(qs + j * 32);
                        for (int kk = 0; kk < 4; ++kk) WZ(mm512_store_ps)
                        (wg + (4 * j + kk) * kLanes, dq.weights<kAsym>(v, kk, d, m));
                    }
                }
            }
            for (int64_t t = 0; t < a.n; t += tile512::kMt) {
                const int mt = static_cast<int>(a.n - t < tile512::kMt ? a.n - t : tile512::kMt);
                tile512::tile(mt, np, kc, wbuf, kc * kLanes, a.x + t * cols + kb, cols,
                              a.y + t * a.ldy + p * kNr, a.ldy, p * kNr, r0, r1, kb > 0);
            }
        }
    }
}

template <bool kAsym>
void q4_a16(const QuantArgs& a, int64_t r0, int64_t r1, int64_t pb, int64_t pf) {
    if (a.n > 1) {
        q4_a16_gemm<kAsym>(a, r0, r1, pb);
        return;
    }
    for (int64_t p = r0 / kNr; p * kNr < r1;) {
        const int64_t base = p * kNr;
        const int64_t j0 = r0 > base ? r0 - base : 0;
        const int64_t left = (r1 - base + kNr - 1) / kNr;  // panels left, this one included
        const int np = left >= 4 ? 4 : static_cast<int>(left);
        const int64_t j1 = r1 - (base + (np - 1) * kNr) < kNr ? r1 - (base + (np - 1) * kNr) : kNr;
        const uint8_t* panel = a.data + p * pb;
        float* y = a.y + base;
        switch (np) {
            case 4:
                q4_a16_gemv<kAsym, 4>(a, panel, pb, y, j0, j1, pf);
                break;
            case 3:
                q4_a16_gemv<kAsym, 3>(a, panel, pb, y, j0, j1, pf);
                break;
            case 2:
                q4_a16_gemv<kAsym, 2>(a, panel, pb, y, j0, j1, pf);
                break;
            default:
                q4_a16_gemv<kAsym, 1>(a, panel, pb, y, j0, j1, pf);
                break;
        }
        p += np;
    }
}

// Several tokens: ceil(n / kMultiTokens) passes over the panel, of as equal sizes as possible
// (17 tokens: 6 + 6 + 5), since a pass of few tokens costs nearly as much as a full one: the
// panel's loads, masks and scales are shared by fewer tokens. kernel.template operator()<NT>(t)
// runs tokens t .. t + NT - 1.
constexpr int64_t kMultiTokens = 8;

template <typename K>
void multi_pass(const QuantArgs& a, const K& kernel) {
    const int64_t passes = (a.n + kMultiTokens - 1) / kMultiTokens;
    for (int64_t p = 0, t = 0; p < passes; ++p) {
        // The first n % passes passes take one token more than the rest.
        const int64_t nt = a.n / passes + (p < a.n % passes ? 1 : 0);
        switch (nt) {
            case 8:
                kernel.template operator()<8>(t);
                break;
            case 7:
                kernel.template operator()<7>(t);
                break;
            case 6:
                kernel.template operator()<6>(t);
                break;
            case 5:
                kernel.template operator()<5>(t);
                break;
            case 4:
                kernel.template operator()<4>(t);
                break;
            case 3:
                kernel.template operator()<3>(t);
                break;
            case 2:
                kernel.template operator()<2>(t);
                break;
            default:
                kernel.template operator()<1>(t);
                break;
        }
        t += nt;
    }
}

void q8_multi(const QuantArgs& a, const uint8_t* panel, int64_t base, int64_t j0, int64_t j1,
              int64_t pf) {
    multi_pass(a, [&]<int NT>(int64_t t) {
        float* y = a.y + t * a.ldy + base;
        if (a.group == 0)
            q8_vnni_multi<false, NT>(a, panel, t, y, j0, j1, pf);
        else
            q8_vnni_multi<true, NT>(a, panel, t, y, j0, j1, pf);
    });
}

}  // namespace

void WARDEN_AVX512_ENTRY(const QuantArgs& a, int64_t r0, int64_t r1) {
#ifndef WARDEN_AVX512_EMULATE  // the emulated K-quant kernel has its own entry (tests)
    if (a.kind >= kQuantKindQ4K) {
        mm_kquant_avx512(a, r0, r1);
        return;
    }
#endif
    const bool w4a8 = a.kind == 0 && !a.act_f32, fp8 = a.kind == 2;
    const int64_t pb = fp8            ? fp8_blocks(a) * 64 + a.cols * 16
                       : a.kind == 0  ? a.cols / a.group * (32 + (a.asym ? 32 : 0) + a.group * 8)
                       : a.group == 0 ? 32 + a.cols * 16
                                      : a.cols / 32 * kQ8BlockBytes;
    const DecodeTuning& tune = decode_tuning();
#ifndef WARDEN_AVX512_EMULATE  // the emulated build runs on CPUs that may lack AVX2
    if (w4a8 && a.n == 1 && tune.q4_avx2) {
        QuantArgs b = a;
        b.q4_avx2_prefetch = tune.q4_avx2_prefetch;
        mm_quant_avx2(b, r0, r1);
        return;
    }
#endif
    const int64_t pf = fp8 ? tune.fp8_prefetch : w4a8 ? tune.q4_prefetch : tune.q8_prefetch;
    // Half loads at batch 1 only: with several tokens the kernel is compute-bound and the extra
    // insert per 64 bytes cost 7-13% on the Zen 5 VM (64 tokens, bench_gemv_decode).
    const bool half = tune.half_loads && a.n == 1;
    if (a.kind == 0 && a.act_f32) {  // W4A16
        if (a.asym)
            q4_a16<true>(a, r0, r1, pb, tune.q4_prefetch);
        else
            q4_a16<false>(a, r0, r1, pb, tune.q4_prefetch);
        return;
    }
    for (int64_t p = r0 / kNr; p * kNr < r1; ++p) {
        const uint8_t* panel = a.data + p * pb;
        const int64_t base = p * kNr;
        const int64_t j0 = r0 > base ? r0 - base : 0;
        const int64_t j1 = r1 - base < kNr ? r1 - base : kNr;
        if (fp8 && a.n > 1) {
            fp8_panel_multi(a, panel, a.y + base, j0, j1, pf);
            continue;
        }
        // This panel's kernel for NT tokens from t and NP panels from p (FP8 and W8A8 take one
        // token at a time). W4A8 does not use a.unpack: unpacking is one and per 64 bytes here,
        // less than a scratch round trip.
        const auto tile_as = [&]<int NT, int NP, bool kHalf>(int64_t t) {
            float* y = a.y + t * a.ldy + base;
            if (fp8 && a.x_e4m3 && a.n == 1)
                fp8_panel<NP, true>(a, panel, pb, t, y, j0, j1, pf);
            else if (fp8)
                fp8_panel<NP, false>(a, panel, pb, t, y, j0, j1, pf);
            else if (!w4a8 && a.group == 0)
                q8_vnni_panel<false, NP, kHalf>(a, panel, pb, t, y, j0, j1, pf);
            else if (!w4a8)
                q8_vnni_panel<true, NP, kHalf>(a, panel, pb, t, y, j0, j1, pf);
            else if (a.asym)
                q4_vnni_panel<true, NT, NP, kHalf>(a, panel, pb, t, y, j0, j1, pf);
            else
                q4_vnni_panel<false, NT, NP, kHalf>(a, panel, pb, t, y, j0, j1, pf);
        };
        const auto tile = [&]<int NT, int NP>(int64_t t) {
            if (half)
                tile_as.template operator()<NT, NP, true>(t);
            else
                tile_as.template operator()<NT, NP, false>(t);
        };
        // Batch 1 (memory-bound): tune.panels panels side by side where all of them are whole in
        // [r0, r1).
        if (a.n == 1 && tune.panels == 2 && j0 == 0 && base + 2 * kNr <= r1) {
            tile.template operator()<1, 2>(0);
            ++p;
            continue;
        }
        if (!w4a8 && !fp8 && a.n > 1) {
            q8_multi(a, panel, base, j0, j1, pf);
            continue;
        }
        if (!w4a8) {
            for (int64_t t = 0; t < a.n; ++t) tile.template operator()<1, 1>(t);
            continue;
        }
        // W4A8: 5-7 tokens in one q4_vnni_multi pass; otherwise q4_vnni_panel's passes of 4 and
        // the rest in one pass. Both run near the same VNNI-bound rate per token; on Zen 4
        // (bench_multirow, the default model's layers, one thread) one pass of 5-7 tokens took
        // 3-8% less than 4 + 1..3, while 8 and more took 2-4% more than passes of 4.
        if (a.n >= 5 && a.n <= 7) {
            multi_pass(a, [&]<int NT>(int64_t t) {
                float* y = a.y + t * a.ldy + base;
                if (a.asym)
                    q4_vnni_multi<true, NT>(a, panel, t, y, j0, j1, pf);
                else
                    q4_vnni_multi<false, NT>(a, panel, t, y, j0, j1, pf);
            });
            continue;
        }
        int64_t t = 0;
        for (; t + 4 <= a.n; t += 4) tile.template operator()<4, 1>(t);
        switch (a.n - t) {
            case 3:
                tile.template operator()<3, 1>(t);
                break;
            case 2:
                tile.template operator()<2, 1>(t);
                break;
            case 1:
                tile.template operator()<1, 1>(t);
                break;
            default:
                break;
        }
    }
}

}  // namespace warden::kernels::detail
