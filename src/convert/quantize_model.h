#pragma once
// Offline quantization of a checkpoint (`warden quantize`). The codes are produced by exactly
// the path the loader uses at load time (bit-exact GGUF import, else the default quantizer),
// so loading the output with the same --weights gives the same packed bytes as quantizing the
// source at load (tested).
#include <cstdint>
#include <string>
#include <vector>

#include "convert/gguf_type_mix.h"
#include "quant/imatrix.h"
#include "tensor/weight_format.h"
#include "util/thread_pool.h"

namespace warden::convert {

struct QuantizeStats {
    int64_t tensors_quantized = 0;  // the embeddings / head included
    int64_t tensors_copied = 0;
    int64_t bytes_in = 0;   // tensor data of the source
    int64_t bytes_out = 0;  // tensor data written
    std::string
        heads;  // "token_embd as int8, output as int8" for the ones quantized; empty if none
    int64_t imatrix_weighted = 0;  // quantized tensors that had an importance-matrix entry
    std::string types;  // K-quant file types: the block types written, "Q4_K x16, Q6_K x3"
};

// How quantize_gguf writes token_embd / output.
//   Default: a float (F32/F16/BF16) one becomes the default head beside the layers
//     (tensor::default_head_format: int8 beside int4), the format loading with --weights gives it
//     anyway, so the file holds what runs: smaller, and nothing to quantize at each load; except a
//     BF16 token_embd that is not the head, which loading looks up as stored (copied). One
//     already quantized (a Q8_0 or Q6_K head, say) is copied, so nothing is quantized twice; beside
//     int8 layers every head is copied (no default head there).
//   Keep: copied unchanged (`--head-weights keep`).
//   Format: every one in `format` (`--quantize-embeddings`: the layers' format; `--head-weights
//   F`).
struct HeadOptions {
    enum class Mode { Default, Keep, Format } mode = Mode::Default;
    tensor::WeightFormat format;  // Mode::Format only
    static HeadOptions keep() { return {Mode::Keep, {}}; }
    static HeadOptions as(const tensor::WeightFormat& f) { return {Mode::Format, f}; }
};

// Importance per matrix of a tensor of n_mat stacked matrices (null entries where the imatrix has
// none, all null without an imatrix): llama-imatrix collects a stacked tensor's experts in one
// entry, expert e's columns at [e * cols, (e + 1) * cols) (Imatrix::find "name[e]"). A size
// mismatch is an Error prefixed with `what`.
std::vector<const float*> matrix_importance(const quant::Imatrix* imatrix, const std::string& name,
                                            int64_t n_mat, int64_t cols, const std::string& what);

// Is this tensor the token embeddings or the output head (GGUF or HF naming)?
bool is_embedding_weight(const std::string& name);

// GGUF -> GGUF with the matrices --weights quantizes at load (model::is_layer_matrix: attention,
// MLP, MLA projections, shared and stacked routed experts) as Q4_0 / Q4_1 / Q8_0
// (quant/quantizer.h ggml_type_for), the embeddings / head as `head` says; everything else is
// copied unchanged. `imatrix`: the
// importance of each quantized tensor's input columns where it has an entry of that name
// (quant/imatrix.h; rows that import without loss are imported all the same).
QuantizeStats quantize_gguf(const std::string& in, const std::string& out,
                            const tensor::WeightFormat& f, const HeadOptions& head,
                            util::ThreadPool& pool, const quant::Imatrix* imatrix = nullptr);

// GGUF -> GGUF as one of llama.cpp's K-quant file types (convert/gguf_type_mix.h): the same
// matrices as quantize_gguf (layer matrices, token_embd, output) each in the block type
// llama-quantize would give it, from their f32 values (quant/ggml_block_quantizer.h; a tensor
// already in its chosen type is re-searched too, from its dequantized values); everything else is
// copied. `imatrix` weights each matrix's search as in quantize_gguf. The file loads in llama.cpp
// and in warden (each matrix natively in its block type).
QuantizeStats quantize_gguf_mix(const std::string& in, const std::string& out,
                                const GgufTypeMix& mix, util::ThreadPool& pool,
                                const quant::Imatrix* imatrix = nullptr);

}  // namespace warden::convert
