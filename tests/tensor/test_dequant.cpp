// tensor::dequantize_row against golden values from an independent implementation: the `gguf`
// PyPI package's numpy dequantizers (scripts/make_dequant_golden.py, tests/golden/dequant/).
//
// The comparison is bit-exact. numpy evaluates every formula in float32 with IEEE
// round-to-nearest-even, one operation at a time, in the same order as ggml's scalar code
// (e.g. Q4_K: (d * sc) * q - (dmin * m); Q6_K: (d * sc) * q), and our build never contracts
// a*b+c into an FMA in these files (no -mfma for non-ISA files, -ffp-contract=off under
// -std=c++20 in GCC). So no ulp slack is needed; if a future change reorders the arithmetic
// this test will say exactly which element differs.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tensor/ggml_types.h"
#include "util/error.h"

namespace warden::tensor {
namespace {

std::vector<uint8_t> read_all(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) return {};
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(f),
                                std::istreambuf_iterator<char>());
}

std::string golden(const std::string& name) {
    return std::string(WARDEN_SOURCE_DIR) + "/tests/golden/dequant/" + name;
}

struct Case {
    const char* name;
    GgmlType type;
};

const Case kCases[] = {
    {"F16", GgmlType::F16},   {"BF16", GgmlType::BF16}, {"Q4_0", GgmlType::Q4_0},
    {"Q4_1", GgmlType::Q4_1}, {"Q5_0", GgmlType::Q5_0}, {"Q5_1", GgmlType::Q5_1},
    {"Q8_0", GgmlType::Q8_0}, {"Q4_K", GgmlType::Q4_K}, {"Q5_K", GgmlType::Q5_K},
    {"Q6_K", GgmlType::Q6_K},
};

class DequantGolden : public ::testing::TestWithParam<Case> {};

TEST_P(DequantGolden, MatchesGgufPythonBitExactly) {
    const Case& c = GetParam();
    const auto raw = read_all(golden(std::string(c.name) + ".bin"));
    const auto ref_bytes = read_all(golden(std::string(c.name) + ".f32"));
    ASSERT_FALSE(raw.empty()) << "missing " << golden(std::string(c.name) + ".bin");
    ASSERT_EQ(ref_bytes.size() % 4, 0u);
    const auto& info = ggml_type_info(c.type);
    ASSERT_EQ(raw.size() % static_cast<size_t>(info.block_bytes), 0u);
    const int64_t n_blocks = static_cast<int64_t>(raw.size()) / info.block_bytes;
    const int64_t n = n_blocks * info.block_elems;
    ASSERT_EQ(static_cast<size_t>(n) * 4, ref_bytes.size());
    std::vector<float> ref(static_cast<size_t>(n));
    std::memcpy(ref.data(), ref_bytes.data(), ref_bytes.size());
    ASSERT_EQ(ggml_row_bytes(c.type, n), static_cast<int64_t>(raw.size()));

    // Whole buffer as one row.
    std::vector<float> out(static_cast<size_t>(n), -12345.0f);
    dequantize_row(c.type, raw.data(), out.data(), n);
    int mismatches = 0;
    for (int64_t i = 0; i < n && mismatches < 10; ++i) {
        const uint32_t got = std::bit_cast<uint32_t>(out[i]);
        const uint32_t want = std::bit_cast<uint32_t>(ref[i]);
        if (got != want) {
            ++mismatches;
            ADD_FAILURE() << c.name << " element " << i << " (block " << i / info.block_elems
                          << "): got " << out[i] << " (0x" << std::hex << got << "), want "
                          << ref[i] << " (0x" << want << ")" << std::dec;
        }
    }
    EXPECT_EQ(mismatches, 0);

    // Block by block from an unaligned copy: same result (no alignment assumptions).
    std::vector<uint8_t> shifted(raw.size() + 1);
    std::memcpy(shifted.data() + 1, raw.data(), raw.size());
    std::vector<float> one(static_cast<size_t>(info.block_elems));
    for (int64_t b = 0; b < n_blocks; ++b) {
        dequantize_row(c.type, shifted.data() + 1 + b * info.block_bytes, one.data(),
                       info.block_elems);
        ASSERT_EQ(0, std::memcmp(one.data(), out.data() + b * info.block_elems, one.size() * 4))
            << c.name << " block " << b;
    }
}

INSTANTIATE_TEST_SUITE_P(Dequant, DequantGolden, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& p) {
                             return std::string(p.param.name);
                         });

TEST(Dequant, F32IsACopy) {
    const float in[5] = {1.5f, -0.0f, 3e-40f, INFINITY, -7.25f};
    float out[5] = {};
    dequantize_row(GgmlType::F32, in, out, 5);
    EXPECT_EQ(0, std::memcmp(in, out, sizeof in));
}

TEST(Dequant, RejectsPartialBlocksAndUnsupportedTypes) {
    std::vector<uint8_t> buf(1024);
    std::vector<float> out(512);
    EXPECT_THROW(dequantize_row(GgmlType::Q4_0, buf.data(), out.data(), 33), util::Error);
    EXPECT_THROW(dequantize_row(GgmlType::Q4_K, buf.data(), out.data(), 32), util::Error);
    EXPECT_THROW(dequantize_row(GgmlType::Q2_K, buf.data(), out.data(), 128), util::Error);
    // Known but not readable: IQ2_XXS (raw id 16) is refused by name.
    EXPECT_THROW(dequantize_row(static_cast<GgmlType>(16), buf.data(), out.data(), 256),
                 util::Error);
    EXPECT_THROW(dequantize_row(GgmlType::Q8_1, buf.data(), out.data(), 32), util::Error);
    EXPECT_THROW(dequantize_row(static_cast<GgmlType>(99), buf.data(), out.data(), 32),
                 util::Error);
}

TEST(Dequant, TypeTable) {
    // Block geometry from ggml-common.h.
    struct G {
        uint32_t id;
        const char* name;
        int64_t elems, bytes;
    };
    const G table[] = {{0, "F32", 1, 4},         {1, "F16", 1, 2},         {2, "Q4_0", 32, 18},
                       {3, "Q4_1", 32, 20},      {6, "Q5_0", 32, 22},      {7, "Q5_1", 32, 24},
                       {8, "Q8_0", 32, 34},      {9, "Q8_1", 32, 36},      {10, "Q2_K", 256, 84},
                       {11, "Q3_K", 256, 110},   {12, "Q4_K", 256, 144},   {13, "Q5_K", 256, 176},
                       {14, "Q6_K", 256, 210},   {15, "Q8_K", 256, 292},   {16, "IQ2_XXS", 256, 66},
                       {17, "IQ2_XS", 256, 74},  {18, "IQ3_XXS", 256, 98}, {19, "IQ1_S", 256, 50},
                       {20, "IQ4_NL", 32, 18},   {21, "IQ3_S", 256, 110},  {22, "IQ2_S", 256, 82},
                       {23, "IQ4_XS", 256, 136}, {29, "IQ1_M", 256, 56},   {30, "BF16", 1, 2},
                       {34, "TQ1_0", 256, 54},   {35, "TQ2_0", 256, 66}};
    for (const auto& g : table) {
        const GgmlTypeInfo* info = ggml_type_info(g.id);
        ASSERT_NE(info, nullptr) << g.name;
        EXPECT_STREQ(info->name, g.name);
        EXPECT_EQ(info->block_elems, g.elems) << g.name;
        EXPECT_EQ(info->block_bytes, g.bytes) << g.name;
        EXPECT_EQ(ggml_type_name(static_cast<GgmlType>(g.id)), g.name);
    }
    for (uint32_t id : {4u, 5u, 24u, 31u, 1000u, 0xffffffffu})
        EXPECT_EQ(ggml_type_info(id), nullptr) << id;
    EXPECT_EQ(ggml_type_name(static_cast<GgmlType>(4)), "type#4");
    EXPECT_THROW(ggml_type_info(static_cast<GgmlType>(4)), util::Error);
    EXPECT_EQ(ggml_row_bytes(GgmlType::Q4_K, 512), 288);
}

}  // namespace
}  // namespace warden::tensor
