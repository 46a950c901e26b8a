#pragma once
// Weight quantizers: f32 row -> codes + scales (kernels::QuantRow) for a quantized layout.
// The default is round-to-nearest with a per-group clip-ratio search: for each group (int4),
// row (int8) the scale is tried at several clip ratios of the group's range and the one with
// the smallest (importance-weighted) squared error is kept. Scales are rounded to their stored
// dtype (f16/bf16) BEFORE the codes are chosen, so the error is the error of what is stored.
//
// Calibration-based methods (AWQ-style per-channel importance, GPTQ-style error feedback)
// plug in through the same interface: `importance` is a per-input-channel weight (e.g. the
// mean squared activation from calibration data; nullptr = uniform), and a subclass may
// override quantize_matrix to see all rows at once.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kernels/matmul_quant.h"
#include "tensor/ggml_types.h"

namespace warden::quant {

class Quantizer {
public:
    virtual ~Quantizer() = default;
    virtual std::string name() const = 0;
    // layout: the target format and shape (rows/cols); row: cols f32 values (finite, else
    // util::Error); importance: cols weights or nullptr.
    virtual kernels::QuantRow quantize_row(const kernels::WeightMatrix& layout, const float* row,
                                           const float* importance) const = 0;
};

class RtnQuantizer final : public Quantizer {
public:
    std::string name() const override { return "rtn-clip"; }
    kernels::QuantRow quantize_row(const kernels::WeightMatrix& layout, const float* row,
                                   const float* importance) const override;
};

const Quantizer& default_quantizer();

// Bit-exact import of a row stored as GGUF Q4_0 / Q4_1 / Q8_0 into `layout` when the codes map
// without loss (Q4_0 -> int4 symmetric f16 scales, Q4_1 -> int4 asym f16, Q8_0 -> int8 f16,
// and the layout's group/row shares each block scale). nullopt when it does not map.
std::optional<kernels::QuantRow> import_ggml_row(tensor::GgmlType t, const uint8_t* src,
                                                 const kernels::WeightMatrix& layout);
// The GGUF type a layout is written as (Q4_0 / Q4_1 / Q8_0); throws util::Error when the format
// has no lossless GGUF type (fp8, bf16 scales).
tensor::GgmlType ggml_type_for(const kernels::WeightMatrix& layout);
// Row codes -> GGUF blocks (ggml_row_bytes(type, cols) bytes at dst).
void export_ggml_row(const kernels::WeightMatrix& layout, const kernels::QuantRow& row, uint8_t* dst);

}  // namespace warden::quant
