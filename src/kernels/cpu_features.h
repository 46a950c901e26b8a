#pragma once
// Run-time choice of kernel variants. Every kernel has a scalar reference; AVX2 (+FMA, F16C)
// and AVX-512 (F/BW/VL/DQ + BF16 + VNNI) variants are compiled in separate translation units
// and picked here from CPUID, so one binary runs everywhere and uses what the machine has.
namespace warden::kernels {

enum class Isa { Scalar = 0, AVX2 = 1, AVX512 = 2 };

const char* isa_name(Isa isa);
Isa detect_isa();  // best ISA the CPU and OS support
Isa active_isa();  // what kernels use now: detect_isa() unless overridden
// Overrides the active ISA (tests, `WARDEN_ISA=scalar|avx2|avx512`). Returns false and changes
// nothing if the CPU does not support `isa`.
bool set_active_isa(Isa isa);
bool isa_supported(Isa isa);
// CPUID's 12-character vendor string ("GenuineIntel", "AuthenticAMD", ...); "" off x86.
const char* cpu_vendor();
// CPUID leaf 1's display family (base family, plus the extended family when the base is 0xF):
// 0x19 for AMD Zen 3 and Zen 4, 0x1A for Zen 5, 6 for Intel's current cores; 0 off x86.
int cpu_family();

}  // namespace warden::kernels
