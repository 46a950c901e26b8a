#include "formats/tensor_source.h"

#include <cstring>

#include "formats/compressed_tensors.h"
#include "formats/fp8_block.h"
#include "formats/gguf_file.h"
#include "formats/safetensors_file.h"
#include "tensor/float_convert.h"
#include "util/error.h"

namespace warden::formats {

SourceTensor SourceTensor::from(const GGUFTensor& t) {
    SourceTensor s;
    s.name = t.name;
    s.dims.assign(t.shape.rbegin(), t.shape.rend());
    s.is_ggml = true;
    s.ggml_type = t.type;
    s.data = t.data;
    return s;
}

SourceTensor SourceTensor::from(const SafetensorsTensor& t) {
    SourceTensor s;
    s.name = t.name;
    s.dims = t.shape;
    if (s.dims.empty()) s.dims.push_back(1);
    s.is_ggml = false;
    s.st_dtype = t.dtype;
    s.data = t.data;
    if (t.dtype != "F32" && t.dtype != "F16" && t.dtype != "BF16")
        throw util::Error("tensor '" + t.name + "' has dtype " + t.dtype +
                          ", which this loader does not support (F32, F16, BF16)");
    return s;
}

std::string SourceTensor::type_name() const {
    return is_ggml ? tensor::ggml_type_name(ggml_type) : st_dtype;
}

int64_t SourceTensor::n_elements() const {
    int64_t n = 1;
    for (auto d : dims) n *= d;
    return n;
}

const uint8_t* SourceTensor::bf16_rows() const {
    if (ct || fp8) return nullptr;
    const bool bf16 = is_ggml ? ggml_type == tensor::GgmlType::BF16 : st_dtype == "BF16";
    return bf16 ? data : nullptr;
}

void SourceTensor::row_to_f32(int64_t r, float* out) const {
    const int64_t n = row_len();
    if (ct) {
        ct->dequant_row(r, out);
        return;
    }
    if (fp8) {
        fp8->dequant_row(r, out);
        return;
    }
    if (is_ggml) {
        const int64_t rb = tensor::ggml_row_bytes(ggml_type, n);
        tensor::dequantize_row(ggml_type, data + r * rb, out, n);
        return;
    }
    const uint8_t* p = data + r * n * (st_dtype == "F32" ? 4 : 2);
    if (st_dtype == "F32") {
        std::memcpy(out, p, static_cast<size_t>(n) * 4);
    } else {
        const bool bf = st_dtype == "BF16";
        for (int64_t i = 0; i < n; ++i) {
            uint16_t h;
            std::memcpy(&h, p + 2 * i, 2);
            out[i] = bf ? tensor::bf16_to_f32(h) : tensor::f16_to_f32(h);
        }
    }
}

}  // namespace warden::formats
