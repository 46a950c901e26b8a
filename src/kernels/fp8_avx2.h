#pragma once
// AVX2 widening of fp8 e4m3 codes, shared by the quantized-weight kernel (matmul_quant_avx2.cpp)
// and the KV read kernels (paged_attention_avx2.cpp). Include only from *_avx2.cpp files: they are
// all compiled with the same -m flags, so the inline definitions stay identical (ODR).
#include <immintrin.h>

#include <cstdint>

#include "kernels/kernels_internal.h"

namespace warden::kernels::avx2 {

// 16 consecutive e4m3 codes -> f32 of codes 0-7 (lo) and 8-15 (hi) (in the weight layout: 16
// rows at one k; in a KV row: 16 consecutive elements). vpshufb puts each
// code in the top byte of its 32-bit lane (zeros below); an arithmetic shift right by 4 moves
// exponent and mantissa to bits 26..20 and smears the sign over bits 30..27, which the mask
// clears: sign | e.mmm << 20 is the value times 2^-120, and * 2^120 is exact (e4m3 subnormals
// become f32 subnormals and come back exact). The NaN codes (x.1111.111) read as +-480: the weight
// quantizer never writes them, and the KV reader scans a row for them first.
struct E4m3x16 {
    const __m256i lo_ctrl = _mm256_setr_epi8(
        -128, -128, -128, 0, -128, -128, -128, 1, -128, -128, -128, 2, -128, -128, -128, 3, -128,
        -128, -128, 4, -128, -128, -128, 5, -128, -128, -128, 6, -128, -128, -128, 7);
    const __m256i hi_ctrl = _mm256_setr_epi8(
        -128, -128, -128, 8, -128, -128, -128, 9, -128, -128, -128, 10, -128, -128, -128, 11, -128,
        -128, -128, 12, -128, -128, -128, 13, -128, -128, -128, 14, -128, -128, -128, 15);
    const __m256i mask = _mm256_set1_epi32(static_cast<int32_t>(0x87f00000u));
    const __m256 pow120 = _mm256_set1_ps(detail::kE4m3Pow120);
    // Without the * 2^120: each value times 2^-120, exactly (the kernels multiply it by x * 2^120
    // instead: detail::QuantArgs::x_e4m3).
    void raw(const uint8_t* p, __m256& lo, __m256& hi) const {
        const __m256i c =
            _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
        lo = _mm256_castsi256_ps(
            _mm256_and_si256(_mm256_srai_epi32(_mm256_shuffle_epi8(c, lo_ctrl), 4), mask));
        hi = _mm256_castsi256_ps(
            _mm256_and_si256(_mm256_srai_epi32(_mm256_shuffle_epi8(c, hi_ctrl), 4), mask));
    }
    void operator()(const uint8_t* p, __m256& lo, __m256& hi) const {
        const __m256i c =
            _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
        const __m256i a =
            _mm256_and_si256(_mm256_srai_epi32(_mm256_shuffle_epi8(c, lo_ctrl), 4), mask);
        const __m256i b =
            _mm256_and_si256(_mm256_srai_epi32(_mm256_shuffle_epi8(c, hi_ctrl), 4), mask);
        lo = _mm256_mul_ps(_mm256_castsi256_ps(a), pow120);
        hi = _mm256_mul_ps(_mm256_castsi256_ps(b), pow120);
    }
};

}  // namespace warden::kernels::avx2
