#include <gtest/gtest.h>

#include <string>

#include "kernels/cpu_features.h"
#include "kernels_test_util.h"

namespace warden::kernels {
namespace {

TEST(KernelsCpuFeatures, DetectionIsConsistent) {
    const Isa best = detect_isa();
    EXPECT_TRUE(isa_supported(Isa::Scalar));
    EXPECT_TRUE(isa_supported(best));
    if (best == Isa::AVX512 || best == Isa::AMX) {
        EXPECT_TRUE(isa_supported(Isa::AVX2));
        EXPECT_TRUE(isa_supported(Isa::AVX512));  // WARDEN_ISA=avx512: the same build, no tiles
    }
    // AMX is supported exactly when detection said so, and the reason is spelled out either way.
    EXPECT_EQ(isa_supported(Isa::AMX), best == Isa::AMX);
    EXPECT_EQ(std::string(amx_status()).rfind("available", 0) == 0, best == Isa::AMX)
        << amx_status();
    if (!isa_supported(Isa::AMX)) {
        EXPECT_FALSE(amx_bf16_supported());
    }
    EXPECT_EQ(detect_isa(), best);  // cached, stable
    std::printf("detected ISA: %s, active: %s, AMX: %s\n", isa_name(best), isa_name(active_isa()),
                amx_status());
}

TEST(KernelsCpuFeatures, SetActiveIsaRejectsUnsupported) {
    testing::ActiveIsaGuard guard(active_isa());
    EXPECT_TRUE(set_active_isa(Isa::Scalar));
    EXPECT_EQ(active_isa(), Isa::Scalar);
    if (!isa_supported(Isa::AVX512)) {
        EXPECT_FALSE(set_active_isa(Isa::AVX512));
        EXPECT_EQ(active_isa(), Isa::Scalar);  // unchanged
    }
    if (!isa_supported(Isa::AMX)) {
        EXPECT_FALSE(set_active_isa(Isa::AMX));
        EXPECT_EQ(active_isa(), Isa::Scalar);
    }
    EXPECT_TRUE(set_active_isa(detect_isa()));
    EXPECT_EQ(active_isa(), detect_isa());
}

TEST(KernelsCpuFeatures, Names) {
    EXPECT_STREQ(isa_name(Isa::Scalar), "scalar");
    EXPECT_STREQ(isa_name(Isa::AVX2), "avx2");
    EXPECT_STREQ(isa_name(Isa::AVX512), "avx512");
    EXPECT_STREQ(isa_name(Isa::AMX), "amx");
}

}  // namespace
}  // namespace warden::kernels
