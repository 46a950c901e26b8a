#include "model/weights.h"

#include <cstring>

#include "tensor/float_convert.h"

namespace warden::model {

const char* runtime_dtype_name(RuntimeDType t) { return t == RuntimeDType::BF16 ? "bf16" : "f32"; }

namespace {
int64_t elem_bytes(kernels::WeightType t) { return t == kernels::WeightType::BF16 ? 2 : 4; }
}  // namespace

Matrix Matrix::borrow(kernels::WeightType t, int64_t rows, int64_t cols, const void* data) {
    Matrix m;
    m.view_ = {t, rows, cols, data};
    return m;
}

Matrix Matrix::owned(kernels::WeightType t, int64_t rows, int64_t cols) {
    Matrix m;
    m.owned_.assign(static_cast<size_t>(rows * cols * elem_bytes(t)), 0);
    m.view_ = {t, rows, cols, m.owned_.data()};
    return m;
}

int64_t Matrix::bytes() const { return view_.rows * view_.cols * elem_bytes(view_.type); }

void Matrix::row_f32(int64_t r, float* out) const {
    const auto* base = static_cast<const uint8_t*>(view_.data) + r * view_.cols * elem_bytes(view_.type);
    if (view_.type == kernels::WeightType::F32) {
        std::memcpy(out, base, static_cast<size_t>(view_.cols) * 4);
    } else {
        for (int64_t i = 0; i < view_.cols; ++i) {
            uint16_t h;
            std::memcpy(&h, base + 2 * i, 2);
            out[i] = tensor::bf16_to_f32(h);
        }
    }
}

}  // namespace warden::model
