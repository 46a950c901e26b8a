#pragma once
// `warden quantize` to a compressed-tensors "pack-quantized" safetensors checkpoint (the layout
// of INT4 Kimi-K2 / GLM releases; formats/compressed_tensors.h), from a Hugging Face directory
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
#include <cstdint>
#include <optional>
#include <string>

#include "convert/quantize_model.h"
#include "quant/imatrix.h"
#include "tensor/weight_format.h"
#include "util/thread_pool.h"

namespace warden::convert {

// transformers' save_pretrained default shard size (there 5 GB; here 5 GiB).
inline constexpr int64_t kDefaultMaxShardBytes = int64_t{5} << 30;

// `out` is a directory (written: config.json, tokenizer/generation files of the source, and the
// weights: model.safetensors when they fit in `max_shard_bytes` (default kDefaultMaxShardBytes),
// else model-00001-of-0000N.safetensors shards with a model.safetensors.index.json, as Hugging Face
// checkpoints are sharded; weight files of an earlier run there that this one did not write are
// removed) or a path ending in ".safetensors" (one file whatever its size, so max_shard_bytes is
// an error; config.json is written next to it unless that would overwrite the source's). Memory
// holds one shard's output at a time. `imatrix`: llama.cpp importance per input column, found by
// each tensor's GGUF name (formats/gguf_names.h; expert e of a stacked entry for MoE experts).
// Throws util::Error, before writing anything for a bad format, shape, option or imatrix entry.
QuantizeStats quantize_hf_compressed_tensors(const std::string& in_dir, const std::string& out,
                                             const tensor::WeightFormat& f, bool embeddings,
                                             util::ThreadPool& pool,
                                             std::optional<int64_t> max_shard_bytes = std::nullopt,
                                             const quant::Imatrix* imatrix = nullptr);

}  // namespace warden::convert
