#pragma once
// Causal multi-head latent attention (DeepSeek-V2/V3, Kimi K2) over a paged cache that holds, per
// token and layer, ONLY the compressed KV latent c (kv_lora_rank = L values, after
// kv_a_layernorm) and the rope-rotated shared key k_rope (R values): one K row of L + R values,
// no V block (PagedKvStorage::k_only, n_kv_heads 1, head_dim L + R).
//
// Attention is computed in the absorbed form: the caller folds each head's key up-projection
// into its query (q_lat_h = W_kb_h^T q_nope_h), so that
//     score(t, s) = scale * ([q_lat_h, q_rope_h] . [c_s, k_rope_s])
//     out_h(t)    = sum_s softmax(score)(t, s) * c_s            (L values per head)
// and multiplies out_h by the value up-projection W_vb_h afterwards. The cache is read once per
// step and shared by all heads (MQA over the latent).
#include <cstdint>
#include <span>

#include "kernels/paged_attention.h"
#include "util/thread_pool.h"

namespace warden::kernels {

struct MlaAttentionSeq {
    const float* q = nullptr;  // [n_q, n_heads, L + R] absorbed query and rope query
    float* out = nullptr;      // [n_q, n_heads, L] attention-weighted latent
    int64_t n_q = 0;
    int64_t pos0 = 0;                   // query t is at position pos0 + t and sees [0, pos0 + t]
    const int32_t* page_ids = nullptr;  // covers positions [0, pos0 + n_q)
    const float* kv_new = nullptr;      // [n_q, L + R] this step's rows (f32), or nullptr
    FreshKv fresh = FreshKv::None;      // as in paged_attention; ignored without kv_new
};

// kv: a k_only layer with n_kv_heads == 1 and head_dim == latent_dim + rope dims, any KvType
// (rows are dequantized with read_kv_row). Throws util::Error on an inconsistent geometry.
void mla_attention(std::span<const MlaAttentionSeq> seqs, int64_t n_heads, int64_t latent_dim,
                   const PagedKvLayer& kv, float scale, util::ThreadPool& pool);

// Unpaged reference for tests: keys[s] = [c_s, k_rope_s] rows ([n_ctx, L + R]), query t at
// position pos0 + t sees keys [0, pos0 + t]. Plain loops in double.
void mla_attention_reference(const float* q, float* out, int64_t n_q, int64_t pos0,
                             const float* keys, int64_t n_heads, int64_t latent_dim,
                             int64_t row_dim, float scale);

}  // namespace warden::kernels
