#pragma once
// A checkpoint-independent view of one stored tensor, so the loader converts GGUF and
// safetensors tensors through one path. Dims are in HF order (outermost first): a linear
// weight is [out_features, in_features] whichever file it came from.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tensor/ggml_types.h"

namespace warden::formats {

struct GGUFTensor;
struct SafetensorsTensor;
struct CtPacked;
struct Fp8BlockRows;

struct SourceTensor {
    std::string name;
    std::vector<int64_t> dims;  // outermost first
    bool is_ggml = true;
    tensor::GgmlType ggml_type = tensor::GgmlType::F32;  // when is_ggml
    std::string st_dtype;                                // when !is_ggml: "F32", "F16", "BF16"
    const uint8_t* data = nullptr;
    // compressed-tensors pack-quantized weight (formats/compressed_tensors.h); st_dtype "I4"/"I8".
    std::shared_ptr<const CtPacked> ct;
    // FP8 block-scaled weight (formats/fp8_block.h), decoded row by row; st_dtype "F8_E4M3".
    std::shared_ptr<const Fp8BlockRows> fp8;

    static SourceTensor from(const GGUFTensor& t);
    static SourceTensor from(const SafetensorsTensor& t);

    std::string type_name() const;
    int64_t n_elements() const;
    int64_t row_len() const { return dims.back(); }
    int64_t n_rows() const { return n_elements() / row_len(); }
    // The stored rows when they are plain row-major bf16 (safetensors BF16, GGUF BF16), else null.
    const uint8_t* bf16_rows() const;
    // Converts row r (of row_len() elements) to f32.
    void row_to_f32(int64_t r, float* out) const;
};

}  // namespace warden::formats
