// AVX2 K-quant kernels (kernels/matmul_kquant.h, matmul_kquant_simd.h).
#include <immintrin.h>

#include "kernels/kernels_internal.h"

#define KQ(name) _##name
using KQI = __m256i;
using KQH = __m128i;
using KQF = __m256;
#define KQ_VNNI 0
#define KQ_SCALAR_FLOAT 0
#include "kernels/matmul_kquant_simd.h"

namespace warden::kernels::detail {

void mm_kquant_avx2(const QuantArgs& a, int64_t r0, int64_t r1) {
    kq_matmul(a, r0, r1);
}

}  // namespace warden::kernels::detail
