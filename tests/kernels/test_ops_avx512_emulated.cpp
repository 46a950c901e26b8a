// src/kernels/ops_avx512.cpp compiled against SIMDe's portable AVX-512 intrinsics
// (kernels/avx512_compat.h), so its kernels run, and are compared with the scalar ones in
// ops_test.cpp, on CPUs without AVX-512. The same source as the library's copy.
#define WARDEN_AVX512_EMULATE 1
#define WARDEN_OPS_AVX512_ENTRY ops_avx512_emulated
#include "kernels/ops_avx512.cpp"
