#pragma once
// The one place where the AVX-512 kernels (*_avx512.cpp) meet their intrinsics, so each file can
// be compiled twice: natively (with the -mavx512* flags, for AVX-512 CPUs) and, in the tests,
// against SIMDe's portable implementations of the same intrinsics (WARDEN_AVX512_EMULATE, see
// tests/kernels/test_ops_avx512_emulated.cpp,
// tests/kernels/test_matmul_quant_avx512_emulated.cpp), where it
// runs, and is compared with the scalar kernels, on any x86-64. Intrinsics are written
// WZ(mm512_add_ps)(...), which is _mm512_add_ps natively and simde_mm512_add_ps emulated; constants
// WZC(_CMP_GE_OQ) likewise.
//
// The helpers below are the only code that differs between the two builds: SIMDe 0.7.4 lacks
// these intrinsics (or, for fma, rounds twice in its portable path), so the emulated branch
// computes the same values lane by lane.
//
// Everything here has internal linkage (anonymous namespace): the native and the emulated copies
// of these helpers differ, so they must never be merged by the linker (ODR).
#include <cstdint>

#include "kernels/kernels_internal.h"
#include "kernels/x86_intrinsics.h"

#ifdef WARDEN_AVX512_EMULATE
// (GCC notes an ABI change for SIMDe's 64-byte vectors without -mavx512f; the emulated builds
// pass -Wno-psabi: CMakeLists.txt.)
#include <simde/x86/avx512.h>
#include <simde/x86/f16c.h>
#define WZ(name) simde_##name
#define WZC(name) SIMDE##name
#else
#define WZ(name) _##name
#define WZC(name) name
#endif

namespace warden::kernels::detail {
namespace {

#ifdef WARDEN_AVX512_EMULATE
using zi = simde__m512i;
using zf = simde__m512;
using yi = simde__m256i;
using yf = simde__m256;
using xf = simde__m128;
using mask16 = simde__mmask16;
#else
using zi = __m512i;
using zf = __m512;
using yi = __m256i;
using yf = __m256;
using xf = __m128;
using mask16 = __mmask16;
#endif

constexpr int kLanes = 16;

// 16 u16 (bf16 or f16 bits) -> 16 f32, exactly.
inline zf bf16x16_to_f32(const void* p) {
#ifdef WARDEN_AVX512_EMULATE
    alignas(64) uint32_t u[kLanes];
    for (int r = 0; r < kLanes; ++r) {
        uint16_t h;
        __builtin_memcpy(&h, static_cast<const uint8_t*>(p) + 2 * r, 2);
        u[r] = static_cast<uint32_t>(h) << 16;
    }
    return WZ(mm512_castsi512_ps)(WZ(mm512_load_si512)(u));
#else
    const __m256i h = _mm256_loadu_si256(static_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
#endif
}

inline zf f16x16_to_f32(const void* p) {
#ifdef WARDEN_AVX512_EMULATE
    alignas(64) float f[kLanes];
    const auto* b = static_cast<const uint8_t*>(p);
    WZ(mm256_store_ps)(f, WZ(mm256_cvtph_ps)(WZ(mm_loadu_si128)(b)));
    WZ(mm256_store_ps)(f + 8, WZ(mm256_cvtph_ps)(WZ(mm_loadu_si128)(b + 16)));
    return WZ(mm512_load_ps)(f);
#else
    return _mm512_cvtph_ps(_mm256_loadu_si256(static_cast<const __m256i*>(p)));
#endif
}

// 16 fp8 e4m3 codes (one byte each) -> 16 f32, exactly, as the AVX2 kernels widen them
// (kernels/fp8_avx2.h): the sign-extended code shifted left by 20 has the sign smeared over bits
// 31..27 and exponent.mantissa in bits 26..20; masking to bits 31 and 26..20 gives the value times
// 2^-120, and * 2^120 is exact (subnormal codes included). The NaN codes (x.1111.111) read as
// +-480, as in the AVX2 kernels (the scalar reference reads NaN): the weight quantizer never writes
// them, so no runtime FP8 matrix holds one. The same codes widened without the * 2^120: each value
// times 2^-120, exactly (the FP8 kernels multiply it by x * 2^120 instead:
// detail::QuantArgs::x_e4m3).
inline zf e4m3x16_raw(const uint8_t* p) {
#ifdef WARDEN_AVX512_EMULATE
    alignas(64) uint32_t u[kLanes];
    for (int r = 0; r < kLanes; ++r)
        u[r] = (static_cast<uint32_t>(static_cast<int32_t>(static_cast<int8_t>(p[r]))) << 20) &
               0x87f00000u;
    return WZ(mm512_castsi512_ps)(WZ(mm512_load_si512)(u));
#else
    const __m512i v = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm512_castsi512_ps(_mm512_and_si512(
        _mm512_slli_epi32(v, 20), _mm512_set1_epi32(static_cast<int32_t>(0x87f00000u))));
#endif
}

inline zf e4m3x16_to_f32(const uint8_t* p) {
#ifdef WARDEN_AVX512_EMULATE
    alignas(64) uint32_t u[kLanes];
    for (int r = 0; r < kLanes; ++r)
        u[r] = (static_cast<uint32_t>(static_cast<int32_t>(static_cast<int8_t>(p[r]))) << 20) &
               0x87f00000u;
    return WZ(mm512_mul_ps)(WZ(mm512_castsi512_ps)(WZ(mm512_load_si512)(u)),
                            WZ(mm512_set1_ps)(kE4m3Pow120));
#else
    const __m512i v = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    const __m512i b = _mm512_and_si512(_mm512_slli_epi32(v, 20),
                                       _mm512_set1_epi32(static_cast<int32_t>(0x87f00000u)));
    return _mm512_mul_ps(_mm512_castsi512_ps(b), _mm512_set1_ps(kE4m3Pow120));
#endif
}

// 16 int8 -> 16 f32, exactly (SIMDe 0.7.4 has no 512-bit cvtepi8_epi32).
inline zf i8x16_to_f32(const uint8_t* p) {
#ifdef WARDEN_AVX512_EMULATE
    alignas(64) float f[kLanes];
    for (int r = 0; r < kLanes; ++r) f[r] = static_cast<float>(static_cast<int8_t>(p[r]));
    return WZ(mm512_load_ps)(f);
#else
    return _mm512_cvtepi32_ps(
        _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
#endif
}

inline zf i32_to_f32(zi v) {
#ifdef WARDEN_AVX512_EMULATE
    alignas(64) int32_t i[kLanes];
    alignas(64) float f[kLanes];
    WZ(mm512_store_si512)(i, v);
    for (int r = 0; r < kLanes; ++r) f[r] = static_cast<float>(i[r]);
    return WZ(mm512_load_ps)(f);
#else
    return _mm512_cvtepi32_ps(v);
#endif
}

// f32 -> int32, rounding to nearest even (the default MXCSR mode). Callers pass values within
// int32 range.
inline zi f32_to_i32(zf v) {
#ifdef WARDEN_AVX512_EMULATE
    alignas(64) float f[kLanes];
    alignas(64) int32_t i[kLanes];
    WZ(mm512_store_ps)(f, v);
    for (int r = 0; r < kLanes; ++r) i[r] = static_cast<int32_t>(__builtin_nearbyintf(f[r]));
    return WZ(mm512_load_si512)(i);
#else
    return _mm512_cvtps_epi32(v);
#endif
}

// The low 16 bits of each int32 lane (truncation, as vpmovdw) -> 16 u16 at p.
inline void store_low16(void* p, zi v) {
#ifdef WARDEN_AVX512_EMULATE
    alignas(64) uint32_t u[kLanes];
    WZ(mm512_store_si512)(u, v);
    for (int r = 0; r < kLanes; ++r) {
        const auto h = static_cast<uint16_t>(u[r]);
        __builtin_memcpy(static_cast<uint8_t*>(p) + 2 * r, &h, 2);
    }
#else
    _mm256_storeu_si256(static_cast<__m256i*>(p), _mm512_cvtepi32_epi16(v));
#endif
}

// a * b + c and c - a * b, each with one rounding.
inline zf fmadd(zf a, zf b, zf c) {
#ifdef WARDEN_AVX512_EMULATE
    alignas(64) float fa[kLanes], fb[kLanes], fc[kLanes];
    WZ(mm512_store_ps)(fa, a);
    WZ(mm512_store_ps)(fb, b);
    WZ(mm512_store_ps)(fc, c);
    for (int r = 0; r < kLanes; ++r) fc[r] = __builtin_fmaf(fa[r], fb[r], fc[r]);
    return WZ(mm512_load_ps)(fc);
#else
    return _mm512_fmadd_ps(a, b, c);
#endif
}

inline zf fnmadd(zf a, zf b, zf c) {
    // -a by flipping the sign bit (exact, and -(+0) = -0 as vfnmadd would give; 0 - a would not).
    const zf neg_a = WZ(mm512_castsi512_ps)(
        WZ(mm512_xor_si512)(WZ(mm512_castps_si512)(a), WZ(mm512_set1_epi32)(INT32_MIN)));
    return fmadd(neg_a, b, c);
}

// Horizontal sum and max of 16 lanes, as a fixed tree (the two 256-bit halves, then the 128-bit
// halves, then pairs), written out so both builds add in the same order.
inline float reduce_add(zf v) {
    const yf lo = WZ(mm512_castps512_ps256)(v);
    const yf hi = WZ(mm256_castpd_ps)(WZ(mm512_extractf64x4_pd)(WZ(mm512_castps_pd)(v), 1));
    const yf s8 = WZ(mm256_add_ps)(lo, hi);
    const xf s4 = WZ(mm_add_ps)(WZ(mm256_castps256_ps128)(s8), WZ(mm256_extractf128_ps)(s8, 1));
    const xf s2 = WZ(mm_add_ps)(s4, WZ(mm_movehl_ps)(s4, s4));
    return WZ(mm_cvtss_f32)(WZ(mm_add_ss)(s2, WZ(mm_shuffle_ps)(s2, s2, 1)));
}

inline float reduce_max(zf v) {
    const yf lo = WZ(mm512_castps512_ps256)(v);
    const yf hi = WZ(mm256_castpd_ps)(WZ(mm512_extractf64x4_pd)(WZ(mm512_castps_pd)(v), 1));
    const yf s8 = WZ(mm256_max_ps)(lo, hi);
    const xf s4 = WZ(mm_max_ps)(WZ(mm256_castps256_ps128)(s8), WZ(mm256_extractf128_ps)(s8, 1));
    const xf s2 = WZ(mm_max_ps)(s4, WZ(mm_movehl_ps)(s4, s4));
    return WZ(mm_cvtss_f32)(WZ(mm_max_ps)(s2, WZ(mm_shuffle_ps)(s2, s2, 1)));
}

// Writes lanes [j0, j1) of v to y[j0..j1) (all 16 with one store when the range is whole).
inline void store_lanes(zf v, float* y, int64_t j0, int64_t j1) {
    if (j0 == 0 && j1 == kLanes) {
        WZ(mm512_storeu_ps)(y, v);
        return;
    }
    alignas(64) float tmp[kLanes];
    WZ(mm512_store_ps)(tmp, v);
    for (int64_t j = j0; j < j1; ++j) y[j] = tmp[j];
}

}  // namespace
}  // namespace warden::kernels::detail
