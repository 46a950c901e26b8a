#pragma once
// AVX2 helpers shared by the AVX2 matmul translation units (bf16/f32 and quantized formats).
// Include only from *_avx2.cpp files: they are all compiled with the same -m flags, so the
// inline definitions stay identical (ODR).
#include <immintrin.h>

#include <cstdint>

#include "kernels/matmul.h"

namespace warden::kernels::avx2 {

// Writes the 16 results of one panel (rows lo: 0-7, hi: 8-15) to y[0..16), only rows
// [j0, j1) (a row range or the matrix end may cut the panel).
inline void store_panel(__m256 lo, __m256 hi, float* y, int64_t j0, int64_t j1) {
    if (j0 == 0 && j1 == kPanelRows) {
        _mm256_storeu_ps(y, lo);
        _mm256_storeu_ps(y + 8, hi);
        return;
    }
    alignas(32) float tmp[kPanelRows];
    _mm256_store_ps(tmp, lo);
    _mm256_store_ps(tmp + 8, hi);
    for (int64_t j = j0; j < j1; ++j) y[j] = tmp[j];
}

}  // namespace warden::kernels::avx2
