// fp8 conversions against ml_dtypes: the golden file (scripts/make_fp8_golden.py) holds the
// decode of all 256 codes of e4m3 and e5m2 and ~9.7k encode cases (every representable value,
// every midpoint (ties to even) and its f32 neighbours, subnormals and flush to zero,
// saturation, +-inf, NaN, +-0, random values over 2^-24..2^20).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <fstream>
#include <sstream>

#include "tensor/fp8.h"
#include "test_paths.h"

using namespace warden;

namespace {

uint32_t bits(float f) {
    return std::bit_cast<uint32_t>(f);
}

TEST(Fp8, GoldenAgainstMlDtypes) {
    std::ifstream in(test::source_dir() + "/tests/golden/fp8/fp8_golden.txt");
    ASSERT_TRUE(in) << "missing tests/golden/fp8/fp8_golden.txt (scripts/make_fp8_golden.py)";
    std::string line;
    int decodes = 0, encodes = 0, nan_inputs = 0, saturated = 0, ties = 0;
    while (std::getline(in, line)) {
        if (line.empty() || line[0] == '#') continue;
        std::istringstream ls(line);
        std::string kind;
        ls >> kind;
        if (kind == "D") {
            unsigned code, b4, b5;
            ls >> std::hex >> code >> b4 >> b5;
            const float w4 = std::bit_cast<float>(static_cast<uint32_t>(b4));
            const float w5 = std::bit_cast<float>(static_cast<uint32_t>(b5));
            const float g4 = tensor::fp8_e4m3_to_f32(static_cast<uint8_t>(code));
            const float g5 = tensor::fp8_e5m2_to_f32(static_cast<uint8_t>(code));
            if (std::isnan(w4))
                EXPECT_TRUE(std::isnan(g4)) << "e4m3 code " << code;
            else
                EXPECT_EQ(bits(g4), bits(w4)) << "e4m3 code " << code;  // bits: -0 vs +0 matters
            if (std::isnan(w5))
                EXPECT_TRUE(std::isnan(g5)) << "e5m2 code " << code;
            else
                EXPECT_EQ(bits(g5), bits(w5)) << "e5m2 code " << code;
            EXPECT_EQ(bits(tensor::fp8_e4m3_table()[code]), bits(g4));
            EXPECT_EQ(bits(tensor::fp8_e5m2_table()[code]), bits(g5));
            ++decodes;
        } else if (kind == "E") {
            unsigned xb, c4, c5;
            ls >> std::hex >> xb >> c4 >> c5;
            const float x = std::bit_cast<float>(static_cast<uint32_t>(xb));
            EXPECT_EQ(tensor::f32_to_fp8_e4m3(x), c4)
                << "e4m3 encode of " << x << " (bits " << std::hex << xb << ")";
            EXPECT_EQ(tensor::f32_to_fp8_e5m2(x), c5)
                << "e5m2 encode of " << x << " (bits " << std::hex << xb << ")";
            nan_inputs += std::isnan(x);
            saturated += std::fabs(x) > 448.0f && !std::isnan(x);
            ties += std::fabs(x) == 1.0625f || std::fabs(x) == 0.0009765625f;
            ++encodes;
        }
    }
    EXPECT_EQ(decodes, 256);
    EXPECT_GT(encodes, 9000);
    EXPECT_GE(nan_inputs, 4);
    EXPECT_GT(saturated, 100);
    EXPECT_GE(ties, 2);
}

// Independent of the golden file: a few hand-checked edges.
TEST(Fp8, HandPickedEdges) {
    EXPECT_EQ(tensor::f32_to_fp8_e4m3(1.0625f), 0x38);  // tie between 1 and 1.125 -> even (1)
    EXPECT_EQ(tensor::f32_to_fp8_e4m3(1.1875f), 0x3a);  // tie between 1.125 and 1.25 -> even (1.25)
    EXPECT_EQ(tensor::f32_to_fp8_e4m3(0.0009765625f), 0x00);  // half the smallest subnormal -> 0
    EXPECT_EQ(tensor::f32_to_fp8_e4m3(0.0029296875f), 0x02);  // 1.5 subnormal steps -> 2 (even)
    EXPECT_EQ(tensor::f32_to_fp8_e4m3(-0.0f), 0x80);
    EXPECT_EQ(tensor::f32_to_fp8_e4m3(1e30f), 0x7e);  // saturates at 448
    EXPECT_EQ(tensor::f32_to_fp8_e4m3(-INFINITY), 0xfe);
    EXPECT_EQ(tensor::f32_to_fp8_e4m3(NAN), 0x7f);
    EXPECT_EQ(tensor::f32_to_fp8_e5m2(INFINITY), 0x7b);  // saturates at 57344
    EXPECT_EQ(tensor::f32_to_fp8_e5m2(NAN), 0x7e);
    EXPECT_TRUE(std::isinf(tensor::fp8_e5m2_to_f32(0x7c)));
    EXPECT_TRUE(std::isnan(tensor::fp8_e4m3_to_f32(0xff)));
    EXPECT_EQ(tensor::fp8_e4m3_to_f32(0x01), 0.001953125f);        // 2^-9
    EXPECT_EQ(tensor::fp8_e5m2_to_f32(0x01), 1.52587890625e-05f);  // 2^-16
}

}  // namespace
