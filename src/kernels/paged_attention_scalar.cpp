// Scalar reference of the paged-attention read kernels: decode every element exactly, then
// plain sequential sums. The SIMD variants are tested against these.
#include <bit>
#include <cstring>

#include "kernels/paged_attention_internal.h"
#include "tensor/float_convert.h"
#include "tensor/fp8.h"

namespace warden::kernels::detail {
namespace {

struct DecF32 {
    static float at(const uint8_t* p, int64_t i) {
        float f;
        std::memcpy(&f, p + 4 * i, 4);
        return f;
    }
};
struct DecBF16 {
    static float at(const uint8_t* p, int64_t i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        return tensor::bf16_to_f32(h);
    }
};
struct DecF16 {
    static float at(const uint8_t* p, int64_t i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        return tensor::f16_to_f32(h);
    }
};
struct DecE4M3 {
    static float at(const uint8_t* p, int64_t i) { return tensor::fp8_e4m3_to_f32(p[i]); }
};
struct DecE5M2 {
    static float at(const uint8_t* p, int64_t i) { return tensor::fp8_e5m2_to_f32(p[i]); }
};
struct DecI8 {
    static float at(const uint8_t* p, int64_t i) {
        return static_cast<float>(static_cast<int8_t>(p[i]));
    }
};

template <typename D>
void scores(const float* q, const uint8_t* rows, int64_t stride, int64_t n, int64_t dim,
            const float* mult, float* s) {
    for (int64_t j = 0; j < n; ++j) {
        const uint8_t* r = rows + j * stride;
        float acc = 0.0f;
        for (int64_t i = 0; i < dim; ++i) acc += q[i] * D::at(r, i);
        s[j] = acc * mult[j];
    }
}

template <typename D>
void accum(const float* w, const uint8_t* rows, int64_t stride, int64_t n, int64_t dim,
           float* out) {
    for (int64_t j = 0; j < n; ++j) {
        const uint8_t* r = rows + j * stride;
        for (int64_t i = 0; i < dim; ++i) out[i] += w[j] * D::at(r, i);
    }
}

template <typename D>
void dequant(const uint8_t* row, int64_t dim, float* out) {
    for (int64_t i = 0; i < dim; ++i) out[i] = D::at(row, i);
}

template <typename D>
constexpr KvReadKernels make() {
    return {scores<D>, accum<D>, dequant<D>};
}

}  // namespace

const KvKernelTable& kv_kernels_scalar() {
    static const KvKernelTable t{{make<DecF32>(), make<DecBF16>(), make<DecF16>(), make<DecE4M3>(),
                                  make<DecE5M2>(), make<DecI8>()}};
    return t;
}

}  // namespace warden::kernels::detail
