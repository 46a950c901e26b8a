#pragma once
// Scalar conversions between f32 and the 16-bit float formats. These are the reference
// definitions every SIMD kernel is tested against.
#include <bit>
#include <cstdint>

namespace warden::tensor {

using bf16_t = uint16_t;  // raw bfloat16 bits
using f16_t = uint16_t;   // raw IEEE binary16 bits

inline float bf16_to_f32(bf16_t h) {
    return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
}

// Round to nearest even; NaN stays a (quiet) NaN instead of rounding up into infinity.
inline bf16_t f32_to_bf16(float f) {
    uint32_t u = std::bit_cast<uint32_t>(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<bf16_t>((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return static_cast<bf16_t>(u >> 16);
}

inline float f16_to_f32(f16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu;
    const uint32_t man = h & 0x3ffu;
    uint32_t out;
    if (exp == 0) {
        if (man == 0) {
            out = sign;
        } else {  // subnormal: value = man * 2^-24
            float v = static_cast<float>(man) * 5.9604644775390625e-8f;
            return sign ? -v : v;
        }
    } else if (exp == 31) {
        out = sign | 0x7f800000u | (man << 13);
    } else {
        out = sign | ((exp + 112u) << 23) | (man << 13);
    }
    return std::bit_cast<float>(out);
}

// Round to nearest even, overflow to infinity, NaN preserved.
inline f16_t f32_to_f16(float f) {
    const uint32_t u = std::bit_cast<uint32_t>(f);
    const uint32_t sign = (u >> 16) & 0x8000u;
    const uint32_t abs = u & 0x7fffffffu;
    if (abs > 0x7f800000u) return static_cast<f16_t>(sign | 0x7e00u);
    if (abs >= 0x477ff000u) return static_cast<f16_t>(sign | 0x7c00u);  // rounds to >= 65520
    if (abs < 0x38800000u) {                                            // below 2^-14: subnormal
        // Scale so the subnormal step (2^-24) becomes 1 and let the FPU round to nearest even.
        const float scaled = std::bit_cast<float>(abs) * 16777216.0f;
        const float r = scaled + 8388608.0f - 8388608.0f;  // RNE to integer for values < 2^23
        return static_cast<f16_t>(sign | static_cast<uint32_t>(r));
    }
    const uint32_t mant_odd = (abs >> 13) & 1u;
    const uint32_t rounded = abs + 0xfffu + mant_odd;
    return static_cast<f16_t>(sign | ((rounded - (112u << 23)) >> 13));
}

}  // namespace warden::tensor
