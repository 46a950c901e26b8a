// AVX-512 VNNI K-quant kernels (kernels/matmul_kquant.h, matmul_kquant_simd.h): the 4-product
// sums of Q4_K / Q5_K codes with int8 activations by vpdpbusd (one instruction where AVX2 needs
// maddubs + madd). Also compiled on SIMDe by tests/kernels/matmul_kquant_avx512_emulated.cpp
// (WARDEN_AVX512_EMULATE, entry renamed by WARDEN_KQUANT_AVX512_ENTRY).
#include "kernels/avx512_compat.h"

#define KQ(name) WZ(name)
using KQI = warden::kernels::detail::yi;
using KQF = warden::kernels::detail::yf;
#ifdef WARDEN_AVX512_EMULATE
using KQH = simde__m128i;
#define KQ_SCALAR_FLOAT 1
#else
using KQH = __m128i;
#define KQ_SCALAR_FLOAT 0
#endif
#define KQ_VNNI 1
#include "kernels/matmul_kquant_simd.h"

#ifndef WARDEN_KQUANT_AVX512_ENTRY
#define WARDEN_KQUANT_AVX512_ENTRY mm_kquant_avx512
#endif

namespace warden::kernels::detail {

void WARDEN_KQUANT_AVX512_ENTRY(const QuantArgs& a, int64_t r0, int64_t r1) {
    kq_matmul(a, r0, r1);
}

}  // namespace warden::kernels::detail
