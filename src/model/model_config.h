#pragma once
// Architecture hyper-parameters of a dense decoder-only transformer (llama, qwen2, qwen3),
// read from GGUF metadata or a Hugging Face config.json. Validated on load so the forward pass
// can trust every field.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace warden::model {

class GGUFFile;

enum class Arch { Llama, Qwen2, Qwen3 };

// How RoPE pairs dimensions. HF checkpoints rotate the two halves of each head (NeoX style);
// llama.cpp's converter permutes llama Q/K weights so adjacent pairs rotate (interleaved).
enum class RopeStyle { NeoX, Interleaved };

struct ModelConfig {
    Arch arch = Arch::Llama;
    std::string arch_name;     // "llama", "qwen2", "qwen3"
    int64_t n_layers = 0;
    int64_t d_model = 0;
    int64_t n_heads = 0;
    int64_t n_kv_heads = 0;
    int64_t head_dim = 0;
    int64_t d_ff = 0;
    int64_t vocab_size = 0;
    int64_t max_ctx = 0;
    float rms_eps = 1e-5f;
    float rope_theta = 10000.0f;
    RopeStyle rope_style = RopeStyle::NeoX;
    int64_t rope_dim = 0;            // rotated dims per head (== head_dim for these archs)
    float rope_linear_factor = 1.0f;  // positions are divided by it ("linear" scaling)
    std::vector<float> rope_inv_freq; // [rope_dim / 2], llama3 scaling already applied
    bool tied_embeddings = false;
    bool qkv_bias = false;
    bool qk_norm = false;

    // Throws util::Error when the shape parameters are inconsistent.
    void validate() const;
};

ModelConfig config_from_gguf(const GGUFFile& gguf);
ModelConfig config_from_hf_json(const nlohmann::json& config, const std::string& path);

// inv_freq[i] = theta^(-2i/dim), optionally adjusted by Llama 3's frequency-dependent scaling.
std::vector<float> rope_inv_freq(int64_t rope_dim, float theta);
void apply_llama3_rope_scaling(std::vector<float>& inv_freq, float factor, float low_freq_factor,
                               float high_freq_factor, float original_max_pos);

}  // namespace warden::model
