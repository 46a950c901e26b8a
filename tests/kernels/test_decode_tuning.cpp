// WARDEN_DECODE_TUNING's parser and the range checks of set_decode_tuning
// (kernels/decode_tuning.h). That the kernels give the same bits under every tuning is tested with
// them (tests/kernels/test_matmul_quant.cpp).
#include <gtest/gtest.h>

#include <cstring>

#include "kernels/cpu_features.h"
#include "kernels/decode_tuning.h"
#include "kernels/kernels_test_util.h"

namespace warden::kernels {
namespace {

TEST(DecodeTuning, ParsesAnySubsetOfKeysOnTopOfTheBase) {
    DecodeTuning base;  // panels=2 q4=512 q8=1024 fp8=1024 half=0
    DecodeTuning out;
    ASSERT_TRUE(parse_decode_tuning("panels=1,q4=2048", base, out));
    EXPECT_EQ(out.panels, 1);
    EXPECT_EQ(out.q4_prefetch, 2048);
    EXPECT_EQ(out.q8_prefetch, 1024);
    EXPECT_EQ(out.fp8_prefetch, 1024);
    EXPECT_FALSE(out.half_loads);
    EXPECT_STREQ(out.source, "env");
    EXPECT_FALSE(out.q4_avx2);
    ASSERT_TRUE(parse_decode_tuning("half=1,q8=0,fp8=64,q4avx2=1,q4avx2pf=4096", base, out));
    EXPECT_EQ(out.q4_avx2_prefetch, 4096);
    EXPECT_EQ(out.panels, 2);
    EXPECT_TRUE(out.half_loads);
    EXPECT_TRUE(out.q4_avx2);
    EXPECT_EQ(out.q8_prefetch, 0);
    EXPECT_EQ(out.fp8_prefetch, 64);
    EXPECT_EQ(out.grab_div, 2);
    ASSERT_TRUE(parse_decode_tuning("grabdiv=1", base, out));
    EXPECT_EQ(out.grab_div, 1);
    ASSERT_TRUE(parse_decode_tuning("grabdiv=8,panels=1", base, out));
    EXPECT_EQ(out.grab_div, 8);
    EXPECT_EQ(out.panels, 1);
}

TEST(DecodeTuning, RejectsMalformedOrOutOfRangeAndLeavesOutAlone) {
    const DecodeTuning base;
    for (const char* bad : {"",
                            "panels",
                            "panels=",
                            "panels=3",
                            "panels=0",
                            "q4=100",
                            "q4=-64",
                            "q4=16448",
                            "q4=99999999999999999999",
                            "half=2",
                            "q4=64x",
                            "depth=64",
                            "q4=64,",
                            ",q4=64",
                            "panels=1;q4=64",
                            "q4avx2=2",
                            "q4avx2",
                            "q4avx2pf=100",
                            "q4avx2pf=-64",
                            "q4avx2pf=16448"}) {
        DecodeTuning out;
        out.q4_prefetch = 4096;  // a value no bad spec may overwrite
        EXPECT_FALSE(parse_decode_tuning(bad, base, out)) << bad;
        EXPECT_EQ(out.q4_prefetch, 4096) << bad;
    }
    for (const char* bad : {"grabdiv=0", "grabdiv=9", "grabdiv=-1", "grabdiv=1.5", "grabdiv"}) {
        DecodeTuning out;
        out.grab_div = 5;  // a value no bad spec may overwrite
        EXPECT_FALSE(parse_decode_tuning(bad, base, out)) << bad;
        EXPECT_EQ(out.grab_div, 5) << bad;
    }
}

TEST(DecodeTuning, SetRejectsOutOfRangeValues) {
    const DecodeTuning before = decode_tuning();
    DecodeTuning t = before;
    t.q4_prefetch = before.q4_prefetch == 4096 ? 8192 : 4096;  // differs from what is active
    t.panels = 4;
    EXPECT_FALSE(set_decode_tuning(t));
    t.panels = 1;
    t.fp8_prefetch = 96;  // not a whole cache line
    EXPECT_FALSE(set_decode_tuning(t));
    t.fp8_prefetch = 64;
    t.grab_div = 0;  // no grab could be sized
    EXPECT_FALSE(set_decode_tuning(t));
    EXPECT_EQ(decode_tuning().panels, before.panels);
    EXPECT_EQ(decode_tuning().q4_prefetch, before.q4_prefetch);
    EXPECT_EQ(decode_tuning().fp8_prefetch, before.fp8_prefetch);
}

TEST(DecodeTuning, VendorTableFollowsCpuid) {
    // Zen 5 (family 0x1A) and any AMD family but 0x19: batch-1 int4 on the AVX2 kernel, grabs of
    // half the panels left.
    for (const int family : {0x1a, 0x17, 0}) {
        const DecodeTuning amd = decode_tuning_table("AuthenticAMD", family);
        EXPECT_STREQ(amd.source, "amd") << family;
        EXPECT_EQ(amd.panels, 1);
        EXPECT_EQ(amd.q4_prefetch, 0);
        EXPECT_TRUE(amd.half_loads);
        EXPECT_TRUE(amd.q4_avx2);
        EXPECT_EQ(amd.q4_avx2_prefetch, 4096);
        EXPECT_EQ(amd.grab_div, 1);
    }
    // Zen 4 (0x19): one panel and no int4 prefetch as well, but whole loads, batch-1 int4 on the
    // VNNI kernel and the default grabs (not measured there).
    const DecodeTuning zen4 = decode_tuning_table("AuthenticAMD", 0x19);
    EXPECT_STREQ(zen4.source, "amd-zen4");
    EXPECT_EQ(zen4.panels, 1);
    EXPECT_EQ(zen4.q4_prefetch, 0);
    EXPECT_FALSE(zen4.half_loads);
    EXPECT_FALSE(zen4.q4_avx2);
    EXPECT_EQ(zen4.grab_div, 2);
    for (const char* other : {"GenuineIntel", "HygonGenuine", ""})
        for (const int family : {6, 0x19, 0x1a}) {
            const DecodeTuning t = decode_tuning_table(other, family);
            EXPECT_STREQ(t.source, "intel") << other;
            EXPECT_EQ(t.panels, 2) << other;
            EXPECT_FALSE(t.half_loads) << other;
            EXPECT_FALSE(t.q4_avx2) << other;
            EXPECT_EQ(t.q4_avx2_prefetch, 2048) << other;
            EXPECT_EQ(t.grab_div, 2) << other;
        }
    EXPECT_STREQ(vendor_decode_tuning().source,
                 decode_tuning_table(cpu_vendor(), cpu_family()).source);
}

TEST(CpuFeatures, FamilyIsCpuidsDisplayFamily) {
    // Off x86 there is no CPUID (0); on x86 every CPU since the Pentium Pro reports 6 or more.
    if (cpu_vendor()[0] == '\0') {
        EXPECT_EQ(cpu_family(), 0);
        return;
    }
    EXPECT_GE(cpu_family(), 6);
    if (std::strcmp(cpu_vendor(), "AuthenticAMD") == 0) {
        EXPECT_GE(cpu_family(), 0xf);  // K8 onwards
    }
}

}  // namespace
}  // namespace warden::kernels
