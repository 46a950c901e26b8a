#pragma once
// Shared helpers for the kernel tests: deterministic random data, the list of SIMD ISAs to
// compare against the scalar reference, and an RAII guard for the process-wide active ISA.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu_features.h"
#include "tensor/float_convert.h"

namespace warden::kernels::testing {

inline std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v(n);
    for (auto& f : v) f = d(rng);
    return v;
}

inline std::vector<uint16_t> random_bf16(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
    std::vector<float> f = random_floats(n, seed, lo, hi);
    std::vector<uint16_t> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = tensor::f32_to_bf16(f[i]);
    return v;
}

// Skips the current test when the machine cannot run `isa` (e.g. AVX-512 on AMD Zen 2/3).
#define WARDEN_REQUIRE_ISA(isa)                                                              \
    do {                                                                                     \
        if (!::warden::kernels::isa_supported(isa))                                          \
            GTEST_SKIP() << "CPU/OS lacks " << ::warden::kernels::isa_name(isa)              \
                         << ": variant compiled but not tested on this machine";             \
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

inline std::string isa_param_name(const ::testing::TestParamInfo<Isa>& info) {
    return isa_name(info.param);
}

}  // namespace warden::kernels::testing
