#pragma once
// Shared helpers for the kernel tests: deterministic random data, the list of SIMD ISAs to
// compare against the scalar reference, and an RAII guard for the process-wide active ISA.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/decode_tuning.h"
#include "tensor/float_convert.h"

namespace warden::kernels::testing {

inline std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.0f,
                                        float hi = 1.0f) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v(n);
    for (auto& f : v) f = d(rng);
    return v;
}

inline std::vector<uint16_t> random_bf16(size_t n, uint32_t seed, float lo = -1.0f,
                                         float hi = 1.0f) {
    std::vector<float> f = random_floats(n, seed, lo, hi);
    std::vector<uint16_t> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = tensor::f32_to_bf16(f[i]);
    return v;
}

// Skips the current test when the machine cannot run `isa` (e.g. AVX-512 on AMD Zen 2/3).
#define WARDEN_REQUIRE_ISA(isa)                                                  \
    do {                                                                         \
        if (!::warden::kernels::isa_supported(isa))                              \
            GTEST_SKIP() << "CPU/OS lacks " << ::warden::kernels::isa_name(isa)  \
                         << ": variant compiled but not tested on this machine"; \
    } while (0)

class ActiveIsaGuard {
  public:
    explicit ActiveIsaGuard(Isa isa) : saved_(active_isa()) { set_active_isa(isa); }
    ~ActiveIsaGuard() { set_active_isa(saved_); }
    ActiveIsaGuard(const ActiveIsaGuard&) = delete;
    ActiveIsaGuard& operator=(const ActiveIsaGuard&) = delete;

  private:
    Isa saved_;
};

// RAII: the AVX-512 decode kernels read weights as `t` says for the guard's lifetime.
class DecodeTuningGuard {
  public:
    explicit DecodeTuningGuard(const DecodeTuning& t) : saved_(decode_tuning()) {
        EXPECT_TRUE(set_decode_tuning(t));
    }
    ~DecodeTuningGuard() { set_decode_tuning(saved_); }
    DecodeTuningGuard(const DecodeTuningGuard&) = delete;
    DecodeTuningGuard& operator=(const DecodeTuningGuard&) = delete;

  private:
    DecodeTuning saved_;
};

// Every way the AVX-512 batch-1 kernels can read a panel: the vendor tables (intel: two panels,
// whole 64-byte loads, prefetch; amd: one panel, half loads, no int4 prefetch, int4 on the AVX2
// kernel; amd-zen4: one panel, whole loads, no int4 prefetch, int4 on the VNNI kernel), two
// panels with half loads and long prefetches (int4 on the AVX2 kernel without its prefetch), and
// one panel with half loads and int4 on the VNNI kernel. Results must not depend on which.
inline std::vector<DecodeTuning> decode_tunings_to_test() {
    DecodeTuning other;
    other.q4_prefetch = other.q8_prefetch = other.fp8_prefetch = 2048;
    other.half_loads = true;
    other.q4_avx2 = true;  // batch-1 W4A8 on the AVX2 kernel, whatever the vendor's table says
    other.q4_avx2_prefetch = 0;  // and without its software prefetch
    other.source = "test";
    DecodeTuning one_half = decode_tuning_table("AuthenticAMD", 0x19);
    one_half.half_loads = true;
    one_half.source = "test-half";
    return {decode_tuning_table("GenuineIntel", 6), decode_tuning_table("AuthenticAMD", 0x1a),
            decode_tuning_table("AuthenticAMD", 0x19), other, one_half};
}

inline std::string isa_param_name(const ::testing::TestParamInfo<Isa>& info) {
    return isa_name(info.param);
}

}  // namespace warden::kernels::testing
