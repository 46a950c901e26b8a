// src/kernels/matmul_avx512.cpp compiled against SIMDe's portable AVX-512 intrinsics
// (kernels/avx512_compat.h), so its f32/bf16 kernels run, and are compared with the scalar ones in
// matmul_test.cpp, on CPUs without AVX-512. The same source as the library's copy; one token runs
// the several-token kernel here (the native build hands it to the AVX2 kernel, which this build
// cannot assume).
#define WARDEN_AVX512_EMULATE 1
#define WARDEN_MATMUL_AVX512_ENTRY matmul_avx512_emulated
#include "kernels/matmul_avx512.cpp"
