// src/kernels/paged_attention_avx512.cpp compiled against SIMDe's portable AVX-512 intrinsics
// (kernels/avx512_compat.h), so its kernels run, and are compared with the scalar ones in
// test_kv_quant.cpp, on CPUs without AVX-512. The same source as the library's copy.
#define WARDEN_AVX512_EMULATE 1
#define WARDEN_KV_AVX512_TABLE kv_kernels_avx512_emulated
#include "kernels/paged_attention_avx512.cpp"
