#pragma once
// Weight quantizers: f32 row -> codes + scales (kernels::QuantRow) for a quantized layout.
// The default is round-to-nearest with a scale search per group (int4) or row (int8), keeping the
// scale with the smallest weighted squared error:
//  - symmetric int4: the error of element i is weighted by importance[i] * sqrt(sigma^2 + x_i^2)
//    (sigma^2 = the group's mean square, as llama.cpp's k-quants do), and the candidates are
//    llama.cpp's Q4_0 scale max / -8 plus a grid of 19 inverse scales, each also refit by weighted
//    least squares to the codes it gives (quantizer.cpp);
//  - asymmetric int4 and int8: clip ratios of the range, error weighted by importance alone.
// Scales are rounded to their stored dtype (f16/bf16) BEFORE the codes are chosen, so the error
// is the error of what is stored.
//
// Calibration-based methods (AWQ-style per-channel importance, GPTQ-style error feedback)
// plug in through the same interface: `importance` is a per-input-channel weight (e.g. the
// mean squared activation from calibration data, as llama.cpp's imatrix holds it: `warden quantize
// --imatrix`, quant/imatrix.h; nullptr = uniform), and a subclass may override quantize_matrix to
// see all rows at once.
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
    std::string name() const override { return "rtn-search"; }
    kernels::QuantRow quantize_row(const kernels::WeightMatrix& layout, const float* row,
                                   const float* importance) const override;
};

const Quantizer& default_quantizer();

// Bit-exact import of a row stored as GGUF Q4_0 / Q4_1 / Q8_0 into `layout` when the codes map
// without loss (Q4_0 -> int4 symmetric f16 scales, Q4_1 -> int4 asym f16, Q8_0 -> int8 f16,
// and the layout's group/row shares each block scale). nullopt when it does not map.
std::optional<kernels::QuantRow> import_ggml_row(tensor::GgmlType t, const uint8_t* src,
                                                 const kernels::WeightMatrix& layout);
// The Q4 path of import_ggml_row in two steps, for loading whole panels of codes at once
// (kernels::pack_q4_codes with split_halves): whether Q4_0 / Q4_1 blocks' codes are `layout`'s
// codes (Q4_0 into symmetric, Q4_1 into asymmetric int4 with f16 scales), and row src's group
// scales into d (and m): false when the blocks of one group differ in scale (the row does not
// import), util::Error for a non-finite scale.
bool ggml_q4_codes_map(tensor::GgmlType t, const kernels::WeightMatrix& layout);
bool import_ggml_q4_scales(tensor::GgmlType t, const uint8_t* src,
                           const kernels::WeightMatrix& layout, uint16_t* d, uint16_t* m);
// Whether a row of GGUF blocks of `type` runs as stored in `layout` (an is_kquant layout of that
// block type, whole blocks per row): then the kernels read the file's bytes as they are, and
// check_kquant_row_scales is the whole import.
bool runs_as_stored(tensor::GgmlType type, const kernels::WeightMatrix& layout);
// Throws util::Error naming the bits when a block scale of the row (layout.cols weights of
// layout's is_kquant type at src) is infinite or NaN, as import_ggml_row does for such a row.
void check_kquant_row_scales(const uint8_t* src, const kernels::WeightMatrix& layout);
// The GGUF type a layout is written as (Q4_0 / Q4_1 / Q8_0); throws util::Error when the format
// has no lossless GGUF type (fp8, bf16 scales).
tensor::GgmlType ggml_type_for(const kernels::WeightMatrix& layout);
// Row codes -> GGUF blocks (ggml_row_bytes(type, cols) bytes at dst).
void export_ggml_row(const kernels::WeightMatrix& layout, const kernels::QuantRow& row,
                     uint8_t* dst);

}  // namespace warden::quant
