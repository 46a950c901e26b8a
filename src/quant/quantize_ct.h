#pragma once
// `warden quantize` to a compressed-tensors "pack-quantized" safetensors checkpoint (the layout
// of INT4 Kimi-K2 / GLM releases; model/compressed_tensors.h), from a Hugging Face directory
// (bf16/f16/f32, FP8 block-scaled or pack-quantized). The codes come from exactly the path the
// loader uses (bit-exact import of a pack-quantized source, else the default quantizer on the
// f32 row), so loading the output with the same --weights gives the packed bytes of loading the
// source with it (tested).
//
// Quantized: the linear layers ("model.layers.N.*_proj.weight", MoE experts included, MLA's
// kv_b_proj excepted: the loader keeps it in the runtime dtype), plus
// lm_head / embed_tokens with `embeddings`; every other 2-D ".weight" (routers, lm_head, ...)
// is copied and listed in quantization_config.ignore.
// Formats: int4-g32 / int4-g128 (symmetric; f16 scales, bf16 with -bf16s) and int8 (channel).
// -asym has no exact zero-point form (warden's offset is free, compressed-tensors' is an integer
// multiple of the scale) and is refused.
#include <string>

#include "quant/quantize_model.h"
#include "quant/weight_format.h"
#include "util/thread_pool.h"

namespace warden::quant {

// `out` is a directory (written: model.safetensors, config.json, tokenizer/generation files
// of the source) or a path ending in ".safetensors" (config.json is written next to it unless
// that would overwrite the source's). Throws util::Error.
QuantizeStats quantize_hf_compressed_tensors(const std::string& in_dir, const std::string& out, const WeightFormat& f,
                                             bool embeddings, util::ThreadPool& pool);

}  // namespace warden::quant
