#pragma once
// Scalar conversions between f32 and the two OCP 8-bit float formats:
//   e4m3 ("E4M3FN": bias 7, no infinities, codes 0x7f/0xff are NaN, largest finite 448)
//   e5m2 (bias 15, IEEE-like: infinities 0x7c/0xfc, NaNs above them, largest finite 57344)
// These are the reference definitions the SIMD KV kernels and the weight quantizers are
// tested against; the golden test (tests/tensor/test_fp8.cpp) checks them against ml_dtypes.
#include <cstdint>

namespace warden::tensor {

// Exact decode of every code (NaN codes -> quiet NaN; e5m2 infinities -> +-inf).
float fp8_e4m3_to_f32(uint8_t code);
float fp8_e5m2_to_f32(uint8_t code);

// Round-to-nearest-even, saturating to the largest finite value (448 / 57344), NaN -> a NaN code.
// Infinities saturate too (to +-448 / +-57344); the sign of zero is kept. A NaN input gives
// 0x7f (e4m3) / 0x7e (e5m2) with the input's sign bit.
uint8_t f32_to_fp8_e4m3(float x);
uint8_t f32_to_fp8_e5m2(float x);

// 256-entry decode tables (index = code), built once; what the SIMD kernels gather from.
const float* fp8_e4m3_table();
const float* fp8_e5m2_table();

inline constexpr float kFp8E4m3Max = 448.0f;
inline constexpr float kFp8E5m2Max = 57344.0f;

}  // namespace warden::tensor
