// src/kernels/matmul_quant_avx512.cpp compiled against SIMDe's portable AVX-512 intrinsics, so
// its VNNI kernels run (and are compared with the scalar kernels in matmul_quant_test.cpp) on
// CPUs without AVX-512. The same source as the library's copy; only the helpers it marks as
// WARDEN_AVX512_EMULATE differ.
#define WARDEN_AVX512_EMULATE 1
#define WARDEN_AVX512_ENTRY mm_quant_avx512_emulated
#include "kernels/matmul_quant_avx512.cpp"
