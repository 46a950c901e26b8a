#pragma once
// Run-time choice of kernel variants. Every kernel has a scalar reference; AVX2 (+FMA, F16C)
// and AVX-512 (F/BW/VL/DQ + BF16 + VNNI) variants are compiled in separate translation units
// and picked here from CPUID, so one binary runs everywhere and uses what the machine has.
// AMX is AVX-512 plus Intel's tile matrix engine (AMX-TILE and AMX-INT8, with the OS's permission
// to use the tile state): the multi-token W4A8/W8A8 GEMMs run on tiles (matmul_quant_amx.cpp), and
// with AMX-BF16 the bf16 matrices that have a tile copy (matmul_bf16_amx.cpp); everything else is
// the AVX-512 code.
namespace warden::kernels {

enum class Isa { Scalar = 0, AVX2 = 1, AVX512 = 2, AMX = 3 };

const char* isa_name(Isa isa);
Isa detect_isa();  // best ISA the CPU and OS support
Isa active_isa();  // what kernels use now: detect_isa() unless overridden
// Overrides the active ISA (tests, `WARDEN_ISA=scalar|avx2|avx512|amx`). Returns false and
// changes nothing if the CPU does not support `isa`.
bool set_active_isa(Isa isa);
bool isa_supported(Isa isa);
// Why detect_isa() is or is not Isa::AMX, in words: "available ..." or the first missing piece (no
// AVX-512 level, no AMX-TILE/AMX-INT8 in CPUID, tile state not enabled in XCR0, the kernel refused
// arch_prctl(ARCH_REQ_XCOMP_PERM)). For `warden info` and the benchmarks.
const char* amx_status();
// CPUID's AMX-BF16 bit (TDPBF16PS), where Isa::AMX is supported; false otherwise.
bool amx_bf16_supported();
// CPUID's 12-character vendor string ("GenuineIntel", "AuthenticAMD", ...); "" off x86.
const char* cpu_vendor();
// CPUID leaf 1's display family (base family, plus the extended family when the base is 0xF):
// 0x19 for AMD Zen 3 and Zen 4, 0x1A for Zen 5, 6 for Intel's current cores; 0 off x86.
int cpu_family();

}  // namespace warden::kernels
