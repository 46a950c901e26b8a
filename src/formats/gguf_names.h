#pragma once
// Hugging Face tensor names in llama.cpp's GGUF naming (gguf-py's TensorNameMap), for what is
// named the GGUF way outside a GGUF file: the loader's MoE / MLA "raw:" roles, and llama.cpp
// importance matrices applied to a Hugging Face checkpoint (convert/quantize_ct.h).
#include <string>

namespace warden::formats {

// A layer-relative HF name ("self_attn.q_proj.weight") -> "attn_q.weight". Routed experts are
// stacked per layer in GGUF into one 3-D tensor [n_expert, rows, cols]; expert e
// ("mlp.experts.5.up_proj.weight") is named "ffn_up_exps.weight[5]". A name without a GGUF
// counterpart comes back unchanged.
std::string gguf_layer_name(const std::string& hf);

// A full HF name -> the GGUF name: "model.layers.3.mlp.down_proj.weight" ->
// "blk.3.ffn_down.weight", "model.embed_tokens.weight" -> "token_embd.weight", "lm_head.weight" ->
// "output.weight" (experts as above, with the "[e]" suffix). Empty when the name has no GGUF
// counterpart.
std::string gguf_tensor_name(const std::string& hf);

}  // namespace warden::formats
