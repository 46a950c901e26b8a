// src/kernels/matmul_quant_amx.cpp compiled against SIMDe's portable AVX-512 intrinsics and the
// software tile model (kernels/amx_tile.h), so the AMX kernels run (and are compared with the
// scalar kernels in test_matmul_quant_amx.cpp) on CPUs without AMX or AVX-512. The same source as
// the library's copy; only the tile backend and the helpers marked WARDEN_AVX512_EMULATE differ.
#define WARDEN_AVX512_EMULATE 1
#define WARDEN_AMX_EMULATE 1
#include "kernels/matmul_quant_amx.cpp"
