#pragma once
// Runtime weight formats (--weights / --prefill-weights) and their parsing.
//   bf16 | f32 | fp8 (e4m3, per-channel f32 scale) | int8 (per channel, f16 scale)
//   int8-g32 (an f16 scale per 32 weights: GGUF Q8_0, llama.cpp's int8)
//   int4 | int4-g32 | int4-g128 (group 32 default, symmetric, f16 scales)
// Suffixes for int4: -asym (w = d*q + m, GGUF Q4_1 style), -bf16s (bf16 scales), -a16 (W4A16
// kernel: dequantize in registers, f32 activations, instead of the default W4A8).
// int8 takes -bf16s as well. Examples: int4-g128-asym, int4-g32-bf16s-a16, int8-g32.
// q4_k | q5_k | q6_k | q2_k | q3_k | q5_0 | q5_1 | iq4_nl | iq4_xs: GGUF blocks as stored
// (kernels/matmul_kquant.h); only a GGUF tensor of that block type loads in one (nothing
// quantizes into them).
#include <cstdint>
#include <optional>
#include <string>

#include "kernels/matmul.h"

namespace warden::quant {

struct WeightFormat {
    kernels::WeightType type = kernels::WeightType::BF16;
    int32_t group = 0;  // int4: 32 or 128; int8: 0 (per channel) or 32
    bool asym = false;
    bool bf16_scales = false;
    bool act_f32 = false;

    bool quantized() const {
        return type != kernels::WeightType::F32 && type != kernels::WeightType::BF16;
    }
    // An empty view carrying the format and a shape (for layout sizes and shape checks).
    kernels::WeightMatrix layout(int64_t rows, int64_t cols) const;
};

// Throws util::Error listing the accepted names for anything else.
WeightFormat parse_weight_format(const std::string& s);
std::string weight_format_name(const WeightFormat& f);
// The token embeddings' and output head's format beside layers in `layers` when nothing else
// chooses one: int8 beside any int4 (as llama.cpp's Q4_0 files carry a Q6_K head: in bf16 the
// head is ~19% of a 1B model's bytes per decoded token; docs/WEIGHT_QUANT.md, Design: Embeddings
// and head); unset (the runtime dtype) beside anything else.
std::optional<WeightFormat> default_head_format(const WeightFormat& layers);
// Bytes of a [rows, cols] matrix in this format (packed, whole panels).
int64_t weight_bytes(const WeightFormat& f, int64_t rows, int64_t cols);

}  // namespace warden::quant
