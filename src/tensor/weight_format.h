#pragma once
// Weight formats: the one descriptor (type and options) that the kernels, the quantizers, the
// file formats, the model loader and the commands share, with its names (--weights /
// --prefill-weights) and block traits. The packed layouts themselves are the kernels'
// (kernels/matmul.h, kernels/matmul_quant.h, kernels/matmul_kquant.h).
//   bf16 | f32 | fp8 (e4m3, per-channel f32 scale) | int8 (per channel, f16 scale)
//   int8-g32 (an f16 scale per 32 weights: GGUF Q8_0, llama.cpp's int8)
//   int4 | int4-g32 | int4-g128 (group 32 default, symmetric, f16 scales)
// Suffixes for int4: -asym (w = d*q + m, GGUF Q4_1 style), -bf16s (bf16 scales), -a16 (W4A16
// kernel: dequantize in registers, f32 activations, instead of the default W4A8).
// int8 takes -bf16s as well. Examples: int4-g128-asym, int4-g32-bf16s-a16, int8-g32.
// q4_k | q5_k | q6_k | q2_k | q3_k | q4_0 | q4_1 | q5_0 | q5_1 | q8_0 | iq4_nl | iq4_xs: GGUF
// blocks as stored (kernels/matmul_kquant.h); only a GGUF tensor of that block type loads in one
// (nothing quantizes into them). q8_0, q4_0 and q4_1 compute exactly what int8-g32, int4-g32 and
// int4-g32-asym do (the same values and arithmetic), reading the file's blocks in place instead
// of a copy in panels.
#include <cstdint>
#include <optional>
#include <string>

#include "tensor/ggml_types.h"

namespace warden::tensor {

// F32/BF16: plain values in panels. Q8, Q4, FP8: quantized panel layouts with per-channel or
// per-group scales. Q4K, Q5K, Q6K, Q2K, Q3K, IQ4XS (GGUF super-blocks of 256) and Q5_0, Q5_1,
// Q8_0, IQ4NL, Q4_0, Q4_1 (GGUF blocks of 32): llama.cpp's blocks kept as stored.
enum class WeightType {
    F32,
    BF16,
    Q8,
    Q4,
    FP8,
    Q4K,
    Q5K,
    Q6K,
    Q5_0,
    Q5_1,
    Q2K,
    Q3K,
    IQ4NL,
    IQ4XS,
    Q8_0,
    Q4_0,
    Q4_1
};

struct WeightFormat {
    WeightType type = WeightType::BF16;
    int32_t group = 0;  // int4: 32 or 128; int8: 0 (per channel) or 32; fp8: 0 or block columns
    bool asym = false;
    bool bf16_scales = false;
    bool act_f32 = false;

    bool quantized() const { return type != WeightType::F32 && type != WeightType::BF16; }
};

// Throws util::Error listing the accepted names for anything else.
WeightFormat parse_weight_format(const std::string& s);
std::string weight_format_name(const WeightFormat& f);
// The token embeddings' and output head's format beside layers in `layers` when nothing else
// chooses one: int8 beside any int4 (as llama.cpp's Q4_0 files carry a Q6_K head: in bf16 the
// head is ~19% of a 1B model's bytes per decoded token; docs/WEIGHT_QUANT.md, Design: Embeddings
// and head); unset (the runtime dtype) beside anything else.
std::optional<WeightFormat> default_head_format(const WeightFormat& layers);
// Whether fp8-bG can hold a block of g columns: a multiple of 4 (the contract's four chains) up to
// 256 (the kernels' widened block).
inline bool fp8_block_valid(int64_t g) {
    return g >= 4 && g <= 256 && g % 4 == 0;
}

// GGUF block traits (ggml-common.h) of the types kept as stored.
constexpr int64_t kKQuantBlock = 256;  // weights per K-quant super-block

// Whether t is a GGUF block type kept as stored: the K-quants, IQ4_XS and the 32-weight Q4_0,
// Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL.
inline bool is_kquant(WeightType t) {
    switch (t) {
        case WeightType::Q4K:
        case WeightType::Q5K:
        case WeightType::Q6K:
        case WeightType::Q5_0:
        case WeightType::Q5_1:
        case WeightType::Q8_0:
        case WeightType::Q4_0:
        case WeightType::Q4_1:
        case WeightType::Q2K:
        case WeightType::Q3K:
        case WeightType::IQ4NL:
        case WeightType::IQ4XS:
            return true;
        default:
            return false;
    }
}
// Weights (256 or 32) and bytes of one block of type t (an is_kquant type; util::Error
// otherwise).
int64_t kquant_block_elems(WeightType t);
int64_t kquant_block_bytes(WeightType t);
// The block type's name as GGUF spells it ("Q4_K").
const char* kquant_type_name(WeightType t);
// The GGUF block type of an is_kquant type, and back (nullopt: not one of them).
GgmlType kquant_ggml_type(WeightType t);
std::optional<WeightType> kquant_from_ggml(GgmlType t);

}  // namespace warden::tensor
