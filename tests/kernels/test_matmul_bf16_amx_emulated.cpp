// src/kernels/matmul_bf16_amx.cpp compiled against the software tile model (kernels/amx_tile.h),
// so the AMX-BF16 kernel runs (and is checked in test_matmul_bf16_amx.cpp) on CPUs without AMX.
// The same source as the library's copy; only the tile backend differs.
#define WARDEN_AMX_EMULATE 1
#include "kernels/matmul_bf16_amx.cpp"
