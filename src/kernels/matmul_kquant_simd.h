#pragma once
// The GGUF block kernels of kernels/matmul_kquant.h on 256-bit integer vectors, included by
// matmul_kquant_avx2.cpp (AVX2: u8 x s8 products through maddubs + madd) and
// matmul_kquant_avx512.cpp (AVX-512 VNNI: vpdpbusd on ymm, natively or on SIMDe in the tests).
// The including file defines before it:
//   KQ(name)   the intrinsic: KQ(mm256_add_epi32) is _mm256_add_epi32 (or simde_mm256_add_epi32)
//   KQI, KQH   the 256-bit and 128-bit integer vector types, KQF the 256-bit float vector type
//   KQ_VNNI    1 to form the 4-products sums with vpdpbusd, 0 with maddubs + madd
//   KQ_SCALAR_FLOAT 1 to do the per-super-block float step lane by lane (SIMDe's fma rounds twice)
// Everything is in an anonymous namespace (internal linkage: one copy per ISA, see the ODR note
// in kernels_internal.h). The integer sums are exact, so the vector order of their additions does
// not matter; the float steps are the contract's, lane j for 32-block j.
#include <algorithm>
#include <cstdint>

namespace warden::kernels::detail {
namespace {

#if KQ_SCALAR_FLOAT
// f16 bits -> f32, exact, without F16C (the SIMDe build; no shared inline helper: ODR).
float kq_f16(const uint8_t* p) {
    const uint32_t h = static_cast<uint32_t>(p[0] | (p[1] << 8));
    const uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    uint32_t bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13);
    } else if (exp != 0) {
        bits = sign | ((exp + 112) << 23) | (man << 13);
    } else if (man == 0) {
        bits = sign;
    } else {  // subnormal: normalize
        uint32_t e = 113, m = man;
        while ((m & 0x400u) == 0) {
            m <<= 1;
            --e;
        }
        bits = sign | (e << 23) | ((m & 0x3ff) << 13);
    }
    float f;
    __builtin_memcpy(&f, &bits, 4);
    return f;
}
#endif

// Sum of u8 x s8 products, 8 int32 lanes (lane i: bytes 4i..4i+3).
inline KQI kq_dot(KQI u, KQI s) {
#if KQ_VNNI
    return KQ(mm256_dpbusd_epi32)(KQ(mm256_setzero_si256)(), u, s);
#else
    return KQ(mm256_madd_epi16)(KQ(mm256_maddubs_epi16)(u, s), KQ(mm256_set1_epi16)(1));
#endif
}

// Lane j = the sum of v[j]'s 8 lanes.
inline KQI kq_hsum8(const KQI* v) {
    const KQI h01 = KQ(mm256_hadd_epi32)(v[0], v[1]), h23 = KQ(mm256_hadd_epi32)(v[2], v[3]);
    const KQI h45 = KQ(mm256_hadd_epi32)(v[4], v[5]), h67 = KQ(mm256_hadd_epi32)(v[6], v[7]);
    const KQI a = KQ(mm256_hadd_epi32)(h01, h23), b = KQ(mm256_hadd_epi32)(h45, h67);
    return KQ(mm256_add_epi32)(KQ(mm256_permute2x128_si256)(a, b, 0x20),
                               KQ(mm256_permute2x128_si256)(a, b, 0x31));
}

float kq_reduce(const float* acc) {
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

// The eight float lanes of one row and token. step: the float step of one super-block,
// acc[j] = fma(float(i[j]), d*xd[j], acc[j]), then (Q4_K/Q5_K) acc[j] = fma(float(mx[j]),
// -(dmin*xd[j]), acc[j]).
#if KQ_SCALAR_FLOAT
struct KqAcc {
    float v[8] = {};
    void step(KQI i, const float* xd, float d, bool mins, KQI mx, float dmin) {
        alignas(32) int32_t iv[8], mv[8];
        KQ(mm256_store_si256)(reinterpret_cast<KQI*>(iv), i);
        KQ(mm256_store_si256)(reinterpret_cast<KQI*>(mv), mx);
        for (int j = 0; j < 8; ++j) {
            v[j] = __builtin_fmaf(static_cast<float>(iv[j]), d * xd[j], v[j]);
            if (mins) v[j] = __builtin_fmaf(static_cast<float>(mv[j]), -(dmin * xd[j]), v[j]);
        }
    }
    // v[j] = fma(float(i[j]), dx[j], v[j]): a per-lane scale product (32-block types).
    void step_lanes(KQI i, const float* dx) {
        alignas(32) int32_t iv[8];
        KQ(mm256_store_si256)(reinterpret_cast<KQI*>(iv), i);
        for (int j = 0; j < 8; ++j) v[j] = __builtin_fmaf(static_cast<float>(iv[j]), dx[j], v[j]);
    }
    void step_lanes(KQI i, KQF dx) {
        alignas(32) float dv[8];
        KQ(mm256_store_ps)(dv, dx);
        step_lanes(i, dv);
    }
    void store(float* a) const {
        for (int j = 0; j < 8; ++j) a[j] = v[j];
    }
    float reduce() const { return kq_reduce(v); }
};
inline float kq_scale_f16(const uint8_t* p) {
    return kq_f16(p);
}
// f16 bits of d and of dmin after it -> f32.
inline void kq_scales_f16(const uint8_t* p, float& d, float& dmin) {
    d = kq_f16(p);
    dmin = kq_f16(p + 2);
}
#else
struct KqAcc {
    KQF v = KQ(mm256_setzero_ps)();
    void step(KQI i, const float* xd, float d, bool mins, KQI mx, float dmin) {
        const KQF xdv = KQ(mm256_loadu_ps)(xd);
        v = KQ(mm256_fmadd_ps)(KQ(mm256_cvtepi32_ps)(i),
                               KQ(mm256_mul_ps)(KQ(mm256_set1_ps)(d), xdv), v);
        if (mins)
            v = KQ(mm256_fnmadd_ps)(KQ(mm256_cvtepi32_ps)(mx),
                                    KQ(mm256_mul_ps)(KQ(mm256_set1_ps)(dmin), xdv), v);
    }
    void step_lanes(KQI i, const float* dx) {
        v = KQ(mm256_fmadd_ps)(KQ(mm256_cvtepi32_ps)(i), KQ(mm256_loadu_ps)(dx), v);
    }
    void step_lanes(KQI i, KQF dx) { v = KQ(mm256_fmadd_ps)(KQ(mm256_cvtepi32_ps)(i), dx, v); }
    void store(float* a) const { KQ(mm256_storeu_ps)(a, v); }
    float reduce() const {
        alignas(32) float a[8];
        KQ(mm256_store_ps)(a, v);
        return kq_reduce(a);
    }
};
inline float kq_scale_f16(const uint8_t* p) {
    uint16_t bits;
    __builtin_memcpy(&bits, p, 2);
    return KQ(mm_cvtss_f32)(KQ(mm_cvtph_ps)(KQ(mm_cvtsi32_si128)(bits)));
}
// F16C: both scales in one conversion (exact).
inline void kq_scales_f16(const uint8_t* p, float& d, float& dmin) {
    int32_t bits;
    __builtin_memcpy(&bits, p, 4);
    const auto f = KQ(mm_cvtph_ps)(KQ(mm_cvtsi32_si128)(bits));
    d = KQ(mm_cvtss_f32)(f);
    dmin = KQ(mm_cvtss_f32)(KQ(mm_movehdup_ps)(f));
}
#endif

// out[i] = acc[i].reduce() for i < kN; groups of four through hadds, which pair the lanes as
// kq_reduce does: ((a0 + a1) + (a2 + a3)) in the low half, ((a4 + a5) + (a6 + a7)) in the high.
template <int kN>
inline void kq_reduce_n(const KqAcc* acc, float* out) {
    int i = 0;
#if !KQ_SCALAR_FLOAT
    for (; i + 4 <= kN; i += 4) {
        const KQF h = KQ(mm256_hadd_ps)(KQ(mm256_hadd_ps)(acc[i].v, acc[i + 1].v),
                                        KQ(mm256_hadd_ps)(acc[i + 2].v, acc[i + 3].v));
        alignas(32) float s[8];
        KQ(mm256_store_ps)(s, KQ(mm256_add_ps)(h, KQ(mm256_permute2f128_ps)(h, h, 1)));
        for (int k = 0; k < 4; ++k) out[i + k] = s[k];
    }
#endif
    for (; i < kN; ++i) out[i] = acc[i].reduce();
}

inline KQI kq_load(const void* p) {
    return KQ(mm256_loadu_si256)(static_cast<const KQI*>(p));
}

// The 8 scales and 8 mins of a Q4_K / Q5_K block as int32 lanes (llama.cpp's get_scale_min_k4).
inline void kq_scales_mins(const uint8_t* q, KQI& sc, KQI& mn) {
    uint32_t u[4];
    __builtin_memcpy(u, q, 12);
    constexpr uint32_t k1 = 0x3f3f3f3fu, k2 = 0x0f0f0f0fu, k3 = 0x03030303u;
    u[3] = ((u[2] >> 4) & k2) | (((u[1] >> 6) & k3) << 4);
    const uint32_t m_lo = u[1] & k1;
    u[1] = (u[2] & k2) | (((u[0] >> 6) & k3) << 4);
    u[2] = m_lo;
    u[0] &= k1;
    sc = KQ(mm256_cvtepu8_epi32)(
        KQ(mm_set_epi32)(0, 0, static_cast<int>(u[1]), static_cast<int>(u[0])));
    mn = KQ(mm256_cvtepu8_epi32)(
        KQ(mm_set_epi32)(0, 0, static_cast<int>(u[3]), static_cast<int>(u[2])));
}

// Selector of a 16-byte shuffle: bytes 0..7 take byte 2j, bytes 8..15 byte 2j + 1 (the two
// per-16-weight scales of 32-block j, for madd against maddubs' pair sums).
inline KQH kq_sel(int j) {
    const auto lo = static_cast<long long>(0x0101010101010101ull * static_cast<uint64_t>(2 * j));
    const auto hi =
        static_cast<long long>(0x0101010101010101ull * static_cast<uint64_t>(2 * j + 1));
    return KQ(mm_set_epi64x)(hi, lo);
}

// Q4_K (kQ5 false) / Q5_K super-block blk's codes of 32-blocks 2c (lo) and 2c + 1 (hi): the low
// and high nibbles of its 32 bytes c, with Q5_K's fifth bit from qh (hb: blk's 32 qh bytes),
// bit j of qh[l] -> 16 in sub-block j's code.
template <bool kQ5>
[[gnu::always_inline]] inline void kq_q45_codes(const uint8_t* blk, KQI hb, int c, KQI& lo,
                                                KQI& hi) {
    const KQI m4 = KQ(mm256_set1_epi8)(0x0f), one = KQ(mm256_set1_epi8)(1);
    const KQI q = kq_load(blk + (kQ5 ? 48 : 16) + 32 * c);
    lo = KQ(mm256_and_si256)(q, m4);
    hi = KQ(mm256_and_si256)(KQ(mm256_srli_epi16)(q, 4), m4);
    if constexpr (kQ5) {
        const KQI b0 =
            KQ(mm256_and_si256)(KQ(mm256_srl_epi16)(hb, KQ(mm_cvtsi32_si128)(2 * c)), one);
        const KQI b1 =
            KQ(mm256_and_si256)(KQ(mm256_srl_epi16)(hb, KQ(mm_cvtsi32_si128)(2 * c + 1)), one);
        lo = KQ(mm256_or_si256)(lo, KQ(mm256_slli_epi16)(b0, 4));
        hi = KQ(mm256_or_si256)(hi, KQ(mm256_slli_epi16)(b1, 4));
    }
}

// Q6_K super-block blk's 6-bit codes (0..63) of 32-blocks 4h..4h+3 into q: low nibbles from ql,
// the two high bits from qh.
[[gnu::always_inline]] inline void kq_q6_codes(const uint8_t* blk, int h, KQI m4, KQI m30, KQI* q) {
    const KQI qa = kq_load(blk + 64 * h), qb = kq_load(blk + 64 * h + 32),
              qh = kq_load(blk + 128 + 32 * h);
    q[0] = KQ(mm256_or_si256)(KQ(mm256_and_si256)(qa, m4),
                              KQ(mm256_and_si256)(KQ(mm256_slli_epi16)(qh, 4), m30));
    q[1] = KQ(mm256_or_si256)(KQ(mm256_and_si256)(qb, m4),
                              KQ(mm256_and_si256)(KQ(mm256_slli_epi16)(qh, 2), m30));
    q[2] = KQ(mm256_or_si256)(KQ(mm256_and_si256)(KQ(mm256_srli_epi16)(qa, 4), m4),
                              KQ(mm256_and_si256)(qh, m30));
    q[3] = KQ(mm256_or_si256)(KQ(mm256_and_si256)(KQ(mm256_srli_epi16)(qb, 4), m4),
                              KQ(mm256_and_si256)(KQ(mm256_srli_epi16)(qh, 2), m30));
}

// One row of Q4_K (kQ5 false) or Q5_K (true) against one token's activations.
template <bool kQ5>
float kq_row_q45(const uint8_t* row, int64_t nsb, const int8_t* xq, const float* xd,
                 const int32_t* xs) {
    KqAcc acc;
    constexpr int64_t bb = kQ5 ? 176 : 144;
    for (int64_t s = 0; s < nsb; ++s) {
        const uint8_t* blk = row + s * bb;
        const int8_t* x = xq + s * 256;
        KQI v[8];
        KQI hb{};
        if constexpr (kQ5) hb = kq_load(blk + 16);
        for (int c = 0; c < 4; ++c) {
            KQI lo, hi;
            kq_q45_codes<kQ5>(blk, hb, c, lo, hi);
            v[2 * c] = kq_dot(lo, kq_load(x + 64 * c));
            v[2 * c + 1] = kq_dot(hi, kq_load(x + 64 * c + 32));
        }
        KQI sc, mn;
        kq_scales_mins(blk + 4, sc, mn);
        const KQI i = KQ(mm256_mullo_epi32)(kq_hsum8(v), sc);
        const KQI mx = KQ(mm256_mullo_epi32)(mn, kq_load(xs + s * 8));
        float d, dmin;
        kq_scales_f16(blk, d, dmin);
        acc.step(i, xd + s * 8, d, true, mx, dmin);
    }
    return acc.reduce();
}

// One row of Q6_K against one token's activations.
float kq_row_q6(const uint8_t* row, int64_t nsb, const int8_t* xq, const float* xd) {
    KqAcc acc;
    const KQI m4 = KQ(mm256_set1_epi8)(0x0f), m30 = KQ(mm256_set1_epi8)(0x30),
              k32 = KQ(mm256_set1_epi8)(32);
    for (int64_t s = 0; s < nsb; ++s) {
        const uint8_t* blk = row + s * 210;
        const int8_t* x = xq + s * 256;
        const KQH sc8 = KQ(mm_loadu_si128)(reinterpret_cast<const KQH*>(blk + 192));
        KQI v[8];
        for (int h = 0; h < 2; ++h) {
            KQI q[4];
            kq_q6_codes(blk, h, m4, m30, q);
            for (int k = 0; k < 4; ++k) {
                const int j = 4 * h + k;
                const KQI xv = kq_load(x + 32 * j);
                // (q - 32) * x pair sums in int16 (|.| <= 24130), then times the scale of each
                // 16-half: sc[2j] for bytes 0..15 (the low 128 bits), sc[2j + 1] for 16..31.
                const KQI p = KQ(mm256_sub_epi16)(KQ(mm256_maddubs_epi16)(q[k], xv),
                                                  KQ(mm256_maddubs_epi16)(k32, xv));
                const KQI scv = KQ(mm256_cvtepi8_epi16)(KQ(mm_shuffle_epi8)(sc8, kq_sel(j)));
                v[j] = KQ(mm256_madd_epi16)(p, scv);
            }
        }
        acc.step(kq_hsum8(v), xd + s * 8, kq_scale_f16(blk + 208), false, KQ(mm256_setzero_si256)(),
                 0.0f);
    }
    return acc.reduce();
}

// A 32-block's 16 bytes of nibbles as 32 byte codes: the low nibbles (weights 0..15), then the high
// ones (16..31).
inline KQI kq_nibbles32(const uint8_t* qs) {
    const KQH q = KQ(mm_loadu_si128)(reinterpret_cast<const KQH*>(qs));
    const KQH m4 = KQ(mm_set1_epi8)(0x0f);
    return KQ(mm256_set_m128i)(KQ(mm_and_si128)(KQ(mm_srli_epi16)(q, 4), m4),
                               KQ(mm_and_si128)(q, m4));
}

// Byte l = 0x10 where bit l of the little-endian u32 at p is set, else 0 (Q5_0 / Q5_1 high bits).
inline KQI kq_bits32(const uint8_t* p) {
    int32_t qh;
    __builtin_memcpy(&qh, p, 4);
    const KQI shuf = KQ(mm256_setr_epi8)(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2,
                                         2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const KQI bytes = KQ(mm256_shuffle_epi8)(KQ(mm256_set1_epi32)(qh), shuf);
    const KQI mask = KQ(mm256_set1_epi64x)(static_cast<long long>(0x8040201008040201ull));
    const KQI set = KQ(mm256_cmpeq_epi8)(KQ(mm256_and_si256)(bytes, mask), mask);
    return KQ(mm256_and_si256)(set, KQ(mm256_set1_epi8)(0x10));
}

// A 32-block's Q5 codes: nibbles | 16 * high bit, the high bits from the little-endian u32 at qh.
inline KQI kq_codes_b5(const uint8_t* qh) {
    const KQI nib = kq_nibbles32(qh + 4);
#if KQ_VNNI
    // AVX-512BW: the u32 is the byte mask itself (a mask register blend in place of kq_bits32's
    // broadcast, shuffle and compare).
    uint32_t bits;
    __builtin_memcpy(&bits, qh, 4);
    return KQ(mm256_mask_blend_epi8)(bits, nib, KQ(mm256_or_si256)(nib, KQ(mm256_set1_epi8)(0x10)));
#else
    return KQ(mm256_or_si256)(nib, kq_bits32(qh));
#endif
}

// IQ4_NL's code book (ggml-common.h kvalues_iq4nl) in both 128-bit halves, for byte shuffles.
inline KQI kq_iq4_table() {
    const KQH t =
        KQ(mm_setr_epi8)(-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113);
    return KQ(mm256_set_m128i)(t, t);
}
constexpr int8_t kKqIq4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                     1,    13,   25,  38,  53,  69,  89,  113};

// Sum over 32 weights of kv[nibble] * x (signed times signed, through |w| and x * sign(w)).
inline KQI kq_dot_iq4(KQI tbl, const uint8_t* qs, KQI xv) {
    const KQI w = KQ(mm256_shuffle_epi8)(tbl, kq_nibbles32(qs));
    return kq_dot(KQ(mm256_sign_epi8)(w, w), KQ(mm256_sign_epi8)(xv, w));
}

// One 32-block of Q5_0 / Q5_1 / IQ4_NL added to its lane, in scalar code (a row's last blocks
// when their count is not a multiple of 8): the contract of matmul_kquant.h.
float kq_block_tail(int kind, const uint8_t* blk, const int8_t* xq, float xd, int32_t xs,
                    float acc) {
    int32_t sum = 0;
    if (kind == kQuantKindIQ4NL) {
        for (int l = 0; l < 32; ++l)
            sum += kKqIq4Values[(l < 16 ? blk[2 + l] & 0xF : blk[2 + l - 16] >> 4)] * xq[l];
        return __builtin_fmaf(static_cast<float>(sum), kq_scale_f16(blk) * xd, acc);
    }
    const bool q51 = kind == kQuantKindQ5_1;
    const uint8_t* qh = blk + (q51 ? 4 : 2);
    for (int l = 0; l < 32; ++l) {
        const int32_t nib = l < 16 ? qh[4 + l] & 0xF : qh[4 + l - 16] >> 4;
        sum += (nib | ((qh[l / 8] >> (l % 8)) & 1) << 4) * xq[l];
    }
    if (!q51) return __builtin_fmaf(static_cast<float>(sum - 16 * xs), kq_scale_f16(blk) * xd, acc);
    acc = __builtin_fmaf(static_cast<float>(sum), kq_scale_f16(blk) * xd, acc);
    return __builtin_fmaf(static_cast<float>(xs), kq_scale_f16(blk + 2) * xd, acc);
}

// One row of a 32-weight block type (Q5_0, Q5_1, IQ4_NL) against one token's activations: eight
// blocks per step, block b in lane b % 8.
template <int kKind>
float kq_row_b32(const uint8_t* row, int64_t nb, const int8_t* xq, const float* xd,
                 const int32_t* xs) {
    constexpr bool kQ51 = kKind == kQuantKindQ5_1, kIq4 = kKind == kQuantKindIQ4NL;
    constexpr int64_t bb = kIq4 ? 18 : (kQ51 ? 24 : 22);
    const KQI tbl = kq_iq4_table();
    KqAcc acc;
    int64_t b = 0;
    for (; b + 8 <= nb; b += 8) {
        KQI v[8];
        alignas(32) float dx[8], mx[8];
        for (int j = 0; j < 8; ++j) {
            const uint8_t* blk = row + (b + j) * bb;
            const KQI xv = kq_load(xq + (b + j) * 32);
            dx[j] = kq_scale_f16(blk) * xd[b + j];
            if constexpr (kIq4) {
                v[j] = kq_dot_iq4(tbl, blk + 2, xv);
            } else {
                const uint8_t* qh = blk + (kQ51 ? 4 : 2);
                v[j] = kq_dot(KQ(mm256_or_si256)(kq_nibbles32(qh + 4), kq_bits32(qh)), xv);
                if constexpr (kQ51) mx[j] = kq_scale_f16(blk + 2) * xd[b + j];
            }
        }
        KQI i = kq_hsum8(v);
        if constexpr (kKind == kQuantKindQ5_0)
            i = KQ(mm256_sub_epi32)(i, KQ(mm256_slli_epi32)(kq_load(xs + b), 4));
        acc.step_lanes(i, dx);
        if constexpr (kQ51) acc.step_lanes(kq_load(xs + b), mx);
    }
    alignas(32) float a[8];
    acc.store(a);
    for (; b < nb; ++b)
        a[b % 8] = kq_block_tail(kKind, row + b * bb, xq + b * 32, xd[b], xs[b], a[b % 8]);
    return kq_reduce(a);
}

// Q5_0 / Q5_1 rows with their codes unpacked once for all the call's tokens (QuantArgs::unpack). A
// row of 32-blocks needs ~10 instructions per block to turn its nibbles, high bits and f16 scales
// into byte codes and f32 scales, against one dot product per block and token afterwards, so
// unpacking once per row and not once per row and token is what makes prompt processing fast (one
// token takes kq_matmul_b32_one instead). The float steps are the contract's, lane b % 8 for block
// b, so every token's result is the one it gets alone.

// IQ4_NL rows take the same path where the sums are formed with vpdpbusd (KQ_VNNI): a code is
// stored as kv + 128 (1..241, unsigned), and 128 * xs is taken off the block's sum, leaving
// sum kv*xq exactly. (maddubs would saturate its int16 pair sums on such codes.)
template <int kKind>
constexpr bool kKqUnpacks = kKind == kQuantKindQ5_0 || kKind == kQuantKindQ5_1 ||
                            (kKind == kQuantKindIQ4NL && KQ_VNNI);

// Bytes per 32-block of the unpacked kinds.
template <int kKind>
constexpr int64_t kKqB32Bytes = kKind == kQuantKindIQ4NL ? 18 : (kKind == kQuantKindQ5_1 ? 24 : 22);

// Row r's blocks -> codes[32b + l] = weight l's code (Q5: 0..31; IQ4_NL: kv + 128), d[b] (and
// m[b], Q5_1) as f32, for b < nb; blocks nb..nbp-1 (nbp: nb rounded up to 8) zero codes and
// scales.
template <int kKind>
void kq_unpack_b5(const uint8_t* row, int64_t nb, uint8_t* codes, float* d, float* m) {
    constexpr bool kQ51 = kKind == kQuantKindQ5_1, kIq4 = kKind == kQuantKindIQ4NL;
    constexpr int64_t bb = kKqB32Bytes<kKind>;
    const KQI tbl = kq_iq4_table(), top = KQ(mm256_set1_epi8)(static_cast<char>(0x80));
    int64_t b = 0;
    for (; b < nb; ++b) {
        const uint8_t* blk = row + b * bb;
        const uint8_t* qh = blk + (kQ51 ? 4 : 2);
        const KQI c =
            kIq4 ? KQ(mm256_xor_si256)(KQ(mm256_shuffle_epi8)(tbl, kq_nibbles32(blk + 2)), top)
                 : kq_codes_b5(qh);
        KQ(mm256_store_si256)(reinterpret_cast<KQI*>(codes + 32 * b), c);
        if constexpr (kQ51)
            kq_scales_f16(blk, d[b], m[b]);
        else
            d[b] = kq_scale_f16(blk);
    }
    for (; b % 8 != 0; ++b) {
        KQ(mm256_store_si256)(reinterpret_cast<KQI*>(codes + 32 * b), KQ(mm256_setzero_si256)());
        d[b] = 0.0f;
        if constexpr (kQ51) m[b] = 0.0f;
    }
}

// The float steps of eight blocks [b, b + 8) of one token: sums[j] = sum q*xq of block b + j;
// xdv, xsv that token's xd, xs of the blocks (zero for the padding blocks of a row's last group,
// whose codes and scales are zero too, so their steps add exactly 0 to their lanes).
template <int kKind>
inline void kq_step_b5(KqAcc& acc, KQI sums, KQF xdv, KQI xsv, const float* d, const float* m) {
    const KQF dx = KQ(mm256_mul_ps)(KQ(mm256_load_ps)(d), xdv);
    if constexpr (kKind == kQuantKindQ5_1) {
        acc.step_lanes(sums, dx);
        acc.step_lanes(xsv, KQ(mm256_mul_ps)(KQ(mm256_load_ps)(m), xdv));
    } else {
        constexpr int kShift = kKind == kQuantKindIQ4NL ? 7 : 4;  // codes offset by 128 or 16
        acc.step_lanes(KQ(mm256_sub_epi32)(sums, KQ(mm256_slli_epi32)(xsv, kShift)), dx);
    }
}

// One unpacked row (kq_unpack_b5) against one token's activations.
template <int kKind>
float kq_dot_b5(const uint8_t* codes, const float* d, const float* m, int64_t nb, const int8_t* xq,
                const float* xd, const int32_t* xs) {
    KqAcc acc;
    int64_t b = 0;
    for (; b + 8 <= nb; b += 8) {
        KQI v[8];
        for (int j = 0; j < 8; ++j)
            v[j] = kq_dot(kq_load(codes + 32 * (b + j)), kq_load(xq + 32 * (b + j)));
        kq_step_b5<kKind>(acc, kq_hsum8(v), KQ(mm256_loadu_ps)(xd + b), kq_load(xs + b), d + b,
                          m + b);
    }
    if (b < nb) {  // the last nb % 8 blocks, lanes past them zero
        const int64_t left = nb - b;
        KQI v[8];
        for (int j = 0; j < 8; ++j)
            v[j] = j < left ? kq_dot(kq_load(codes + 32 * (b + j)), kq_load(xq + 32 * (b + j)))
                            : KQ(mm256_setzero_si256)();
        // Copied, not masked loads: SIMDe's emulated maskload reads all eight lanes, past the
        // end of the token's scales.
        alignas(32) float xd_tail[8] = {};
        alignas(32) int32_t xs_tail[8] = {};
        std::copy_n(xd + b, left, xd_tail);
        std::copy_n(xs + b, left, xs_tail);
        kq_step_b5<kKind>(acc, kq_hsum8(v), KQ(mm256_load_ps)(xd_tail), kq_load(xs_tail), d + b,
                          m + b);
    }
    return acc.reduce();
}

// One token (decode) of Q5_0 / Q5_1 / IQ4_NL: the codes are formed straight from the row's blocks
// (no unpacked copy to write and read back), two blocks per vector, and four rows share a pass so
// their final float sums reduce together. Blocks 2p and 2p + 1 share a vector (both blocks' low
// nibbles, then in a second vector both blocks' high nibbles), so the token's activations are
// rearranged once per call to match: pair p's 64 bytes are [x(2p) 0..15 | x(2p+1) 0..15 |
// x(2p) 16..31 | x(2p+1) 16..31]. A pair's dot product then holds block 2p in lanes 0..3 and
// 2p + 1 in lanes 4..7, and four pairs reduce to eight blocks' sums in three hadds and a permute.
// The float steps are the contract's, lane b % 8 for block b. A row's last group of fewer than
// eight blocks reads zero activations, xd and xs past the row's end (the copy's padding) and zero
// scales, so its padding lanes add exactly 0 as in kq_dot_b5.

// Part `part` of `parts` of the cache lines of [p, p + bytes): a one-token pass over several
// rows prefetches the next pass's rows piece by piece (measured: decode about 1.2x faster than
// with the hardware prefetcher alone, on Zen 4 with AVX2).
inline void kq_prefetch_part(const uint8_t* p, int64_t bytes, int64_t part, int64_t parts) {
    const int64_t lines = (bytes + 63) / 64;
    for (int64_t l = part * lines / parts; l < (part + 1) * lines / parts; ++l)
        __builtin_prefetch(p + 64 * l);
}

// Lane j = the sum of block j's lanes, v[k] holding blocks 2k (lanes 0..3) and 2k + 1 (4..7).
inline KQI kq_hsum_pairs(const KQI* v) {
    const KQI h =
        KQ(mm256_hadd_epi32)(KQ(mm256_hadd_epi32)(v[0], v[1]),
                             KQ(mm256_hadd_epi32)(v[2], v[3]));  // b0 b2 b4 b6 | b1 b3 b5 b7
    return KQ(mm256_permutevar8x32_epi32)(h, KQ(mm256_setr_epi32)(0, 4, 1, 5, 2, 6, 3, 7));
}

// The f16 at p + j * stride for j < count (0 for the other lanes) as f32 lanes (exact).
inline KQF kq_f16x8(const uint8_t* p, int64_t stride, int count) {
#if KQ_SCALAR_FLOAT
    alignas(32) float f[8] = {};
    for (int j = 0; j < count; ++j) f[j] = kq_f16(p + j * stride);
    return KQ(mm256_load_ps)(f);
#else
    // Built in registers (an array of 16-bit stores read back as one vector stalls the load).
    const auto at = [&](int j) -> int16_t {
        int16_t v = 0;
        if (j < count) __builtin_memcpy(&v, p + j * stride, 2);
        return v;
    };
    return KQ(mm256_cvtph_ps)(
        KQ(mm_setr_epi16)(at(0), at(1), at(2), at(3), at(4), at(5), at(6), at(7)));
#endif
}

// Byte l = 0x10 where bit l of bits is set, else 0 (kq_bits32 on a value).
inline KQI kq_bits32v(uint32_t bits) {
    const KQI shuf = KQ(mm256_setr_epi8)(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2,
                                         2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const KQI bytes =
        KQ(mm256_shuffle_epi8)(KQ(mm256_set1_epi32)(static_cast<int32_t>(bits)), shuf);
    const KQI mask = KQ(mm256_set1_epi64x)(static_cast<long long>(0x8040201008040201ull));
    const KQI set = KQ(mm256_cmpeq_epi8)(KQ(mm256_and_si256)(bytes, mask), mask);
    return KQ(mm256_and_si256)(set, KQ(mm256_set1_epi8)(0x10));
}

// The code book for kq_pair_sum: IQ4_NL's kv + 128 where the sums are formed with vpdpbusd
// (unsigned codes, 128 * xs taken off later), kv itself otherwise.
inline KQI kq_iq4_pair_table() {
#if KQ_VNNI
    return KQ(mm256_xor_si256)(kq_iq4_table(), KQ(mm256_set1_epi8)(static_cast<char>(0x80)));
#else
    return kq_iq4_table();
#endif
}

// Integer sums of one pair of blocks against xp (the pair's rearranged 64 activation bytes): q
// holds the two blocks' 16 nibble bytes ([first | second]), qh0, qh1 their Q5 high-bit words.
template <int kKind>
inline KQI kq_pair_sum(KQI q, uint32_t qh0, uint32_t qh1, const int8_t* xp, KQI tbl) {
    const KQI m4 = KQ(mm256_set1_epi8)(0x0f);
    KQI lo = KQ(mm256_and_si256)(q, m4), hi = KQ(mm256_and_si256)(KQ(mm256_srli_epi16)(q, 4), m4);
    const KQI x0 = kq_load(xp), x1 = kq_load(xp + 32);
    if constexpr (kKind == kQuantKindIQ4NL) {
        const KQI wl = KQ(mm256_shuffle_epi8)(tbl, lo), wh = KQ(mm256_shuffle_epi8)(tbl, hi);
#if KQ_VNNI
        return KQ(mm256_dpbusd_epi32)(KQ(mm256_dpbusd_epi32)(KQ(mm256_setzero_si256)(), wl, x0), wh,
                                      x1);
#else
        return KQ(mm256_add_epi32)(
            kq_dot(KQ(mm256_sign_epi8)(wl, wl), KQ(mm256_sign_epi8)(x0, wl)),
            kq_dot(KQ(mm256_sign_epi8)(wh, wh), KQ(mm256_sign_epi8)(x1, wh)));
#endif
    } else {
        // Low-nibble vector byte l: weight l of the first block (l < 16), of the second (l >= 16);
        // high-nibble vector: weights 16 + l likewise.
        const uint32_t bl = (qh0 & 0xffffu) | (qh1 << 16), bh = (qh0 >> 16) | (qh1 & 0xffff0000u);
#if KQ_VNNI
        const KQI k16 = KQ(mm256_set1_epi8)(0x10);
        lo = KQ(mm256_mask_blend_epi8)(bl, lo, KQ(mm256_or_si256)(lo, k16));
        hi = KQ(mm256_mask_blend_epi8)(bh, hi, KQ(mm256_or_si256)(hi, k16));
        return KQ(mm256_dpbusd_epi32)(KQ(mm256_dpbusd_epi32)(KQ(mm256_setzero_si256)(), lo, x0), hi,
                                      x1);
#else
        lo = KQ(mm256_or_si256)(lo, kq_bits32v(bl));
        hi = KQ(mm256_or_si256)(hi, kq_bits32v(bh));
        return KQ(mm256_add_epi32)(kq_dot(lo, x0), kq_dot(hi, x1));
#endif
    }
}

// Blocks [0, count) of one row's group of eight (blk: the group's first block; count 8 but for
// a row's last group) added to acc; xp, xd, xs: the group's rearranged activations and padded
// scales.
template <int kKind>
inline void kq_group_one(KqAcc& acc, const uint8_t* blk, int count, const int8_t* xp,
                         const float* xd, const int32_t* xs, KQI tbl) {
    constexpr bool kQ51 = kKind == kQuantKindQ5_1;
    constexpr int64_t bb = kKqB32Bytes<kKind>;
    constexpr int64_t qs_at = kKind == kQuantKindIQ4NL ? 2 : (kQ51 ? 8 : 6);
    KQI v[4];
    for (int k = 0; k < 4; ++k) {
        const uint8_t* b0 = blk + 2 * k * bb;
        const uint8_t* b1 = b0 + bb;
        if (2 * k >= count) {
            v[k] = KQ(mm256_setzero_si256)();
            continue;
        }
        const bool both = 2 * k + 1 < count;
        const KQH q0 = KQ(mm_loadu_si128)(reinterpret_cast<const KQH*>(b0 + qs_at));
        const KQH q1 = both ? KQ(mm_loadu_si128)(reinterpret_cast<const KQH*>(b1 + qs_at))
                            : KQ(mm_setzero_si128)();
        uint32_t qh0 = 0, qh1 = 0;
        if constexpr (kKind != kQuantKindIQ4NL) {
            __builtin_memcpy(&qh0, b0 + qs_at - 4, 4);
            if (both) __builtin_memcpy(&qh1, b1 + qs_at - 4, 4);
        }
        v[k] = kq_pair_sum<kKind>(KQ(mm256_set_m128i)(q1, q0), qh0, qh1, xp + 64 * k, tbl);
    }
    KQI i = kq_hsum_pairs(v);
    const KQF xdv = KQ(mm256_load_ps)(xd);
    const KQI xsv = kq_load(xs);
    const KQF dx = KQ(mm256_mul_ps)(kq_f16x8(blk, bb, count), xdv);
    if constexpr (kQ51) {
        acc.step_lanes(i, dx);
        acc.step_lanes(xsv, KQ(mm256_mul_ps)(kq_f16x8(blk + 2, bb, count), xdv));
    } else {
        if constexpr (kKind == kQuantKindQ5_0)
            i = KQ(mm256_sub_epi32)(i, KQ(mm256_slli_epi32)(xsv, 4));
        else if constexpr (KQ_VNNI)  // IQ4_NL's codes offset by 128
            i = KQ(mm256_sub_epi32)(i, KQ(mm256_slli_epi32)(xsv, 7));
        acc.step_lanes(i, dx);
    }
}

// kRows consecutive rows (row_bytes apart) against the rearranged token: y[r] = row r's output.
template <int kKind, int kRows>
void kq_rows_one(const uint8_t* row, int64_t row_bytes, int64_t nb, const int8_t* xp,
                 const float* xd, const int32_t* xs, KQI tbl, float* y) {
    constexpr int64_t bb = kKqB32Bytes<kKind>;
    KqAcc acc[kRows];
    const int64_t groups = (nb + 7) / 8;
    int64_t b = 0;
    for (; b + 8 <= nb; b += 8) {
        if constexpr (kRows > 1)
            kq_prefetch_part(row + kRows * row_bytes, kRows * row_bytes, b / 8, groups);
        for (int r = 0; r < kRows; ++r)
            kq_group_one<kKind>(acc[r], row + r * row_bytes + b * bb, 8, xp + 32 * b, xd + b,
                                xs + b, tbl);
    }
    if (b < nb) {
        if constexpr (kRows > 1)
            kq_prefetch_part(row + kRows * row_bytes, kRows * row_bytes, b / 8, groups);
        for (int r = 0; r < kRows; ++r)
            kq_group_one<kKind>(acc[r], row + r * row_bytes + b * bb, static_cast<int>(nb - b),
                                xp + 32 * b, xd + b, xs + b, tbl);
    }
    kq_reduce_n<kRows>(acc, y);
}

// One token's activations rearranged into pairs of blocks (xp, 32 * nbp bytes) and its xd (and
// xs where xs is not null) padded with zeros to nbp blocks.
inline void kq_rearrange(const int8_t* xq, const float* xd, const int32_t* xs, int64_t nb,
                         int64_t nbp, int8_t* xp, float* xdp, int32_t* xsp) {
    for (int64_t p = 0; 2 * p < nbp; ++p) {
        const KQI x0 = 2 * p < nb ? kq_load(xq + 64 * p) : KQ(mm256_setzero_si256)();
        const KQI x1 = 2 * p + 1 < nb ? kq_load(xq + 64 * p + 32) : KQ(mm256_setzero_si256)();
        KQ(mm256_store_si256)
        (reinterpret_cast<KQI*>(xp + 64 * p), KQ(mm256_permute2x128_si256)(x0, x1, 0x20));
        KQ(mm256_store_si256)
        (reinterpret_cast<KQI*>(xp + 64 * p + 32), KQ(mm256_permute2x128_si256)(x0, x1, 0x31));
    }
    for (int64_t b = 0; b < nbp; ++b) {
        xdp[b] = b < nb ? xd[b] : 0.0f;
        if (xs) xsp[b] = b < nb ? xs[b] : 0;
    }
}

// Rows [r0, r1) at one token; scratch (QuantArgs::unpack, 40 * nbp bytes) takes the rearranged
// activations (32 * nbp bytes) and the token's xd and xs padded with zeros to nbp blocks.
template <int kKind>
void kq_matmul_b32_one(const QuantArgs& a, int64_t r0, int64_t r1, uint8_t* scratch) {
    const int64_t nb = a.cols / 32, nbp = (nb + 7) / 8 * 8;
    const int64_t row_bytes = nb * kKqB32Bytes<kKind>;
    auto* xp = reinterpret_cast<int8_t*>(scratch);
    auto* xd = reinterpret_cast<float*>(scratch + 32 * nbp);
    auto* xs = reinterpret_cast<int32_t*>(xd + nbp);
    kq_rearrange(a.xq, a.xd, a.xs, nb, nbp, xp, xd, xs);
    const KQI tbl = kq_iq4_pair_table();
    int64_t r = r0;
    for (; r + 4 <= r1; r += 4)
        kq_rows_one<kKind, 4>(a.data + r * row_bytes, row_bytes, nb, xp, xd, xs, tbl, a.y + r);
    for (; r < r1; ++r)
        kq_rows_one<kKind, 1>(a.data + r * row_bytes, row_bytes, nb, xp, xd, xs, tbl, a.y + r);
}

#if !KQ_VNNI
// IQ4_NL over several tokens without vpdpbusd. Its codes are signed, so maddubs takes |w| and
// xq * sign(w); a row's codes w and |w| are formed once into the scratch in kq_matmul_b32_one's
// pair layout (zero past the row's end, as are its scales) and read back for each of up to
// kQ5UnpackTokens tokens, whose activations are rearranged once per call. Every group of eight
// blocks is then whole; the float steps are the contract's, as kq_rows_one's.
// One row's formed codes (w, |w| wa, scales d; nbp blocks) against kTok tokens of rearranged
// activations (xp, xd: token k at 32 * nbp and nbp): y[k * ldy].
template <int kTok>
inline void kq_iq4_tokens(const int8_t* w, const int8_t* wa, const float* d, int64_t nb,
                          int64_t nbp, const int8_t* xp, const float* xd, float* y, int64_t ldy) {
    KqAcc acc[kTok];
    for (int64_t b = 0; b < nbp; b += 8) {
        // Pairs of this group with a block of the row (the others' codes and activations are 0).
        const int64_t pairs = std::min<int64_t>(4, (nb - b + 1) / 2);
        for (int k = 0; k < kTok; ++k) {
            const int8_t* x = xp + k * 32 * nbp;
            KQI v[4];
            for (int p = 0; p < 4; ++p) {
                v[p] = KQ(mm256_setzero_si256)();
                if (p >= pairs) continue;
                for (int h = 0; h < 2; ++h) {
                    const int64_t o = 32 * b + 64 * p + 32 * h;
                    v[p] = KQ(mm256_add_epi32)(
                        v[p], kq_dot(kq_load(wa + o),
                                     KQ(mm256_sign_epi8)(kq_load(x + o), kq_load(w + o))));
                }
            }
            acc[k].step_lanes(
                kq_hsum_pairs(v),
                KQ(mm256_mul_ps)(KQ(mm256_load_ps)(d + b), KQ(mm256_load_ps)(xd + k * nbp + b)));
        }
    }
    float out[kTok];
    kq_reduce_n<kTok>(acc, out);
    for (int k = 0; k < kTok; ++k) y[k * ldy] = out[k];
}

void kq_matmul_iq4_multi(const QuantArgs& a, int64_t r0, int64_t r1, uint8_t* scratch) {
    const int64_t nb = a.cols / 32, nbp = (nb + 7) / 8 * 8, row_bytes = nb * 18;
    auto* w = reinterpret_cast<int8_t*>(scratch);
    int8_t* wa = w + 32 * nbp;
    auto* d = reinterpret_cast<float*>(wa + 32 * nbp);
    auto* xp = reinterpret_cast<int8_t*>(d + nbp);
    auto* xd = reinterpret_cast<float*>(xp + kQ5UnpackTokens * 32 * nbp);
    const KQI tbl = kq_iq4_table(), m4 = KQ(mm256_set1_epi8)(0x0f);
    for (int64_t t0 = 0; t0 < a.n; t0 += kQ5UnpackTokens) {
        const int64_t nt = std::min(a.n - t0, kQ5UnpackTokens);
        for (int64_t k = 0; k < nt; ++k)
            kq_rearrange(a.xq + (t0 + k) * a.cols, a.xd + (t0 + k) * nb, nullptr, nb, nbp,
                         xp + k * 32 * nbp, xd + k * nbp, nullptr);
        for (int64_t r = r0; r < r1; ++r) {
            const uint8_t* row = a.data + r * row_bytes;
            for (int64_t p = 0; 2 * p < nbp; ++p) {
                KQI lo = KQ(mm256_setzero_si256)(), hi = lo;
                if (2 * p < nb) {
                    const KQH q0 =
                        KQ(mm_loadu_si128)(reinterpret_cast<const KQH*>(row + 36 * p + 2));
                    const KQH q1 =
                        2 * p + 1 < nb
                            ? KQ(mm_loadu_si128)(reinterpret_cast<const KQH*>(row + 36 * p + 20))
                            : KQ(mm_setzero_si128)();
                    const KQI q = KQ(mm256_set_m128i)(q1, q0);
                    lo = KQ(mm256_shuffle_epi8)(tbl, KQ(mm256_and_si256)(q, m4));
                    hi = KQ(mm256_shuffle_epi8)(
                        tbl, KQ(mm256_and_si256)(KQ(mm256_srli_epi16)(q, 4), m4));
                }
                KQ(mm256_store_si256)(reinterpret_cast<KQI*>(w + 64 * p), lo);
                KQ(mm256_store_si256)(reinterpret_cast<KQI*>(w + 64 * p + 32), hi);
                KQ(mm256_store_si256)(reinterpret_cast<KQI*>(wa + 64 * p), KQ(mm256_abs_epi8)(lo));
                KQ(mm256_store_si256)
                (reinterpret_cast<KQI*>(wa + 64 * p + 32), KQ(mm256_abs_epi8)(hi));
            }
            for (int64_t b = 0; b < nbp; ++b) d[b] = b < nb ? kq_scale_f16(row + 18 * b) : 0.0f;
            int64_t k = 0;
            for (; k + 2 <= nt; k += 2)
                kq_iq4_tokens<2>(w, wa, d, nb, nbp, xp + k * 32 * nbp, xd + k * nbp,
                                 a.y + (t0 + k) * a.ldy + r, a.ldy);
            for (; k < nt; ++k)
                kq_iq4_tokens<1>(w, wa, d, nb, nbp, xp + k * 32 * nbp, xd + k * nbp,
                                 a.y + (t0 + k) * a.ldy + r, a.ldy);
        }
    }
}
#endif

// Eight tokens at once (prompt processing): tokens in the vector lanes, so a block's sums need no
// horizontal reduction and its unpacked codes are read once for eight tokens. The activations of
// up to kQ5UnpackTokens tokens are first transposed into the scratch, each block of each group of
// eight tokens as 8 x 8 dwords: dword c of token t (its weights 4c..4c+3) at (8c + t) * 4.

// fma lane by lane where SIMDe's rounds twice (KQ_SCALAR_FLOAT), else the instruction.
inline KQF kq_fma(KQF a, KQF b, KQF c) {
#if KQ_SCALAR_FLOAT
    alignas(32) float av[8], bv[8], cv[8];
    KQ(mm256_store_ps)(av, a);
    KQ(mm256_store_ps)(bv, b);
    KQ(mm256_store_ps)(cv, c);
    for (int j = 0; j < 8; ++j) cv[j] = __builtin_fmaf(av[j], bv[j], cv[j]);
    return KQ(mm256_load_ps)(cv);
#else
    return KQ(mm256_fmadd_ps)(a, b, c);
#endif
}

inline KQI kq_bcast32(const uint8_t* p) {
    int32_t v;
    __builtin_memcpy(&v, p, 4);
    return KQ(mm256_set1_epi32)(v);
}

// Block b of eight tokens (rows of x `stride` bytes apart) -> out[(8c + t) * 4 + kk].
inline void kq_transpose_x8(const int8_t* x, int64_t stride, int8_t* out) {
    KQI r[8], a[8], b[8];
    for (int t = 0; t < 8; ++t) r[t] = kq_load(x + t * stride);
    for (int t = 0; t < 8; t += 2) {
        a[t] = KQ(mm256_unpacklo_epi32)(r[t], r[t + 1]);      // dwords 0, 1 | 4, 5 of t, t + 1
        a[t + 1] = KQ(mm256_unpackhi_epi32)(r[t], r[t + 1]);  // dwords 2, 3 | 6, 7
    }
    for (int h = 0; h < 8; h += 4) {
        b[h] = KQ(mm256_unpacklo_epi64)(a[h], a[h + 2]);          // dword 0 | 4 of 4 tokens
        b[h + 1] = KQ(mm256_unpackhi_epi64)(a[h], a[h + 2]);      // 1 | 5
        b[h + 2] = KQ(mm256_unpacklo_epi64)(a[h + 1], a[h + 3]);  // 2 | 6
        b[h + 3] = KQ(mm256_unpackhi_epi64)(a[h + 1], a[h + 3]);  // 3 | 7
    }
    for (int c = 0; c < 4; ++c) {
        KQ(mm256_store_si256)
        (reinterpret_cast<KQI*>(out + 32 * c), KQ(mm256_permute2x128_si256)(b[c], b[c + 4], 0x20));
        KQ(mm256_store_si256)
        (reinterpret_cast<KQI*>(out + 32 * (c + 4)),
         KQ(mm256_permute2x128_si256)(b[c], b[c + 4], 0x31));
    }
}

// Lane t = sum over one block of code * xq of token t (cw: its 32 codes, xt: its transposed
// activations).
inline KQI kq_block_x8(const uint8_t* cw, const int8_t* xt) {
#if KQ_VNNI
    KQI s0 = KQ(mm256_setzero_si256)(), s1 = s0;  // two chains
    for (int c = 0; c < 8; c += 2) {
        s0 = KQ(mm256_dpbusd_epi32)(s0, kq_bcast32(cw + 4 * c), kq_load(xt + 32 * c));
        s1 = KQ(mm256_dpbusd_epi32)(s1, kq_bcast32(cw + 4 * c + 4), kq_load(xt + 32 * c + 32));
    }
    return KQ(mm256_add_epi32)(s0, s1);
#else
    // Codes are at most 31, so four maddubs pair sums add up in int16 (|sum| <= 4 * 2 * 31 * 127).
    KQI h[2];
    for (int g = 0; g < 2; ++g) {
        const uint8_t* w = cw + 16 * g;
        const int8_t* x = xt + 128 * g;
        const KQI p =
            KQ(mm256_add_epi16)(KQ(mm256_maddubs_epi16)(kq_bcast32(w), kq_load(x)),
                                KQ(mm256_maddubs_epi16)(kq_bcast32(w + 4), kq_load(x + 32)));
        const KQI q =
            KQ(mm256_add_epi16)(KQ(mm256_maddubs_epi16)(kq_bcast32(w + 8), kq_load(x + 64)),
                                KQ(mm256_maddubs_epi16)(kq_bcast32(w + 12), kq_load(x + 96)));
        h[g] = KQ(mm256_madd_epi16)(KQ(mm256_add_epi16)(p, q), KQ(mm256_set1_epi16)(1));
    }
    return KQ(mm256_add_epi32)(h[0], h[1]);
#endif
}

// One unpacked row against eight tokens: xt, xdt, xst their transposed activations, xd and xs
// of block b at 8b + t. y[t] = token t's output.
template <int kKind>
void kq_rows_x8(const uint8_t* codes, const float* d, const float* m, int64_t nb, const int8_t* xt,
                const float* xdt, const int32_t* xst, float* y) {
    KQF acc[8];
    for (int j = 0; j < 8; ++j) acc[j] = KQ(mm256_setzero_ps)();
    for (int64_t b0 = 0; b0 < nb; b0 += 8)
        for (int j = 0; j < 8; ++j) {
            const int64_t b = b0 + j;
            if (b >= nb) break;
            KQI i = kq_block_x8(codes + 32 * b, xt + 256 * b);
            const KQF xdv = KQ(mm256_load_ps)(xdt + 8 * b);
            const KQI xsv = kq_load(xst + 8 * b);
            const KQF dx = KQ(mm256_mul_ps)(KQ(mm256_set1_ps)(d[b]), xdv);
            if constexpr (kKind == kQuantKindQ5_1) {
                acc[j] = kq_fma(KQ(mm256_cvtepi32_ps)(i), dx, acc[j]);
                acc[j] = kq_fma(KQ(mm256_cvtepi32_ps)(xsv),
                                KQ(mm256_mul_ps)(KQ(mm256_set1_ps)(m[b]), xdv), acc[j]);
            } else {
                constexpr int kShift = kKind == kQuantKindIQ4NL ? 7 : 4;
                i = KQ(mm256_sub_epi32)(i, KQ(mm256_slli_epi32)(xsv, kShift));
                acc[j] = kq_fma(KQ(mm256_cvtepi32_ps)(i), dx, acc[j]);
            }
        }
    const KQF s = KQ(mm256_add_ps)(
        KQ(mm256_add_ps)(KQ(mm256_add_ps)(acc[0], acc[1]), KQ(mm256_add_ps)(acc[2], acc[3])),
        KQ(mm256_add_ps)(KQ(mm256_add_ps)(acc[4], acc[5]), KQ(mm256_add_ps)(acc[6], acc[7])));
    KQ(mm256_storeu_ps)(y, s);
}

// Rows [r0, r1) of Q5_0 / Q5_1, each unpacked once into `scratch` (QuantArgs::unpack) per up to
// kQ5UnpackTokens tokens: whole groups of eight tokens by kq_rows_x8, the rest token by token.
template <int kKind>
void kq_matmul_b5(const QuantArgs& a, int64_t r0, int64_t r1, uint8_t* scratch) {
    static_assert(kKqUnpacks<kKind>);
    const int64_t nb = a.cols / 32, nbp = (nb + 7) / 8 * 8;
    const int64_t row_bytes = nb * kKqB32Bytes<kKind>;
    uint8_t* codes = scratch;
    float* d = reinterpret_cast<float*>(scratch + 32 * nbp);
    float* m = d + nbp;
    auto* xt = reinterpret_cast<int8_t*>(m + nbp);
    auto* xdt = reinterpret_cast<float*>(xt + kQ5UnpackTokens * a.cols);
    auto* xst = reinterpret_cast<int32_t*>(xdt + kQ5UnpackTokens * nb);
    const int64_t n8 = a.n / 8 * 8;
    for (int64_t t0 = 0; t0 < n8; t0 += kQ5UnpackTokens) {
        const int64_t ng = (n8 - t0 < kQ5UnpackTokens ? n8 - t0 : kQ5UnpackTokens) / 8;
        for (int64_t g = 0; g < ng; ++g)
            for (int64_t b = 0; b < nb; ++b) {
                const int64_t t = t0 + 8 * g, at = g * nb + b;
                kq_transpose_x8(a.xq + t * a.cols + 32 * b, a.cols, xt + 256 * at);
                for (int64_t k = 0; k < 8; ++k) {
                    xdt[8 * at + k] = a.xd[(t + k) * nb + b];
                    xst[8 * at + k] = a.xs[(t + k) * nb + b];
                }
            }
        for (int64_t r = r0; r < r1; ++r) {
            kq_unpack_b5<kKind>(a.data + r * row_bytes, nb, codes, d, m);
            for (int64_t g = 0; g < ng; ++g) {
                alignas(32) float y[8];
                kq_rows_x8<kKind>(codes, d, m, nb, xt + 256 * nb * g, xdt + 8 * nb * g,
                                  xst + 8 * nb * g, y);
                for (int64_t k = 0; k < 8; ++k) a.y[(t0 + 8 * g + k) * a.ldy + r] = y[k];
            }
        }
    }
    if (n8 == a.n) return;
    for (int64_t r = r0; r < r1; ++r) {
        kq_unpack_b5<kKind>(a.data + r * row_bytes, nb, codes, d, m);
        for (int64_t t = n8; t < a.n; ++t)
            a.y[t * a.ldy + r] =
                kq_dot_b5<kKind>(codes, d, m, nb, a.xq + t * a.cols, a.xd + t * nb, a.xs + t * nb);
    }
}

// An IQ4_XS super-block's eight 6-bit scales minus 32 as int32 lanes: scales_l's nibble j (bits
// 4j of its little-endian u32) with scales_h's bits 2j, 2j + 1 above it.
inline KQI kq_iq4xs_scales(const uint8_t* blk) {
    uint32_t lo;
    __builtin_memcpy(&lo, blk + 4, 4);
    const int32_t sh = blk[2] | blk[3] << 8;
    const KQI l =
        KQ(mm256_and_si256)(KQ(mm256_srlv_epi32)(KQ(mm256_set1_epi32)(static_cast<int32_t>(lo)),
                                                 KQ(mm256_setr_epi32)(0, 4, 8, 12, 16, 20, 24, 28)),
                            KQ(mm256_set1_epi32)(0xF));
    const KQI h =
        KQ(mm256_and_si256)(KQ(mm256_srlv_epi32)(KQ(mm256_set1_epi32)(sh),
                                                 KQ(mm256_setr_epi32)(0, 2, 4, 6, 8, 10, 12, 14)),
                            KQ(mm256_set1_epi32)(3));
    return KQ(mm256_sub_epi32)(KQ(mm256_or_si256)(l, KQ(mm256_slli_epi32)(h, 4)),
                               KQ(mm256_set1_epi32)(32));
}

// [first-half sums of v[0..7] | second-half sums], v[j] the int16 pair sums of 32-block j.
inline KQI kq_hsum_halves16(const KQI* v) {
    const KQI a =
        KQ(mm256_hadd_epi16)(KQ(mm256_hadd_epi16)(v[0], v[1]), KQ(mm256_hadd_epi16)(v[2], v[3]));
    const KQI b =
        KQ(mm256_hadd_epi16)(KQ(mm256_hadd_epi16)(v[4], v[5]), KQ(mm256_hadd_epi16)(v[6], v[7]));
    return KQ(mm256_hadd_epi16)(a, b);
}

// 16-weight sums in kq_hsum_halves16's order -> in their natural order (half 2j, 2j + 1 of
// 32-block j side by side).
inline KQI kq_halves_natural(KQI halves) {
    // [first halves 0..3, second halves 0..3 | first 4..7, second 4..7], then each block's two
    // halves side by side.
    const KQI t = KQ(mm256_permute4x64_epi64)(halves, 0xd8);
    return KQ(mm256_shuffle_epi8)(
        t, KQ(mm256_setr_epi8)(0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15, 0, 1, 8, 9, 2,
                               3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15));
}

// halves: 16-weight sums in kq_hsum_halves16's order; sc: the 16 halves' scales as int16 lanes in
// their natural order. Lane j = sc(2j) * half(2j) + sc(2j + 1) * half(2j + 1), 32-block j's sum.
inline KQI kq_halves_scaled(KQI halves, KQI sc) {
    return KQ(mm256_madd_epi16)(kq_halves_natural(halves), sc);
}

// One token's super-block term: sum kMul*xq of each 16-half, in kq_hsum_halves16's order or, with
// kNatural, in their natural order (Q3_K: kMul 4, the offset of its codes; Q2_K: kMul 1 in natural
// order, what its mins multiply).
template <int kMul, bool kNatural>
inline KQI kq_half_sums(const int8_t* x) {
    const KQI m = KQ(mm256_set1_epi8)(kMul);
    KQI v[8];
    for (int j = 0; j < 8; ++j) v[j] = KQ(mm256_maddubs_epi16)(m, kq_load(x + 32 * j));
    return kNatural ? kq_halves_natural(kq_hsum_halves16(v)) : kq_hsum_halves16(v);
}

// With QuantArgs::unpack (n * nsb * 32 bytes): every token's kq_half_sums, formed there once per
// call (token t's super-block s at [t * nsb + s]); null without it (the kernels form them as they
// go).
template <int kMul, bool kNatural>
const KQI* kq_fill_half_sums(const QuantArgs& a) {
    KQI* xts = reinterpret_cast<KQI*>(a.unpack);
    const int64_t nsb = a.cols / 256;
    if (xts)
        for (int64_t t = 0; t < a.n; ++t)
            for (int64_t s = 0; s < nsb; ++s)
                xts[t * nsb + s] = kq_half_sums<kMul, kNatural>(a.xq + t * a.cols + 256 * s);
    return xts;
}

// Several tokens (prompt processing, batched decode) of Q4_K / Q5_K, Q6_K, IQ4_XS and Q2_K: each
// super-block's codes and scales are formed once into registers / L1 and used by kTok tokens,
// instead of once per token as the one-row functions below do (forming them is as many
// instructions as one token's dot products). Each token's integer sums and float steps are the
// one-token functions', so every output is the bits it gets alone. y[k]: token t + k's output.
template <bool kQ5, int kTok>
void kq_row_q45_tokens(const QuantArgs& a, const uint8_t* row, int64_t nsb, int64_t t, float* y) {
    KqAcc acc[kTok];
    constexpr int64_t bb = kQ5 ? 176 : 144;
    const int64_t nb = a.cols / 32;
    for (int64_t s = 0; s < nsb; ++s) {
        const uint8_t* blk = row + s * bb;
        KQI codes[8];  // 32-block j's codes, against activations 32j..32j+31
        KQI hb{};
        if constexpr (kQ5) hb = kq_load(blk + 16);
        for (int c = 0; c < 4; ++c) kq_q45_codes<kQ5>(blk, hb, c, codes[2 * c], codes[2 * c + 1]);
        KQI sc, mn;
        kq_scales_mins(blk + 4, sc, mn);
        float d, dmin;
        kq_scales_f16(blk, d, dmin);
        for (int k = 0; k < kTok; ++k) {
            const int8_t* x = a.xq + (t + k) * a.cols + s * 256;
            KQI v[8];
            for (int j = 0; j < 8; ++j) v[j] = kq_dot(codes[j], kq_load(x + 32 * j));
            const KQI i = KQ(mm256_mullo_epi32)(kq_hsum8(v), sc);
            const KQI mx = KQ(mm256_mullo_epi32)(mn, kq_load(a.xs + (t + k) * nb + s * 8));
            acc[k].step(i, a.xd + (t + k) * nb + s * 8, d, true, mx, dmin);
        }
    }
    kq_reduce_n<kTok>(acc, y);
}

template <int kTok>
void kq_row_q6_tokens(const QuantArgs& a, const uint8_t* row, int64_t nsb, int64_t t, float* y) {
    KqAcc acc[kTok];
    const KQI m4 = KQ(mm256_set1_epi8)(0x0f), m30 = KQ(mm256_set1_epi8)(0x30),
              k32 = KQ(mm256_set1_epi8)(32);
    const int64_t nb = a.cols / 32;
    for (int64_t s = 0; s < nsb; ++s) {
        const uint8_t* blk = row + s * 210;
        const KQH sc8 = KQ(mm_loadu_si128)(reinterpret_cast<const KQH*>(blk + 192));
        KQI codes[8], scv[8];
        for (int h = 0; h < 2; ++h) kq_q6_codes(blk, h, m4, m30, codes + 4 * h);
        for (int j = 0; j < 8; ++j)
            scv[j] = KQ(mm256_cvtepi8_epi16)(KQ(mm_shuffle_epi8)(sc8, kq_sel(j)));
        const float d = kq_scale_f16(blk + 208);
        for (int k = 0; k < kTok; ++k) {
            const int8_t* x = a.xq + (t + k) * a.cols + s * 256;
            KQI v[8];
            for (int j = 0; j < 8; ++j) {
                const KQI xv = kq_load(x + 32 * j);
                const KQI p = KQ(mm256_sub_epi16)(KQ(mm256_maddubs_epi16)(codes[j], xv),
                                                  KQ(mm256_maddubs_epi16)(k32, xv));
                v[j] = KQ(mm256_madd_epi16)(p, scv[j]);
            }
            acc[k].step(kq_hsum8(v), a.xd + (t + k) * nb + s * 8, d, false,
                        KQ(mm256_setzero_si256)(), 0.0f);
        }
    }
    kq_reduce_n<kTok>(acc, y);
}

template <int kTok>
void kq_row_iq4xs_tokens(const QuantArgs& a, const uint8_t* row, int64_t nsb, int64_t t, float* y) {
    const KQI tbl = kq_iq4_table();
    KqAcc acc[kTok];
    const int64_t nb = a.cols / 32;
    for (int64_t s = 0; s < nsb; ++s) {
        const uint8_t* blk = row + s * 136;
        KQI w[8], wa[8];
        for (int j = 0; j < 8; ++j) {
            w[j] = KQ(mm256_shuffle_epi8)(tbl, kq_nibbles32(blk + 8 + 16 * j));
            wa[j] = KQ(mm256_sign_epi8)(w[j], w[j]);
        }
        const KQI lsv = kq_iq4xs_scales(blk);
        const float d = kq_scale_f16(blk);
        for (int k = 0; k < kTok; ++k) {
            const int8_t* x = a.xq + (t + k) * a.cols + s * 256;
            KQI v[8];
            for (int j = 0; j < 8; ++j)
                v[j] = kq_dot(wa[j], KQ(mm256_sign_epi8)(kq_load(x + 32 * j), w[j]));
            acc[k].step(KQ(mm256_mullo_epi32)(kq_hsum8(v), lsv), a.xd + (t + k) * nb + s * 8, d,
                        false, KQ(mm256_setzero_si256)(), 0.0f);
        }
    }
    kq_reduce_n<kTok>(acc, y);
}

// A super-block's min term: its 16 mins against the token's 16-weight sums (kq_half_sums<1, true>,
// formed once per call where xts is not null), lane j = min(2j) * sum(half 2j) + min(2j + 1) *
// sum(half 2j + 1) (|sum| <= 16 * 127).
inline KQI kq_q2k_mins(KQH mnl, const KQI* xts, int64_t i, const int8_t* x) {
    return KQ(mm256_madd_epi16)(KQ(mm256_cvtepu8_epi16)(mnl),
                                xts ? xts[i] : kq_half_sums<1, true>(x));
}

// xts: kq_fill_half_sums<1, true> of the call (token t's super-block s at xts[t * nsb + s]), or
// null.
template <int kTok>
void kq_row_q2k_tokens(const QuantArgs& a, const uint8_t* row, int64_t nsb, int64_t t, float* y,
                       const KQI* xts) {
    KqAcc acc[kTok];
    const KQI m3 = KQ(mm256_set1_epi8)(3);
    const KQH m4 = KQ(mm_set1_epi8)(0x0f);
    const int64_t nb = a.cols / 32;
    for (int64_t s = 0; s < nsb; ++s) {
        const uint8_t* blk = row + s * 84;
        const KQH sc8 = KQ(mm_loadu_si128)(reinterpret_cast<const KQH*>(blk));
        const KQH scl = KQ(mm_and_si128)(sc8, m4),
                  mnl = KQ(mm_and_si128)(KQ(mm_srli_epi16)(sc8, 4), m4);
        KQI codes[8], scv[8];
        for (int h = 0; h < 2; ++h) {
            const KQI q = kq_load(blk + 16 + 32 * h);
            for (int k = 0; k < 4; ++k) {
                const int j = 4 * h + k;
                codes[j] =
                    KQ(mm256_and_si256)(KQ(mm256_srl_epi16)(q, KQ(mm_cvtsi32_si128)(2 * k)), m3);
                scv[j] = KQ(mm256_cvtepi8_epi16)(KQ(mm_shuffle_epi8)(scl, kq_sel(j)));
            }
        }
        float d, dmin;
        kq_scales_f16(blk + 80, d, dmin);
        for (int k = 0; k < kTok; ++k) {
            const int8_t* x = a.xq + (t + k) * a.cols + s * 256;
            KQI v[8];
            for (int j = 0; j < 8; ++j)
                v[j] = KQ(mm256_madd_epi16)(KQ(mm256_maddubs_epi16)(codes[j], kq_load(x + 32 * j)),
                                            scv[j]);
            acc[k].step(kq_hsum8(v), a.xd + (t + k) * nb + s * 8, d, true,
                        kq_q2k_mins(mnl, xts, (t + k) * nsb + s, x), dmin);
        }
    }
    kq_reduce_n<kTok>(acc, y);
}

// Rows [r0, r1) of a 256-weight super-block type (Q4_K, Q5_K, Q6_K, IQ4_XS, Q2_K) for every
// token, up to kKqTokens tokens per pass over a row.
constexpr int kKqTokens = 8;
// xts: Q2_K's kq_fill_half_sums<1, true> (or null); the other types take none.
template <int kKind, int kTok>
void kq_rows_tokens(const QuantArgs& a, const uint8_t* row, int64_t nsb, int64_t r, int64_t t,
                    const KQI* xts) {
    float y[kTok];
    if constexpr (kKind == kQuantKindQ6K)
        kq_row_q6_tokens<kTok>(a, row, nsb, t, y);
    else if constexpr (kKind == kQuantKindIQ4XS)
        kq_row_iq4xs_tokens<kTok>(a, row, nsb, t, y);
    else if constexpr (kKind == kQuantKindQ2K)
        kq_row_q2k_tokens<kTok>(a, row, nsb, t, y, xts);
    else
        kq_row_q45_tokens<kKind == kQuantKindQ5K, kTok>(a, row, nsb, t, y);
    for (int k = 0; k < kTok; ++k) a.y[(t + k) * a.ldy + r] = y[k];
}
template <int kKind>
void kq_matmul_sb_tokens(const QuantArgs& a, int64_t r0, int64_t r1, const KQI* xts = nullptr) {
    const int64_t nsb = a.cols / 256;
    const int64_t row_bytes = nsb * kKQuantKindBytes[kKind - kQuantKindQ4K];
    for (int64_t r = r0; r < r1; ++r)
        for_token_tiles<kKqTokens>(a.n, [&]<int NT>(int64_t t) {
            kq_rows_tokens<kKind, NT>(a, a.data + r * row_bytes, nsb, r, t, xts);
        });
}

// One row of IQ4_XS against one token's activations.
float kq_row_iq4xs(const uint8_t* row, int64_t nsb, const int8_t* xq, const float* xd) {
    const KQI tbl = kq_iq4_table();
    KqAcc acc;
    for (int64_t s = 0; s < nsb; ++s) {
        const uint8_t* blk = row + s * 136;
        const int8_t* x = xq + s * 256;
        KQI v[8];
        for (int j = 0; j < 8; ++j) v[j] = kq_dot_iq4(tbl, blk + 8 + 16 * j, kq_load(x + 32 * j));
        const KQI i = KQ(mm256_mullo_epi32)(kq_hsum8(v), kq_iq4xs_scales(blk));
        acc.step(i, xd + s * 8, kq_scale_f16(blk), false, KQ(mm256_setzero_si256)(), 0.0f);
    }
    return acc.reduce();
}

// Q3_K, several rows or several tokens per pass. A weight's code u = q + 4 * high bit (0..7,
// unsigned) makes its value u - 4, so a 16-half's sum is sum u*xq - sum 4*xq. maddubs' pair sums
// of eight 32-blocks, added up by three levels of 16-bit hadds, give each 16-half's sum as one
// int16 ([first halves of blocks 0..7 | second halves]; |sum| <= 16 * 7 * 128, no wrap), and
// after taking off the 4*xq sums (formed the same way once per token and super-block) one madd
// against the scales applies both halves' scales and adds them: the eight 32-blocks' integer sums
// (exact, so their order is free). A super-block's codes and scales are formed once for the
// pass's tokens, its 4*xq sums once for the pass's rows. The float steps are the contract's.

// One Q3_K super-block's codes (u[j]: 32-block j) and its 16 scales - 32 as int16 lanes.
inline void kq_q3_unpack(const uint8_t* blk, KQI* u, KQI& sc) {
    const KQI m3 = KQ(mm256_set1_epi8)(3), k4 = KQ(mm256_set1_epi8)(4);
    const KQI hm = kq_load(blk);
    for (int h = 0; h < 2; ++h) {
        const KQI q = kq_load(blk + 32 + 32 * h);
        for (int k = 0; k < 4; ++k) {
            const int j = 4 * h + k;
            // Bit j of hmask to bit 2, bits 2k, 2k + 1 of qs to bits 0, 1 (16-bit shifts: the
            // masks drop what crosses from the neighbouring byte).
            const KQI hb = j < 2 ? KQ(mm256_sll_epi16)(hm, KQ(mm_cvtsi32_si128)(2 - j))
                                 : KQ(mm256_srl_epi16)(hm, KQ(mm_cvtsi32_si128)(j - 2));
            u[j] = KQ(mm256_or_si256)(
                KQ(mm256_and_si256)(KQ(mm256_srl_epi16)(q, KQ(mm_cvtsi32_si128)(2 * k)), m3),
                KQ(mm256_and_si256)(hb, k4));
        }
    }
    // tensor::q3k_scales, restated here so that it inlines: that one is compiled out of line
    // for the baseline ISA, and a call per super-block and row would sit on the decode path. The
    // kernels' bit-exact tests against the scalar kernel (which calls it) keep the two equal.
    uint32_t aux[4];
    __builtin_memcpy(aux, blk + 96, 12);
    constexpr uint32_t km1 = 0x03030303u, km2 = 0x0f0f0f0fu;
    const uint32_t tmp = aux[2];
    aux[2] = ((aux[0] >> 4) & km2) | (((tmp >> 4) & km1) << 4);
    aux[3] = ((aux[1] >> 4) & km2) | (((tmp >> 6) & km1) << 4);
    aux[0] = (aux[0] & km2) | (((tmp >> 0) & km1) << 4);
    aux[1] = (aux[1] & km2) | (((tmp >> 2) & km1) << 4);
    sc = KQ(mm256_cvtepi8_epi16)(KQ(mm_sub_epi8)(
        KQ(mm_loadu_si128)(reinterpret_cast<const KQH*>(aux)), KQ(mm_set1_epi8)(32)));
}

// The eight 32-block sums of one super-block (codes u, scales sc) against one token (x, its
// term xt).
inline KQI kq_q3_sums(const KQI* u, KQI sc, const int8_t* x, KQI xt) {
    KQI v[8];
    for (int j = 0; j < 8; ++j) v[j] = KQ(mm256_maddubs_epi16)(u[j], kq_load(x + 32 * j));
    return kq_halves_scaled(KQ(mm256_sub_epi16)(kq_hsum_halves16(v), xt), sc);
}

// One token of Q2_K (decode). Its 16 scales apply to the halves' int16 sums in one madd per
// super-block (codes 0..3 against |x| <= 127: a 16-weight half sums to at most 16 * 3 * 127), and
// its min term is kq_q2k_mins. xts: kq_fill_half_sums<1, true> of the call, or null.
template <bool kSums>
float kq_row_q2k_one(const uint8_t* row, int64_t nsb, const int8_t* xq, const float* xd,
                     const KQI* xts) {
    KqAcc acc;
    const KQI m3 = KQ(mm256_set1_epi8)(3);
    const KQH m4 = KQ(mm_set1_epi8)(0x0f);
    for (int64_t s = 0; s < nsb; ++s) {
        const uint8_t* blk = row + s * 84;
        const int8_t* x = xq + s * 256;
        const KQH sc8 = KQ(mm_loadu_si128)(reinterpret_cast<const KQH*>(blk));
        const KQH scl = KQ(mm_and_si128)(sc8, m4),
                  mnl = KQ(mm_and_si128)(KQ(mm_srli_epi16)(sc8, 4), m4);
        KQI v[8];
        for (int h = 0; h < 2; ++h) {
            const KQI q = kq_load(blk + 16 + 32 * h);
            for (int k = 0; k < 4; ++k) {
                const int j = 4 * h + k;
                const KQI codes =
                    KQ(mm256_and_si256)(KQ(mm256_srl_epi16)(q, KQ(mm_cvtsi32_si128)(2 * k)), m3);
                v[j] = KQ(mm256_maddubs_epi16)(codes, kq_load(x + 32 * j));
            }
        }
        const KQI i = kq_halves_scaled(kq_hsum_halves16(v), KQ(mm256_cvtepu8_epi16)(scl));
        const KQI mx = kq_q2k_mins(mnl, kSums ? xts : nullptr, s, x);
        float d, dmin;
        kq_scales_f16(blk + 80, d, dmin);
        acc.step(i, xd + s * 8, d, true, mx, dmin);
    }
    return acc.reduce();
}

// Rows [r0, r1) of Q2_K, with every token's 16-weight sums formed once per call where
// QuantArgs::unpack is given (n * nsb * 32 bytes). Not inlined into kq_matmul: there it shared
// one function with the other types' row loops, and one-token decode ran 10% slower.
[[gnu::noinline]] void kq_matmul_q2k(const QuantArgs& a, int64_t r0, int64_t r1) {
    const KQI* xts = kq_fill_half_sums<1, true>(a);
    if (a.n > 1) return kq_matmul_sb_tokens<kQuantKindQ2K>(a, r0, r1, xts);
    const int64_t nsb = a.cols / 256, row_bytes = nsb * 84;
    for (int64_t r = r0; r < r1; ++r)
        a.y[r] = xts ? kq_row_q2k_one<true>(a.data + r * row_bytes, nsb, a.xq, a.xd, xts)
                     : kq_row_q2k_one<false>(a.data + r * row_bytes, nsb, a.xq, a.xd, nullptr);
}

// kRows rows from row r (at `row`, row_bytes apart) against kTok tokens from t: y[t * ldy + r].
// xts: the tokens' terms (token t + k's super-block s at xts[k * nsb + s]), or null to form them
// here.
template <int kRows, int kTok>
void kq_q3_pass(const QuantArgs& a, const uint8_t* row, int64_t row_bytes, int64_t r, int64_t t,
                const KQI* xts) {
    const int64_t nsb = a.cols / 256, nb = a.cols / 32;
    KqAcc acc[kRows * kTok];
    for (int64_t s = 0; s < nsb; ++s) {
        KQI xt[kTok];
        if constexpr (kRows > 1)
            kq_prefetch_part(row + kRows * row_bytes, kRows * row_bytes, s, nsb);
        for (int k = 0; k < kTok; ++k)
            xt[k] =
                xts ? xts[k * nsb + s] : kq_half_sums<4, false>(a.xq + (t + k) * a.cols + 256 * s);
        for (int i = 0; i < kRows; ++i) {
            const uint8_t* blk = row + i * row_bytes + 110 * s;
            KQI u[8], sc;
            kq_q3_unpack(blk, u, sc);
            const KQF d = kq_f16x8(blk + 108, 0, 8);  // d in every lane
            for (int k = 0; k < kTok; ++k)
                acc[i * kTok + k].step_lanes(
                    kq_q3_sums(u, sc, a.xq + (t + k) * a.cols + 256 * s, xt[k]),
                    KQ(mm256_mul_ps)(d, KQ(mm256_loadu_ps)(a.xd + (t + k) * nb + 8 * s)));
        }
    }
    float out[kRows * kTok];
    kq_reduce_n<kRows * kTok>(acc, out);
    for (int i = 0; i < kRows; ++i)
        for (int k = 0; k < kTok; ++k) a.y[(t + k) * a.ldy + r + i] = out[i * kTok + k];
}

// Rows [r0, r1) of Q3_K: at one token four rows per pass; at more, one row against four tokens
// per pass (the row's codes formed once for the four). With QuantArgs::unpack (n * nsb * 32
// bytes) every token's terms are formed once per call there.
void kq_matmul_q3k(const QuantArgs& a, int64_t r0, int64_t r1) {
    const int64_t row_bytes = a.cols / 256 * 110, nsb = a.cols / 256;
    const KQI* xts = kq_fill_half_sums<4, false>(a);
    if (a.n == 1) {
        int64_t r = r0;
        for (; r + 4 <= r1; r += 4)
            kq_q3_pass<4, 1>(a, a.data + r * row_bytes, row_bytes, r, 0, xts);
        for (; r < r1; ++r) kq_q3_pass<1, 1>(a, a.data + r * row_bytes, row_bytes, r, 0, xts);
        return;
    }
    for (int64_t r = r0; r < r1; ++r) {
        int64_t t = 0;
        for (; t + 4 <= a.n; t += 4)
            kq_q3_pass<1, 4>(a, a.data + r * row_bytes, row_bytes, r, t,
                             xts ? xts + t * nsb : nullptr);
        for (; t < a.n; ++t)
            kq_q3_pass<1, 1>(a, a.data + r * row_bytes, row_bytes, r, t,
                             xts ? xts + t * nsb : nullptr);
    }
}

// Q8_0 rows ([f16 d][32 int8 codes] per 32-block) with int8-g32's arithmetic
// (kernels/matmul_quant.h): one fma chain per row and token, block by block in k order. Eight rows
// share a pass and each row's chain is one float lane: a vector holds the first (or last) 16 codes
// of block b of two rows, 2i and 2i + 1, side by side, against the token's matching 16 activations
// in both halves, so four such products (two per pair of rows) reduce to the eight rows' block sums
// in three hadds, in the lane order [0 2 4 6 | 1 3 5 7] (kKqQ8Lane), which the scales and outputs
// follow. A pass over fewer than eight rows repeats its last row in the spare lanes and keeps only
// its own.
constexpr int kKqQ8Lane[8] = {0, 2, 4, 6, 1, 3, 5, 7};  // lane j holds row kKqQ8Lane[j]

// Sum of q*x over signed codes: with vpdpbusd as (q + 128) * x (the caller takes 128 * xs off),
// with maddubs as |q| * (x * sign(q)) (pair sums peak at 2 * 128 * 127 where q = -128).
inline KQI kq_q8_dot(KQI q, KQI x) {
#if KQ_VNNI
    return kq_dot(KQ(mm256_xor_si256)(q, KQ(mm256_set1_epi8)(static_cast<char>(0x80))), x);
#else
    return kq_dot(KQ(mm256_sign_epi8)(q, q), KQ(mm256_sign_epi8)(x, q));
#endif
}

// The 16 bytes at p, then the 16 at q.
inline KQI kq_load2x128(const uint8_t* p, const uint8_t* q) {
    return KQ(mm256_set_m128i)(KQ(mm_loadu_si128)(reinterpret_cast<const KQH*>(q)),
                               KQ(mm_loadu_si128)(reinterpret_cast<const KQH*>(p)));
}

// The f16 scale of block b (at rows[0] + off + idx[j]) of each lane's row as f32 lanes (exact).
inline KQF kq_q8_scales(const uint8_t* const* rows, KQI idx, int64_t off) {
#if KQ_SCALAR_FLOAT
    alignas(32) float f[8];
    for (int j = 0; j < 8; ++j) f[j] = kq_f16(rows[kKqQ8Lane[j]] + off);
    (void)idx;
    return KQ(mm256_load_ps)(f);
#else
    // One gather of the dword at each scale, then each dword's low 16 bits packed into 8 halves.
    const KQI g = KQ(mm256_i32gather_epi32)(reinterpret_cast<const int*>(rows[0] + off), idx, 1);
    const KQI lo = KQ(mm256_shuffle_epi8)(
        g, KQ(mm256_setr_epi8)(0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1, 0, 1, 4, 5,
                               8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1));
    const KQI packed = KQ(mm256_permute4x64_epi64)(lo, 0x08);  // qwords 0 and 2
    return KQ(mm256_cvtph_ps)(KQ(mm256_castsi256_si128)(packed));
#endif
}

// Q4_0 / Q4_1 (int4-g32's / int4-g32-asym's arithmetic, kernels/matmul_quant.h), the same pass
// as Q8_0's: the 16 code bytes of block b of rows 2i and 2i + 1 side by side, their low nibbles
// (codes 0-15) against the token's first 16 activations and the high ones (codes 16-31) against
// the last 16, u8 codes times s8 activations with no sign trick. Q4_0 takes 8 * xs off the sums
// (codes q - 8); Q4_1 adds its mins' term, fma(float(xs), m*xd, acc), after the codes' step.
template <int kKind>
struct KqPanelBlocks;
template <>
struct KqPanelBlocks<kQuantKindQ8_0> {
    static constexpr int64_t kBytes = 34, kCodes = 2;
};
template <>
struct KqPanelBlocks<kQuantKindQ4_0> {
    static constexpr int64_t kBytes = 18, kCodes = 2;
};
template <>
struct KqPanelBlocks<kQuantKindQ4_1> {
    static constexpr int64_t kBytes = 20, kCodes = 4;
};
template <>
struct KqPanelBlocks<kQuantKindQ4Rows> {  // 16 code bytes per 32 weights; scales elsewhere
    static constexpr int64_t kBytes = 16, kCodes = 0;
};

// Row-major int4 (kernels/matmul_quant.h): byte i of a 32-block holds the codes of k = 2i (low
// nibble) and 2i + 1 (high), so the token's block is split into its even and odd activations
// (16 each, in that order), which the low and the high nibbles then meet as Q4_0's halves do.
inline void kq_even_odd(KQH x0, KQH x1, KQH& even, KQH& odd) {
    const KQH se = KQ(mm_setr_epi8)(0, 2, 4, 6, 8, 10, 12, 14, 0, 2, 4, 6, 8, 10, 12, 14);
    const KQH so = KQ(mm_setr_epi8)(1, 3, 5, 7, 9, 11, 13, 15, 1, 3, 5, 7, 9, 11, 13, 15);
    even = KQ(mm_unpacklo_epi64)(KQ(mm_shuffle_epi8)(x0, se), KQ(mm_shuffle_epi8)(x1, se));
    odd = KQ(mm_unpacklo_epi64)(KQ(mm_shuffle_epi8)(x0, so), KQ(mm_shuffle_epi8)(x1, so));
}

// Row-major int4: the f16 or bf16 scale at base + off[j] of each lane's row as f32 (exact). The
// vector path gathers the dword that ends with the scale (its high half), which starts 2 bytes
// before it: inside the file, whose header precedes every tensor, where the dword after the
// last scale might not be.
inline KQF kq_q4rows_scales(const uint8_t* base, const int32_t* off, bool bf16) {
#if KQ_SCALAR_FLOAT
    alignas(32) float f[8];
    for (int j = 0; j < 8; ++j) {
        const uint8_t* p = base + off[j];
        const uint32_t bits = static_cast<uint32_t>(p[0] | (p[1] << 8));
        if (bf16) {
            const uint32_t u = bits << 16;
            __builtin_memcpy(&f[j], &u, 4);
        } else {
            f[j] = kq_f16(p);
        }
    }
    return KQ(mm256_load_ps)(f);
#else
    const KQI g =
        KQ(mm256_i32gather_epi32)(reinterpret_cast<const int*>(base - 2), kq_load(off), 1);
    if (bf16)
        return KQ(mm256_castsi256_ps)(
            KQ(mm256_and_si256)(g, KQ(mm256_set1_epi32)(static_cast<int>(0xffff0000u))));
    const KQI hi = KQ(mm256_shuffle_epi8)(
        g, KQ(mm256_setr_epi8)(2, 3, 6, 7, 10, 11, 14, 15, -1, -1, -1, -1, -1, -1, -1, -1, 2, 3, 6,
                               7, 10, 11, 14, 15, -1, -1, -1, -1, -1, -1, -1, -1));
    const KQI packed = KQ(mm256_permute4x64_epi64)(hi, 0x08);  // qwords 0 and 2
    return KQ(mm256_cvtph_ps)(KQ(mm256_castsi256_si128)(packed));
#endif
}

// Eight rows (rows[i]) against token t; y[i] = row i's output for i < count. next: the next pass's
// rows (8 * row_bytes contiguous bytes), prefetched piece by piece block after block (a row is a
// short stream, too short for the hardware prefetcher to ramp up on), or null.
template <int kKind>
void kq_panel_rows(const QuantArgs& a, const uint8_t* const* rows, int64_t t, float* y, int count,
                   const uint8_t* next) {
    constexpr int64_t kB = KqPanelBlocks<kKind>::kBytes, kC = KqPanelBlocks<kKind>::kCodes;
    const int64_t nb = a.cols / 32;
    const int8_t* xq = a.xq + t * a.cols;
    const float* xd = a.xd + t * nb;
    const int32_t* xs = a.xs + t * nb;
    alignas(32) int32_t off[8];
    for (int j = 0; j < 8; ++j) off[j] = static_cast<int32_t>(rows[kKqQ8Lane[j]] - rows[0]);
    const KQI idx = kq_load(off);
    const KQI m4 = KQ(mm256_set1_epi8)(0x0f);
    // Row-major int4: each lane's row's scales (a.group / 32 blocks per scale).
    alignas(32) int32_t soff[8] = {};
    const uint8_t* scales = nullptr;
    int64_t blocks_per_scale = 1;
    if constexpr (kKind == kQuantKindQ4Rows) {
        const int64_t ng = a.cols / a.group, row_bytes = a.cols / 2;
        scales = a.scales + (rows[0] - a.data) / row_bytes * ng * 2;
        for (int j = 0; j < 8; ++j)
            soff[j] = static_cast<int32_t>((rows[kKqQ8Lane[j]] - rows[0]) / row_bytes * ng * 2);
        blocks_per_scale = a.group / 32;
    }
    KqAcc acc;
    for (int64_t b = 0; b < nb; ++b) {
        if (next)  // block b's share of the next pass's bytes, 8 blocks of them
            for (int64_t o = 8 * kB * b; o < 8 * kB * (b + 1); o += 64)
                __builtin_prefetch(next + o);
        const int64_t o = kB * b + kC;
        KQH x0 = KQ(mm_loadu_si128)(reinterpret_cast<const KQH*>(xq + 32 * b));
        KQH x1 = KQ(mm_loadu_si128)(reinterpret_cast<const KQH*>(xq + 32 * b + 16));
        if constexpr (kKind == kQuantKindQ4Rows) kq_even_odd(x0, x1, x0, x1);
        const KQI xl = KQ(mm256_set_m128i)(x0, x0), xh = KQ(mm256_set_m128i)(x1, x1);
        KQI v[4];
        for (int p = 0; p < 4; ++p) {
            const uint8_t* r0 = rows[2 * p] + o;
            const uint8_t* r1 = rows[2 * p + 1] + o;
            if constexpr (kKind == kQuantKindQ8_0) {
                v[p] = KQ(mm256_add_epi32)(kq_q8_dot(kq_load2x128(r0, r1), xl),
                                           kq_q8_dot(kq_load2x128(r0 + 16, r1 + 16), xh));
            } else {
                const KQI q = kq_load2x128(r0, r1);
                v[p] = KQ(mm256_add_epi32)(
                    kq_dot(KQ(mm256_and_si256)(q, m4), xl),
                    kq_dot(KQ(mm256_and_si256)(KQ(mm256_srli_epi16)(q, 4), m4), xh));
            }
        }
        // v[p]: lanes 0-3 row 2p's four partial sums, 4-7 row 2p + 1's.
        KQI sums = KQ(mm256_hadd_epi32)(KQ(mm256_hadd_epi32)(v[0], v[1]),
                                        KQ(mm256_hadd_epi32)(v[2], v[3]));
        if constexpr (kKind == kQuantKindQ8_0) {
#if KQ_VNNI
            sums = KQ(mm256_sub_epi32)(sums, KQ(mm256_set1_epi32)(128 * xs[b]));
#endif
        } else {  // Q4_0, row-major int4: codes q - 8; Q4_1's mins come after
            if constexpr (kKind != kQuantKindQ4_1)
                sums = KQ(mm256_sub_epi32)(sums, KQ(mm256_set1_epi32)(8 * xs[b]));
        }
        const KQF vxd = KQ(mm256_set1_ps)(xd[b]);
        KQF d;
        if constexpr (kKind == kQuantKindQ4Rows)
            d = kq_q4rows_scales(scales + b / blocks_per_scale * 2, soff, a.bf16_scales);
        else
            d = kq_q8_scales(rows, idx, kB * b);
        acc.step_lanes(sums, KQ(mm256_mul_ps)(d, vxd));
        if constexpr (kKind == kQuantKindQ4_1)
            acc.step_lanes(KQ(mm256_set1_epi32)(xs[b]),
                           KQ(mm256_mul_ps)(kq_q8_scales(rows, idx, kB * b + 2), vxd));
    }
    alignas(32) float out[8];
    acc.store(out);
    for (int j = 0; j < 8; ++j)
        if (kKqQ8Lane[j] < count) y[kKqQ8Lane[j]] = out[j];
}

// Rows [r0, r1) of Q8_0 / Q4_0 / Q4_1 / row-major int4, eight at a time, every token of a group of
// rows before the next group.
template <int kKind>
void kq_matmul_panel_contract(const QuantArgs& a, int64_t r0, int64_t r1) {
    const int64_t row_bytes = a.cols / 32 * KqPanelBlocks<kKind>::kBytes;
    for (int64_t r = r0; r < r1; r += 8) {
        const int count = static_cast<int>(std::min<int64_t>(8, r1 - r));
        const uint8_t* rows[8];
        for (int i = 0; i < 8; ++i) rows[i] = a.data + (r + std::min(i, count - 1)) * row_bytes;
        const uint8_t* next = a.n == 1 && r + 8 < a.rows ? a.data + (r + 8) * row_bytes : nullptr;
        for (int64_t t = 0; t < a.n; ++t)
            kq_panel_rows<kKind>(a, rows, t, a.y + t * a.ldy + r, count, next);
    }
}

// Row-major FP8 (kernels/matmul_quant.h) at one token: eight rows per pass, lane j row j. Byte J
// of a dword of four columns is column k + J's code, chain J's. A code's e4m3 bits placed in an
// f32 (sign to bit 31, the 7 others to bits 26..20) are its value times 2^-120 exactly (subnormals
// included), so times 2^120 they are its value: each step is the contract's fma(e4m3(code), x[k],
// chain), block by block, folded with the block's scale as the contract does.
#if !KQ_SCALAR_FLOAT
template <int J>
inline KQF kq_e4m3_times_2m120(KQI q) {
    const KQI sign = KQ(mm256_and_si256)(J == 3 ? q : KQ(mm256_slli_epi32)(q, 24 - 8 * J),
                                         KQ(mm256_set1_epi32)(static_cast<int>(0x80000000u)));
    const KQI mag = KQ(mm256_and_si256)(
        J == 3 ? KQ(mm256_srli_epi32)(q, 4) : KQ(mm256_slli_epi32)(q, 20 - 8 * J),
        KQ(mm256_set1_epi32)(0x07f00000));
    return KQ(mm256_castsi256_ps)(KQ(mm256_or_si256)(sign, mag));
}
// The four steps of one dword of four columns per lane (q), columns k..k + 3.
inline void kq_fp8_quad(KQI q, const float* x, KQF* c) {
    const KQF s120 = KQ(mm256_set1_ps)(0x1p120f);
    c[0] = KQ(mm256_fmadd_ps)(KQ(mm256_mul_ps)(kq_e4m3_times_2m120<0>(q), s120),
                              KQ(mm256_set1_ps)(x[0]), c[0]);
    c[1] = KQ(mm256_fmadd_ps)(KQ(mm256_mul_ps)(kq_e4m3_times_2m120<1>(q), s120),
                              KQ(mm256_set1_ps)(x[1]), c[1]);
    c[2] = KQ(mm256_fmadd_ps)(KQ(mm256_mul_ps)(kq_e4m3_times_2m120<2>(q), s120),
                              KQ(mm256_set1_ps)(x[2]), c[2]);
    c[3] = KQ(mm256_fmadd_ps)(KQ(mm256_mul_ps)(kq_e4m3_times_2m120<3>(q), s120),
                              KQ(mm256_set1_ps)(x[3]), c[3]);
}
#endif

void kq_fp8_rows(const QuantArgs& a, int64_t r0, int64_t r1) {
    const int64_t g = a.group, nb = (a.cols + g - 1) / g;
    for (int64_t r = r0; r < r1; r += 8) {
        const int count = static_cast<int>(std::min<int64_t>(8, r1 - r));
        alignas(32) int32_t off[8], soff[8];
        for (int j = 0; j < 8; ++j) {
            const int64_t row = r + std::min(j, count - 1);
            off[j] = static_cast<int32_t>((row - r) * a.cols);
            soff[j] =
                static_cast<int32_t>((row / a.scale_block_rows - r / a.scale_block_rows) * nb * 4);
        }
        const uint8_t* base = a.data + r * a.cols;
        const uint8_t* grid = a.scales + (r / a.scale_block_rows) * nb * 4;
        for (int64_t t = 0; t < a.n; ++t) {
            const float* x = a.x + t * a.cols;
            alignas(32) float y[8] = {};
            for (int64_t b = 0; b < nb; ++b) {
                const int64_t k1 = std::min(a.cols, (b + 1) * g);
#if KQ_SCALAR_FLOAT
                float c[4][8] = {};
                for (int64_t k = b * g; k < k1; ++k)
                    for (int j = 0; j < 8; ++j) {
                        const uint8_t v = base[off[j] + k];
                        const uint32_t bits = (static_cast<uint32_t>(v & 0x80) << 24) |
                                              (static_cast<uint32_t>(v & 0x7f) << 20);
                        float w;
                        __builtin_memcpy(&w, &bits, 4);
                        c[k % 4][j] = __builtin_fmaf(w * 0x1p120f, x[k], c[k % 4][j]);
                    }
                for (int j = 0; j < 8; ++j) {
                    float sc;
                    __builtin_memcpy(&sc, grid + soff[j] + b * 4, 4);
                    y[j] = __builtin_fmaf((c[0][j] + c[1][j]) + (c[2][j] + c[3][j]), sc, y[j]);
                }
#else
                KQF c[4] = {KQ(mm256_setzero_ps)(), KQ(mm256_setzero_ps)(), KQ(mm256_setzero_ps)(),
                            KQ(mm256_setzero_ps)()};
                int64_t k = b * g;
                // 32 columns of the eight rows: one load per row, then an 8 x 8 transpose of their
                // dwords, so vector c holds columns k + 4c .. k + 4c + 3 of every row.
                for (; k + 32 <= k1; k += 32) {
                    KQI v[8];
                    for (int i = 0; i < 8; ++i) v[i] = kq_load(base + off[i] + k);
                    KQI tt[8];
                    for (int i = 0; i < 8; i += 2) {
                        tt[i] = KQ(mm256_unpacklo_epi32)(v[i], v[i + 1]);
                        tt[i + 1] = KQ(mm256_unpackhi_epi32)(v[i], v[i + 1]);
                    }
                    KQI u[8];
                    for (int h = 0; h < 8; h += 4) {
                        u[h] = KQ(mm256_unpacklo_epi64)(tt[h], tt[h + 2]);
                        u[h + 1] = KQ(mm256_unpackhi_epi64)(tt[h], tt[h + 2]);
                        u[h + 2] = KQ(mm256_unpacklo_epi64)(tt[h + 1], tt[h + 3]);
                        u[h + 3] = KQ(mm256_unpackhi_epi64)(tt[h + 1], tt[h + 3]);
                    }
                    for (int q = 0; q < 4; ++q) {
                        kq_fp8_quad(KQ(mm256_permute2x128_si256)(u[q], u[q + 4], 0x20),
                                    x + k + 4 * q, c);
                    }
                    for (int q = 0; q < 4; ++q) {
                        kq_fp8_quad(KQ(mm256_permute2x128_si256)(u[q], u[q + 4], 0x31),
                                    x + k + 16 + 4 * q, c);
                    }
                }
                const KQI idx = kq_load(off);
                for (; k < k1; k += 4)  // a block's last columns, four at a time
                    kq_fp8_quad(
                        KQ(mm256_i32gather_epi32)(reinterpret_cast<const int*>(base + k), idx, 1),
                        x + k, c);
                const KQF p =
                    KQ(mm256_add_ps)(KQ(mm256_add_ps)(c[0], c[1]), KQ(mm256_add_ps)(c[2], c[3]));
                const KQF sc = KQ(mm256_i32gather_ps)(reinterpret_cast<const float*>(grid + b * 4),
                                                      kq_load(soff), 1);
                KQ(mm256_store_ps)(y, KQ(mm256_fmadd_ps)(p, sc, KQ(mm256_load_ps)(y)));
#endif
            }
            for (int j = 0; j < count; ++j) a.y[t * a.ldy + r + j] = y[j];
        }
    }
}

// Rows [r0, r1) for every token: a row's blocks stay in L1 across the tokens.
void kq_matmul(const QuantArgs& a, int64_t r0, int64_t r1) {
    if (a.kind == kQuantKindQ8_0) return kq_matmul_panel_contract<kQuantKindQ8_0>(a, r0, r1);
    if (a.kind == kQuantKindQ4_0) return kq_matmul_panel_contract<kQuantKindQ4_0>(a, r0, r1);
    if (a.kind == kQuantKindQ4_1) return kq_matmul_panel_contract<kQuantKindQ4_1>(a, r0, r1);
    if (a.kind == kQuantKindQ4Rows) return kq_matmul_panel_contract<kQuantKindQ4Rows>(a, r0, r1);
    if (a.kind == kQuantKindFp8Rows) return kq_fp8_rows(a, r0, r1);
    if (a.unpack && a.n == 1) {
        switch (a.kind) {
            case kQuantKindQ5_0:
                return kq_matmul_b32_one<kQuantKindQ5_0>(a, r0, r1, a.unpack);
            case kQuantKindQ5_1:
                return kq_matmul_b32_one<kQuantKindQ5_1>(a, r0, r1, a.unpack);
            case kQuantKindIQ4NL:
                return kq_matmul_b32_one<kQuantKindIQ4NL>(a, r0, r1, a.unpack);
            default:
                break;
        }
    }
    if (a.kind == kQuantKindQ3K) return kq_matmul_q3k(a, r0, r1);
    if (a.kind == kQuantKindQ2K) return kq_matmul_q2k(a, r0, r1);
    if (a.n > 1) {
        switch (a.kind) {
            case kQuantKindQ4K:
                return kq_matmul_sb_tokens<kQuantKindQ4K>(a, r0, r1);
            case kQuantKindQ5K:
                return kq_matmul_sb_tokens<kQuantKindQ5K>(a, r0, r1);
            case kQuantKindQ6K:
                return kq_matmul_sb_tokens<kQuantKindQ6K>(a, r0, r1);
            case kQuantKindIQ4XS:
                return kq_matmul_sb_tokens<kQuantKindIQ4XS>(a, r0, r1);
            default:
                break;
        }
    }
    if (a.unpack) {
        switch (a.kind) {
            case kQuantKindQ5_0:
                return kq_matmul_b5<kQuantKindQ5_0>(a, r0, r1, a.unpack);
            case kQuantKindQ5_1:
                return kq_matmul_b5<kQuantKindQ5_1>(a, r0, r1, a.unpack);
            case kQuantKindIQ4NL:
#if KQ_VNNI
                return kq_matmul_b5<kQuantKindIQ4NL>(a, r0, r1, a.unpack);
#else
                return kq_matmul_iq4_multi(a, r0, r1, a.unpack);
#endif
            default:
                break;
        }
    }
    const int64_t nsb = a.cols / 256, nb = a.cols / 32;
    const int64_t row_bytes = a.cols / kKQuantKindElems[a.kind - kQuantKindQ4K] *
                              kKQuantKindBytes[a.kind - kQuantKindQ4K];
    for (int64_t r = r0; r < r1; ++r) {
        const uint8_t* row = a.data + r * row_bytes;
        for (int64_t t = 0; t < a.n; ++t) {
            const int8_t* xq = a.xq + t * a.cols;
            const float* xd = a.xd + t * nb;
            const int32_t* xs = a.xs + t * nb;
            float y;
            switch (a.kind) {
                case kQuantKindQ4K:
                    y = kq_row_q45<false>(row, nsb, xq, xd, xs);
                    break;
                case kQuantKindQ5K:
                    y = kq_row_q45<true>(row, nsb, xq, xd, xs);
                    break;
                case kQuantKindQ6K:
                    y = kq_row_q6(row, nsb, xq, xd);
                    break;
                case kQuantKindQ5_0:
                    y = kq_row_b32<kQuantKindQ5_0>(row, nb, xq, xd, xs);
                    break;
                case kQuantKindQ5_1:
                    y = kq_row_b32<kQuantKindQ5_1>(row, nb, xq, xd, xs);
                    break;
                case kQuantKindIQ4NL:
                    y = kq_row_b32<kQuantKindIQ4NL>(row, nb, xq, xd, xs);
                    break;
                default:  // IQ4_XS (Q2_K and Q3_K take their own paths above)
                    y = kq_row_iq4xs(row, nsb, xq, xd);
                    break;
            }
            a.y[t * a.ldy + r] = y;
        }
    }
}

}  // namespace
}  // namespace warden::kernels::detail
