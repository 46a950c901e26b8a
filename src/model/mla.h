#pragma once
// Multi-head latent attention for DeepSeek-V3-family layers (transformers' DeepseekV3Attention):
//   q      = q_b(rmsnorm(q_a(x)))  or  q_proj(x)              [n_heads, nope + rope]
//   kv_a   = kv_a_proj_with_mqa(x) = [c (kv_lora_rank), k_rope (rope)]
//   c      = rmsnorm(c) (kv_a_layernorm);  k_rope, q_rope: RoPE (adjacent pairs with
//            rope_interleave -- transformers de-interleaves both q and k before rotate_half,
//            which leaves every q.k product unchanged)
//   k_h    = [W_kb_h c, k_rope],  v_h = W_vb_h c   (kv_b_proj split per head)
// The paged cache stores only [c, k_rope] per token and layer (kernels/mla_attention.h): that is
// kv_lora_rank + rope values instead of n_heads * (nope + rope + v) for the equivalent MHA cache.
// Attention runs in the absorbed form (q_lat_h = W_kb_h^T q_nope_h; out_h = W_vb_h (sum p c)),
// so keys and values are never up-projected per cached token.
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kernels/matmul.h"
#include "kernels/mla_attention.h"
#include "model/activation_observer.h"
#include "model/model_config.h"
#include "model/moe.h"
#include "model/weights.h"
#include "util/thread_pool.h"

namespace warden::model {

// transformers hard-codes eps 1e-6 for q_a_layernorm and kv_a_layernorm (DeepseekV3RMSNorm's
// default), whatever rms_norm_eps says.
constexpr float kMlaNormEps = 1e-6f;

// One sequence's rows in the step.
struct MlaSeq {
    int64_t row0 = 0;  // first row of the step's [n, ...] buffers
    int64_t n = 0;     // rows (new tokens)
    int64_t pos0 = 0;  // tokens already cached
    const int32_t* page_ids = nullptr;
    bool alive = true;  // false: no KV write, zero output
};

class MlaAttention {
  public:
    // out[n, d_model] = o_proj(attention) for x[n, d_model] (attention-normed hidden states).
    // rope_cs: [n, rope / 2, 2] cos, sin at each row's position (Transformer::rope_tables).
    void forward(const ModelConfig& c, const MlaWeights& w, const float* x, int64_t n,
                 const float* rope_cs, std::span<const MlaSeq> seqs,
                 const kernels::PagedKvLayer& kv, kernels::FreshKv fresh, float* out,
                 util::ThreadPool& pool);

    // Sees the q / q_a / q_b / kv_a / o inputs (model/activation_observer.h).
    ActivationObserver* observer = nullptr;

  private:
    std::vector<float> qa_, q_, kv_, qabs_, lat_, tmp_, tmp2_, att_;
    std::vector<kernels::MatmulOut> outs_;
    std::vector<kernels::MatmulGroup> groups_;
    // out_h [n, out_width] = w[h] in_h for every head h, in one kernels::matmul_grouped call;
    // in and out are head-major ([H, n, width]).
    void per_head_matmuls(const std::vector<Matrix>& w, const float* in, int64_t in_width,
                          int64_t n, float* out, int64_t out_width, util::ThreadPool& pool);
};

// KV cache bytes per token for the config's cache layout: layers * (kv_lora_rank + rope) * elem
// for MLA, layers * 2 * n_kv_heads * head_dim * elem otherwise.
int64_t kv_bytes_per_token(const ModelConfig& c, int64_t elem_bytes);
// What a plain (GQA/MHA) cache of the same attention would hold: layers * n_kv_heads *
// (qk head_dim + v_dim) * elem -- for MLA the per-head keys and values transformers caches.
int64_t kv_bytes_per_token_uncompressed(const ModelConfig& c, int64_t elem_bytes);

std::unique_ptr<MlaWeights> load_mla_weights(const ModelConfig& c, const MoeTensorLoader& load);

}  // namespace warden::model
