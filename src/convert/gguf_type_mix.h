#pragma once
// llama.cpp's K-quant file types as per-tensor block-type choices (`warden quantize --weights
// q4_k_m`), by the rules of llama-quantize (llama.cpp src/llama-quant.cpp,
// llama_tensor_get_type) for these types, so a warden-quantized Q4_K_M holds the same block type
// in every tensor as llama-quantize's of the same model and the two can be compared block search
// against block search:
//  - the default type: Q4_K (Q4_K_S, Q4_K_M), Q5_K (Q5_K_S, Q5_K_M), Q6_K;
//  - the output head (token_embd where the head is tied): Q6_K;
//  - attn_v: Q6_K in the "more bits" layers (the first and last eighth, and every third between)
//    for Q4_K_M / Q5_K_M; Q5_K in the first four for Q4_K_S; Q8_0 for 8-expert models;
//  - ffn_down: Q6_K in the more-bits layers for Q4_K_M / Q5_K_M, Q5_K in the first eighth for
//    Q4_K_S;
//  - attn_k Q8_0 and attn_output Q5_K (Q4_K_S/M) in 8-expert models; attn_qkv Q5_K (Q4_K_M) or
//    Q6_K (Q5_K_M);
//  - a tensor whose rows are not whole 256-blocks falls back: Q4_K -> Q5_0, Q5_K -> Q5_1,
//    Q6_K -> Q8_0 (and F16 where even 32 does not divide; the head becomes Q8_0).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "formats/gguf_file.h"
#include "tensor/ggml_types.h"

namespace warden::convert {

struct GgufTypeMix {
    std::string name;       // "Q4_K_M"
    uint32_t ftype = 0;     // general.file_type (llama_ftype)
    tensor::GgmlType base;  // the default block type
};

// "q4_k_m", "Q4_K_M", ... (Q4_K_S, Q4_K_M, Q5_K_S, Q5_K_M, Q6_K); nullopt for anything else.
std::optional<GgufTypeMix> parse_gguf_type_mix(const std::string& s);

// The block type of each tensor in `quantized` (GGUF names and ggml shapes, in file order, the
// tensors to be quantized: layer matrices, token_embd, output), as llama-quantize chooses it.
// n_layers: the model's layers; n_experts: routed experts per MoE layer (0 dense);
// has_output: the file has its own output.weight (else token_embd is the head).
std::vector<tensor::GgmlType> choose_gguf_types(
    const GgufTypeMix& mix, const std::vector<const formats::GGUFTensor*>& quantized,
    int64_t n_layers, int64_t n_experts, bool has_output);

}  // namespace warden::convert
