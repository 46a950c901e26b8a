#pragma once
// Offline quantization of a checkpoint (`warden quantize`). The codes are produced by exactly
// the path the loader uses at load time (bit-exact GGUF import, else the default quantizer),
// so loading the output with the same --weights gives the same packed bytes as quantizing the
// source at load (tested).
#include <cstdint>
#include <string>

#include "quant/weight_format.h"
#include "util/thread_pool.h"

namespace warden::quant {

struct QuantizeStats {
    int64_t tensors_quantized = 0;
    int64_t tensors_copied = 0;
    int64_t bytes_in = 0;   // tensor data of the source
    int64_t bytes_out = 0;  // tensor data written
};

// Is this tensor one of the linear-layer matrices quantized by default (GGUF or HF naming)?
bool is_linear_weight(const std::string& name);
bool is_embedding_weight(const std::string& name);

// GGUF -> GGUF with the linear layers (and the embeddings/head when `embeddings`) as Q4_0 /
// Q4_1 / Q8_0 (quant/quantizer.h ggml_type_for); everything else is copied unchanged.
QuantizeStats quantize_gguf(const std::string& in, const std::string& out, const WeightFormat& f,
                            bool embeddings, util::ThreadPool& pool);

}  // namespace warden::quant
