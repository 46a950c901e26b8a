#include "tensor/fp8.h"

#include <bit>
#include <cmath>
#include <limits>

namespace warden::tensor {
namespace {

// Format parameters: mantissa bits, exponent bias, largest finite code (positive).
template <int MBITS, int BIAS, uint8_t MAX_CODE>
struct Fp8Format {
    static float decode(uint8_t code) {
        const bool neg = (code & 0x80u) != 0;
        const uint32_t e = (code & 0x7fu) >> MBITS;
        const uint32_t m = code & ((1u << MBITS) - 1u);
        float v;
        if ((code & 0x7fu) > MAX_CODE) {
            // e4m3: only 0x7f is left above 448 and it is NaN. e5m2: 0x7c is inf, above it NaN.
            if (MBITS == 2 && (code & 0x7fu) == 0x7cu) {
                v = std::numeric_limits<float>::infinity();
            } else {
                v = std::numeric_limits<float>::quiet_NaN();
            }
        } else if (e == 0) {
            v = std::ldexp(static_cast<float>(m),
                           1 - BIAS - MBITS);  // subnormal: m * 2^(1-bias-mbits)
        } else {
            v = std::ldexp(static_cast<float>((1u << MBITS) | m),
                           static_cast<int>(e) - BIAS - MBITS);
        }
        return neg ? -v : v;
    }

    static uint8_t encode(float x) {
        const uint32_t u = std::bit_cast<uint32_t>(x);
        const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
        uint32_t a = u & 0x7fffffffu;
        if (a > 0x7f800000u)
            return static_cast<uint8_t>(sign | (MBITS == 3 ? 0x7fu : 0x7eu));  // NaN
        const float max_finite = decode(MAX_CODE);
        const float af = std::bit_cast<float>(a);
        if (af >= max_finite) return static_cast<uint8_t>(sign | MAX_CODE);  // saturate (incl. inf)
        const float min_normal = std::ldexp(1.0f, 1 - BIAS);
        if (af < min_normal) {
            // Subnormal range: count steps of 2^(1-bias-mbits), rounding to nearest even via the
            // FPU (the magic constant forces rounding at the integer position; exact for af < 2^23
            // steps).
            const float steps = af * std::ldexp(1.0f, BIAS - 1 + MBITS);
            volatile float t = steps + 8388608.0f;  // volatile: keep the rounding step
            const float r = t - 8388608.0f;
            return static_cast<uint8_t>(
                sign | static_cast<uint32_t>(r));  // r == 2^MBITS is the min normal code
        }
        constexpr int shift = 23 - MBITS;
        a += (1u << (shift - 1)) - 1u + ((a >> shift) & 1u);  // RNE on the f32 bit pattern
        const int e = static_cast<int>(a >> 23) - 127 + BIAS;
        uint32_t code = (static_cast<uint32_t>(e) << MBITS) | ((a >> shift) & ((1u << MBITS) - 1u));
        if (code > MAX_CODE) code = MAX_CODE;  // cannot happen for af < max, kept as a guard
        return static_cast<uint8_t>(sign | code);
    }
};

using E4M3 = Fp8Format<3, 7, 0x7e>;
using E5M2 = Fp8Format<2, 15, 0x7b>;

struct Tables {
    float e4m3[256];
    float e5m2[256];
    Tables() {
        for (int i = 0; i < 256; ++i) {
            e4m3[i] = E4M3::decode(static_cast<uint8_t>(i));
            e5m2[i] = E5M2::decode(static_cast<uint8_t>(i));
        }
    }
};

const Tables& tables() {
    static const Tables t;
    return t;
}

}  // namespace

float fp8_e4m3_to_f32(uint8_t code) {
    return tables().e4m3[code];
}
float fp8_e5m2_to_f32(uint8_t code) {
    return tables().e5m2[code];
}
uint8_t f32_to_fp8_e4m3(float x) {
    return E4M3::encode(x);
}
uint8_t f32_to_fp8_e5m2(float x) {
    return E5M2::encode(x);
}
const float* fp8_e4m3_table() {
    return tables().e4m3;
}
const float* fp8_e5m2_table() {
    return tables().e5m2;
}

}  // namespace warden::tensor
