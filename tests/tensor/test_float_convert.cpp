// tensor/float_convert.h against independent references: the F16C instructions for f16 (when
// the CPU has them) and a value-based rounding formula in double precision for bf16.
//
// NaN: both directions preserve NaN-ness and sign. Bits of NaN payloads are compared where
// the scalar code promises them (f16 -> f32 keeps the payload; it does not set the quiet bit
// of a signalling NaN as VCVTPH2PS does; f32 -> f16 returns the canonical quiet NaN 0x7e00
// where VCVTPS2PH keeps the top payload bits).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include "tensor/float_convert.h"

namespace warden::tensor {
namespace {

#if defined(__x86_64__)
bool cpu_has_f16c() {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
    const bool f16c = (c >> 29) & 1, osxsave = (c >> 27) & 1, avx = (c >> 28) & 1;
    if (!f16c || !osxsave || !avx) return false;
    uint32_t lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (lo & 6u) == 6u;  // XMM and YMM state enabled by the OS
}

__attribute__((target("f16c"))) float hw_f16_to_f32(uint16_t h) {
    return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}

__attribute__((target("f16c"))) uint16_t hw_f32_to_f16(float f) {
    return static_cast<uint16_t>(
        _mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(f), _MM_FROUND_TO_NEAREST_INT), 0));
}
#else
bool cpu_has_f16c() {
    return false;
}
float hw_f16_to_f32(uint16_t) {
    return 0;
}
uint16_t hw_f32_to_f16(float) {
    return 0;
}
#endif

bool f16_is_nan(uint16_t h) {
    return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0;
}

#define REQUIRE_F16C()                                         \
    do {                                                       \
        if (!cpu_has_f16c()) GTEST_SKIP() << "CPU lacks F16C"; \
    } while (0)

TEST(FloatConvert, F16ToF32ExhaustiveAgainstF16C) {
    REQUIRE_F16C();
    for (uint32_t code = 0; code < 65536; ++code) {
        const auto h = static_cast<uint16_t>(code);
        const uint32_t got = std::bit_cast<uint32_t>(f16_to_f32(h));
        const uint32_t want = std::bit_cast<uint32_t>(hw_f16_to_f32(h));
        if (f16_is_nan(h)) {
            // Same sign and payload; the hardware also sets the quiet bit.
            ASSERT_TRUE(std::isnan(std::bit_cast<float>(got))) << std::hex << code;
            ASSERT_EQ(got | 0x00400000u, want) << std::hex << code;
        } else {
            ASSERT_EQ(got, want) << "f16 0x" << std::hex << code;
        }
    }
}

void expect_f32_to_f16(float f) {
    const uint16_t got = f32_to_f16(f);
    const uint16_t want = hw_f32_to_f16(f);
    if (std::isnan(f)) {
        ASSERT_TRUE(f16_is_nan(got)) << std::hex << std::bit_cast<uint32_t>(f);
        ASSERT_EQ(got & 0x8000u, want & 0x8000u);
        ASSERT_EQ(got & 0x7fffu, 0x7e00u);
    } else {
        ASSERT_EQ(got, want) << "f32 0x" << std::hex << std::bit_cast<uint32_t>(f) << " (" << f
                             << ")";
    }
}

TEST(FloatConvert, F32ToF16RoundTripsEveryF16) {
    // Every f16 value converts to f32 and back to itself (NaNs to the canonical quiet NaN).
    for (uint32_t code = 0; code < 65536; ++code) {
        const auto h = static_cast<uint16_t>(code);
        const uint16_t back = f32_to_f16(f16_to_f32(h));
        if (f16_is_nan(h)) {
            ASSERT_EQ(back, (h & 0x8000u) | 0x7e00u) << std::hex << code;
        } else {
            ASSERT_EQ(back, h) << std::hex << code;
        }
    }
}

TEST(FloatConvert, F32ToF16TiesAndNeighboursAgainstF16C) {
    REQUIRE_F16C();
    // For every pair of adjacent f16 values (including max -> inf and the subnormals), the exact
    // midpoint (a tie) and the floats one ulp either side of it.
    for (uint32_t code = 0; code < 0x7c00; ++code) {
        for (uint32_t sign : {0u, 0x8000u}) {
            const double lo = f16_to_f32(static_cast<uint16_t>(code | sign));
            const double hi = code + 1 == 0x7c00
                                  ? (sign ? -65536.0 : 65536.0)
                                  : f16_to_f32(static_cast<uint16_t>((code + 1) | sign));
            const auto mid = static_cast<float>((lo + hi) / 2);  // exact: f16 has 11 bits
            ASSERT_EQ(static_cast<double>(mid), (lo + hi) / 2);
            expect_f32_to_f16(mid);
            expect_f32_to_f16(std::nextafter(mid, 0.0f));
            expect_f32_to_f16(std::nextafter(mid, mid * 2));
            expect_f32_to_f16(static_cast<float>(lo));
        }
    }
}

TEST(FloatConvert, F32ToF16EdgeValuesAgainstF16C) {
    REQUIRE_F16C();
    const float inf = std::numeric_limits<float>::infinity();
    const float edges[] = {0.0f,
                           -0.0f,
                           inf,
                           -inf,
                           std::numeric_limits<float>::quiet_NaN(),
                           std::numeric_limits<float>::signaling_NaN(),
                           std::bit_cast<float>(0x7f800001u),
                           std::bit_cast<float>(0xffffffffu),
                           std::bit_cast<float>(0x7fc02000u),
                           std::numeric_limits<float>::max(),
                           std::numeric_limits<float>::min(),
                           std::numeric_limits<float>::denorm_min(),
                           -std::numeric_limits<float>::denorm_min(),
                           65504.0f,
                           65519.99f,
                           65520.0f,
                           -65520.0f,
                           65536.0f,
                           1e10f,
                           5.9604644775390625e-8f,
                           2.98023223876953125e-8f,
                           2.9802326e-8f,
                           2.980232e-8f,
                           6.103515625e-5f,
                           6.1035156e-5f,
                           6.09755516e-5f,
                           1.0f,
                           -1.0f,
                           0.1f,
                           3.14159265f,
                           1.00048828125f,
                           1.00146484375f};
    for (float f : edges) expect_f32_to_f16(f);
}

TEST(FloatConvert, F32ToF16RandomAgainstF16C) {
    REQUIRE_F16C();
    std::mt19937_64 rng(42);
    // Uniform bit patterns (every class, including NaN payloads)...
    for (int i = 0; i < 1'000'000; ++i)
        expect_f32_to_f16(std::bit_cast<float>(static_cast<uint32_t>(rng())));
    // ...and exponents around the f16 range, where all the rounding happens.
    for (int i = 0; i < 2'000'000; ++i) {
        const auto r = rng();
        const uint32_t exp = 95 + static_cast<uint32_t>(r % 50);  // 2^-32 .. 2^17
        const uint32_t bits = (static_cast<uint32_t>(r >> 8) & 0x807fffffu) | (exp << 23);
        expect_f32_to_f16(std::bit_cast<float>(bits));
    }
}

// ---- bf16 against value-based definitions --------------------------------------------------

// Value of a bf16 code in double; exponent 255 with zero mantissa is +-2^128 (the value an
// unbounded exponent range would give), which is what round-to-nearest compares against.
double bf16_value(uint16_t h) {
    const int sign = h >> 15, exp = (h >> 7) & 0xff, man = h & 0x7f;
    double v;
    if (exp == 0)
        v = std::ldexp(man / 128.0, -126);
    else
        v = std::ldexp(1.0 + man / 128.0, exp - 127);
    return sign ? -v : v;
}

TEST(FloatConvert, Bf16ToF32Exhaustive) {
    for (uint32_t code = 0; code < 65536; ++code) {
        const auto h = static_cast<uint16_t>(code);
        const float got = bf16_to_f32(h);
        const int exp = (code >> 7) & 0xff;
        if (exp == 0xff) {
            if (code & 0x7f) {
                ASSERT_TRUE(std::isnan(got)) << std::hex << code;
                ASSERT_EQ(std::bit_cast<uint32_t>(got), code << 16);
            } else {
                ASSERT_EQ(got, (code & 0x8000) ? -INFINITY : INFINITY);
            }
        } else {
            ASSERT_EQ(static_cast<double>(got), bf16_value(h)) << std::hex << code;
            ASSERT_EQ(std::signbit(got), (code & 0x8000) != 0);
        }
    }
}

// Round to nearest, ties to even, by comparing distances to the two neighbouring bf16 values.
uint16_t reference_f32_to_bf16(float f) {
    const uint32_t u = std::bit_cast<uint32_t>(f);
    if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x40u);
    if (std::isinf(f)) return static_cast<uint16_t>(u >> 16);
    const auto lo = static_cast<uint16_t>(u >> 16);  // truncation: towards zero
    if ((u & 0xffffu) == 0) return lo;
    const auto hi = static_cast<uint16_t>(lo + 1);  // next away from zero (may be inf)
    const double x = std::fabs(static_cast<double>(f));
    const double dlo = x - std::fabs(bf16_value(lo)), dhi = std::fabs(bf16_value(hi)) - x;
    if (dlo < dhi) return lo;
    if (dhi < dlo) return hi;
    return (lo & 1) ? hi : lo;
}

TEST(FloatConvert, F32ToBf16AgainstReference) {
    auto check = [](float f) {
        ASSERT_EQ(f32_to_bf16(f), reference_f32_to_bf16(f))
            << "f32 0x" << std::hex << std::bit_cast<uint32_t>(f);
    };
    // Every bf16 value, the midpoints to its successor and their neighbours.
    for (uint32_t code = 0; code < 65536; ++code) {
        if (((code >> 7) & 0xff) == 0xff) continue;
        const uint32_t base = code << 16;
        for (uint32_t low : {0u, 1u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu})
            check(std::bit_cast<float>(base | low));
    }
    const float specials[] = {INFINITY,
                              -INFINITY,
                              std::numeric_limits<float>::quiet_NaN(),
                              std::bit_cast<float>(0x7f800001u),
                              std::bit_cast<float>(0xff812345u),
                              std::numeric_limits<float>::max(),
                              -std::numeric_limits<float>::max()};
    for (float f : specials) check(f);
    std::mt19937 rng(7);
    for (int i = 0; i < 1'000'000; ++i) check(std::bit_cast<float>(static_cast<uint32_t>(rng())));
    // Round trip of every non-NaN bf16.
    for (uint32_t code = 0; code < 65536; ++code) {
        const auto h = static_cast<uint16_t>(code);
        if (((code >> 7) & 0xff) == 0xff && (code & 0x7f)) {
            ASSERT_EQ(f32_to_bf16(bf16_to_f32(h)), h | 0x40u);
        } else {
            ASSERT_EQ(f32_to_bf16(bf16_to_f32(h)), h);
        }
    }
}

}  // namespace
}  // namespace warden::tensor
