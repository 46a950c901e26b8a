#include <gtest/gtest.h>

#include "kernels/cpu_features.h"
#include "kernels_test_util.h"

namespace warden::kernels {
namespace {

TEST(KernelsCpuFeatures, DetectionIsConsistent) {
    const Isa best = detect_isa();
    EXPECT_TRUE(isa_supported(Isa::Scalar));
    EXPECT_TRUE(isa_supported(best));
    if (best == Isa::AVX512) {
        EXPECT_TRUE(isa_supported(Isa::AVX2));
    }
    EXPECT_EQ(detect_isa(), best);  // cached, stable
    std::printf("detected ISA: %s, active: %s\n", isa_name(best), isa_name(active_isa()));
}

TEST(KernelsCpuFeatures, SetActiveIsaRejectsUnsupported) {
    testing::ActiveIsaGuard guard(active_isa());
    EXPECT_TRUE(set_active_isa(Isa::Scalar));
    EXPECT_EQ(active_isa(), Isa::Scalar);
    if (!isa_supported(Isa::AVX512)) {
        EXPECT_FALSE(set_active_isa(Isa::AVX512));
        EXPECT_EQ(active_isa(), Isa::Scalar);  // unchanged
    }
    EXPECT_TRUE(set_active_isa(detect_isa()));
    EXPECT_EQ(active_isa(), detect_isa());
}

TEST(KernelsCpuFeatures, Names) {
    EXPECT_STREQ(isa_name(Isa::Scalar), "scalar");
    EXPECT_STREQ(isa_name(Isa::AVX2), "avx2");
    EXPECT_STREQ(isa_name(Isa::AVX512), "avx512");
}

}  // namespace
}  // namespace warden::kernels
