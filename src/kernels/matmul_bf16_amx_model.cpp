// src/kernels/matmul_bf16_amx.cpp compiled against the software tile model (kernels/amx_tile.h):
// the same source as the native copy, only the tile backend differs. It runs tile-only bf16
// matrices (kernels/matmul_bf16_tiles.h) where the active ISA has no AMX-BF16 kernel, and the
// tests check the kernel with it on any CPU.
#define WARDEN_AMX_EMULATE 1
#include "kernels/matmul_bf16_amx.cpp"
