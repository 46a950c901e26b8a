#pragma once
// How the AVX-512 batch-1 (decode) kernels stream weights from memory: how many 16-row panels
// each thread reads side by side, and how far ahead each panel stream prefetches. These are
// properties of the memory system, not of the arithmetic (every choice gives the same result
// bits), and the best values differ between CPU families: on a Sapphire Rapids-class VM two
// panels and a short prefetch drew the most bandwidth; on an AMD Zen 5 VM, one panel and loads
// that do not split cache lines decoded int4 faster (measured: docs/WEIGHT_QUANT.md, Decode
// tuning per CPU). So the values are chosen per CPU vendor at start-up; WARDEN_DECODE_TUNING
// overrides them (benchmarks):
//   WARDEN_DECODE_TUNING=panels=1,q4=2048,q8=1024,fp8=1024,half=1,q4avx2=1,q4avx2pf=4096,grabdiv=1
//   (any subset)
#include <cstdint>
#include <string>

namespace warden::kernels {

struct DecodeTuning {
    int panels = 2;               // panels read side by side at batch 1: 1 or 2
    int64_t q4_prefetch = 512;    // bytes ahead in each panel stream (int4); 0 = no prefetch
    int64_t q8_prefetch = 1024;   // int8
    int64_t fp8_prefetch = 1024;  // fp8
    // Batch 1: int4/int8 codes read 32 bytes per load, not 64 (no load spans two cache lines).
    bool half_loads = false;
    // Batch 1: int4 with int8 activations (W4A8) runs the AVX2 kernel (32-byte loads, maddubs)
    // instead of the VNNI one; the results are the same bits (both are the scalar contract).
    bool q4_avx2 = false;
    // Software prefetch distance (bytes) of the AVX2 kernel when q4_avx2 hands it batch 1.
    int64_t q4_avx2_prefetch = 2048;
    // Batch 1, every ISA (it is how the pool's threads share a call, not how a kernel reads): each
    // guided grab of a matmul call's panels (kernels/matmul.cpp, matmul_grouped) takes
    // 1/(grab_div * threads) of the panels still left. 2 bounds the threads' finishing
    // spread to a few panels; 1 takes half as many grabs (fewer restarts of a thread's weight
    // stream) for a somewhat wider spread. 1..8.
    int grab_div = 2;
    const char* source = "intel";  // which table ("intel", "amd", "amd-zen4") or "env"
};

// The tuning the kernels use now (chosen once from CPUID's vendor and the environment).
const DecodeTuning& decode_tuning();
// Replaces it (tests and benchmarks; call only while no kernel runs). Returns false and changes
// nothing when a value is out of range (panels not 1 or 2, a prefetch distance that is negative,
// over 16384, or not a multiple of 64, grab_div not in 1..8).
bool set_decode_tuning(const DecodeTuning& t);
// WARDEN_DECODE_TUNING's syntax: the keys in `spec` on top of `base`, into `out` (source "env").
// False, `out` untouched, when anything is malformed or out of range.
bool parse_decode_tuning(const char* spec, const DecodeTuning& base, DecodeTuning& out);
// The table for a CPUID vendor string and display family (kernels/cpu_features.h): for
// AuthenticAMD "amd-zen4" at family 0x19 (Zen 4; Zen 3 shares the family but has no AVX-512,
// where the table does not apply) and "amd" otherwise (tuned on Zen 5); "intel" (the type's
// defaults) for every other vendor. vendor_decode_tuning() is the table of this CPU.
DecodeTuning decode_tuning_table(const char* vendor, int family);
DecodeTuning vendor_decode_tuning();
// "panels=2 q4=512 q8=1024 fp8=1024 half=0 (intel)": test traces name the tuning a failure ran
// under.
std::string decode_tuning_summary();

}  // namespace warden::kernels
