// src/kernels/matmul_kquant_avx512.cpp compiled against SIMDe's portable AVX-512 intrinsics
// (kernels/avx512_compat.h), so its VNNI K-quant kernels are compared with the scalar ones in
// matmul_kquant_test.cpp on CPUs without AVX-512.
#define WARDEN_AVX512_EMULATE 1
#define WARDEN_KQUANT_AVX512_ENTRY mm_kquant_avx512_emulated
#include "kernels/matmul_kquant_avx512.cpp"
