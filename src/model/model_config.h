#pragma once
// Architecture hyper-parameters of a decoder-only transformer (llama, qwen2, qwen3 and the
// mixture-of-experts qwen3_moe, glm4_moe, deepseek_v3), read from GGUF metadata or a Hugging Face
// config.json. Validated on load so the forward pass can trust every field.
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace warden::formats {
class GGUFFile;
}

namespace warden::model {

enum class Arch { Llama, Qwen2, Qwen3, Qwen3Moe, Glm4Moe, DeepseekV3 };

// How RoPE pairs dimensions. HF checkpoints rotate the two halves of each head (NeoX style);
// llama.cpp's converter permutes llama Q/K weights so adjacent pairs rotate (interleaved).
enum class RopeStyle { NeoX, Interleaved };

// How a router turns its logits into expert scores.
enum class RouterScoring {
    Softmax,  // Qwen3-MoE / Mixtral: softmax over all experts, top-k of the probabilities
    Sigmoid,  // DeepSeek-V3 / GLM-4 MoE "noaux_tc": sigmoid, top-k of score + correction bias
};

// Mixture-of-experts FFN hyper-parameters. n_experts == 0: every layer is dense.
struct MoeConfig {
    int64_t n_experts = 0;  // routed experts per MoE layer
    int64_t top_k = 0;      // experts per token
    int64_t d_expert = 0;   // FFN width of one routed expert (moe_intermediate_size)
    int64_t n_shared = 0;   // shared experts, fused into one FFN of width n_shared * d_expert
    RouterScoring scoring = RouterScoring::Softmax;
    bool norm_topk_prob = false;  // renormalize the k selected weights to sum 1
    bool score_bias = false;      // e_score_correction_bias is added for selection only
    int64_t n_group = 1;          // grouped top-k: experts split into n_group groups ...
    int64_t topk_group = 1;       // ... and only the best topk_group groups are eligible
    float routed_scaling = 1.0f;  // routed_scaling_factor applied to the final weights
    std::vector<char> sparse;     // [n_layers] 1 = MoE FFN, 0 = dense FFN of width d_ff

    bool is_moe_layer(int64_t l) const {
        return n_experts > 0 && l >= 0 && l < static_cast<int64_t>(sparse.size()) &&
               sparse[static_cast<size_t>(l)];
    }
};

// Multi-head latent attention (DeepSeek-V2/V3, Kimi K2; model/mla.h). kv_lora_rank == 0: none.
// For MLA models ModelConfig::head_dim is the q/k head size nope_dim + rope_dim and rope_dim the
// decoupled rope part.
struct MlaConfig {
    int64_t q_lora_rank = 0;   // 0: plain q_proj
    int64_t kv_lora_rank = 0;  // compressed KV latent width
    int64_t nope_dim = 0;      // qk_nope_head_dim
    int64_t v_dim = 0;         // v_head_dim
    bool enabled() const { return kv_lora_rank > 0; }
};

// What one token stores per layer in the KV pool: n_kv_heads rows of head_dim for K and the same
// for V, or with k_only one row of K only (MLA: the latent plus the rope key, 1 x (L + R)).
struct KvShape {
    int64_t n_kv_heads = 0;
    int64_t head_dim = 0;
    bool k_only = false;
};

// Multi-token-prediction ("nextn") layers that DeepSeek-V3 / Kimi-K2 and GLM-4.5 checkpoints
// append after the decoder layers (num_nextn_predict_layers; model/mtp.h). The forward pass never
// runs them; `--spec mtp` loads the first one as a draft (load_mtp_model).
struct NextnConfig {
    int64_t n_layers = 0;  // 0: none
    bool sparse = false;   // the first one's FFN is MoE (its index is past first_k_dense_replace)
};

struct ModelConfig {
    Arch arch = Arch::Llama;
    std::string arch_name;  // "llama", "qwen2", "qwen3"
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
    int64_t rope_dim = 0;              // rotated dims per head (== head_dim for these archs)
    float rope_linear_factor = 1.0f;   // positions are divided by it ("linear" scaling)
    std::vector<float> rope_inv_freq;  // [rope_dim / 2], llama3 / yarn scaling already applied
    // YaRN: cos and sin are multiplied by this (transformers' attention_scaling); 1 otherwise.
    float rope_attn_factor = 1.0f;
    // Multiplies the softmax scale 1/sqrt(head_dim) (DeepSeek-V3 yarn: mscale(factor,
    // mscale_all_dim)^2); 1 otherwise.
    float attn_scale_factor = 1.0f;
    bool tied_embeddings = false;
    bool qkv_bias = false;
    bool qk_norm = false;
    MoeConfig moe;
    MlaConfig mla;
    NextnConfig nextn;

    KvShape kv_shape() const {
        if (mla.enabled()) return {1, mla.kv_lora_rank + rope_dim, true};
        return {n_kv_heads, head_dim, false};
    }

    // Throws util::Error when the shape parameters are inconsistent.
    void validate() const;
};

ModelConfig config_from_gguf(const formats::GGUFFile& gguf);
ModelConfig config_from_hf_json(const nlohmann::json& config, const std::string& path);

// inv_freq[i] = theta^(-2i/dim), optionally adjusted by Llama 3's frequency-dependent scaling.
std::vector<float> rope_inv_freq(int64_t rope_dim, float theta);
void apply_llama3_rope_scaling(std::vector<float>& inv_freq, float factor, float low_freq_factor,
                               float high_freq_factor, float original_max_pos);

// YaRN (transformers' _compute_yarn_parameters): frequencies whose wavelength exceeds the
// original context are interpolated (divided by factor), fast ones kept, a linear ramp between
// the correction dims of beta_fast and beta_slow rotations. rope_dim is the rotated width.
struct YarnParams {
    double factor = 1.0;
    double original_max_pos = 0.0;
    double beta_fast = 32.0;
    double beta_slow = 1.0;
    bool truncate = true;
};
void apply_yarn_rope_scaling(std::vector<float>& inv_freq, int64_t rope_dim, double theta,
                             const YarnParams& p);
// yarn_get_mscale: 1 for scale <= 1, else 0.1 * mscale * ln(scale) + 1.
double yarn_mscale(double scale, double mscale);

}  // namespace warden::model
