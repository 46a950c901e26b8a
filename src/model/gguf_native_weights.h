#pragma once
// Which runtime weight format a GGUF file's matrices load in when --weights is not given. A
// file whose layer matrices are all Q4_0 (or all Q4_1) runs them as int4-g32 (-asym), one whose
// layer matrices are all per-channel Q8_0 (one scale per row, as `warden quantize --weights
// int8` writes it) as int8, and any other all-Q8_0 file (llama.cpp's, a scale per 32 weights) as
// int8-g32: the import is bit-exact (quant/quantizer.h, import_ggml_row), so the file runs at
// the speed and memory of its own format, as it does in llama.cpp. Then the token embeddings and
// output head are decided one by one the same way; one that does not map gets the default head
// beside those layers (int8 beside int4), as `--weights` gives it. Layers of the other GGUF block
// types (Q2_K..Q6_K, Q5_0, Q5_1, IQ4_NL, IQ4_XS) run as stored (kernels/matmul_kquant.h), and a
// file mixing these types (llama.cpp's Q4_K_M, Q5_K_M, ...) runs each matrix in its own type's
// format (GgufNativeWeights::per_tensor). Anything else loads at --dtype, as before.
#include <optional>
#include <string>

#include "formats/gguf_file.h"
#include "model/model_config.h"

namespace warden::model {

// Metadata key `warden quantize` writes: the --weights name its layer blocks came from (e.g.
// "int4-g128"). When its block type matches the layers', the layers (and a head of the same
// type: --quantize-embeddings) load in that format; rows that do not import exactly are
// requantized and counted in the report.
inline constexpr const char* kGgufDeclaredWeightsKey = "warden.quantize.weights";

struct GgufNativeWeights {
    std::optional<std::string> layers;  // a --weights name, e.g. "int4-g32-asym"; unset: --dtype
    std::optional<std::string> embed;   // token_embd.weight, likewise
    std::optional<std::string> output;  // output.weight (not when tied or absent), likewise
    std::string note;                   // why, for the load report; empty for an all-float file
    // Layer matrices of several block types that all run natively (a llama.cpp mix such as
    // Q4_K_M: Q4_K beside Q6_K): each in gguf_mixed_native_format of its own type; `layers`
    // stays unset and per_tensor_name names the formats ("q4_k+q6_k").
    bool per_tensor = false;
    std::string per_tensor_name;
};

// The lossless runtime format of a GGUF matrix of `type` in a file of mixed layer types (Q8_0:
// int8-g32, which holds any Q8_0 block), if any: Q4_0, Q4_1, Q8_0 and the block types of
// kernels/matmul_kquant.h.
std::optional<std::string> gguf_mixed_native_format(tensor::GgmlType type);

// `dtype_name` names the fallback in the note; `head_chosen`: --head-weights decides the
// embeddings and head, so they are left unset and out of the note. Reads only each Q8_0
// tensor's first row (a per-block Q8_0 file shows itself there); rows further down that turn out
// not to be per channel are requantized at load, and the loader reports how many.
GgufNativeWeights gguf_native_weights(const formats::GGUFFile& g, const ModelConfig& c,
                                      const std::string& dtype_name, bool head_chosen);

// The matrices --weights applies to: "blk.N.*" of layers the model runs (N < n_layers: not the
// MTP / nextn blocks after them) with two or more dimensions (stacked experts have three),
// except those that always load in f32 or --dtype: MoE routers and MLA's kv_b / k_b / v_b
// (model/mla.cpp). `warden quantize` writes exactly these quantized (convert/quantize_model.h),
// and so does its compressed-tensors writer, by each Hugging Face name's GGUF name
// (convert/quantize_ct.cpp, formats/gguf_names.h).
bool is_layer_matrix(const formats::GGUFTensor& t, int64_t n_layers);

// The name half of is_layer_matrix (a routed expert's "blk.N.ffn_up_exps.weight[e]" included).
bool is_layer_matrix_name(const std::string& gguf_name, int64_t n_layers);

// Whether the file's token_embd is a BF16 table that is not also the head (untied, an output
// tensor present): by default it is looked up as stored (model_loader.cpp, Loader::matrix), never
// converted, and `warden quantize` copies it.
bool gguf_bf16_lookup_table(const formats::GGUFFile& g, const ModelConfig& c);

// Beside layers named by --weights in a quantized format, with no --head-weights: the embeddings
// and head that keep their own lossless format by the same rule as above (embed / output set),
// and a note naming them ("token_embd Q8_0 as int8-g32 without loss"); `layers` stays unset and
// so does a head without one (the loader gives it the layers' default head). So the same file
// gives the same head whether or not the layer format is named, and nothing in it is quantized
// twice.
GgufNativeWeights gguf_named_heads(const formats::GGUFFile& g, const ModelConfig& c);

}  // namespace warden::model
