#pragma once
// The forward pass of a dense llama/qwen2/qwen3 decoder over a batch of sequences. Linear
// layers run on all tokens of the step at once; attention runs per sequence through its page
// table. Each token row is computed independently of the others in the batch (the kernels are
// batch-invariant), so a sequence's outputs do not depend on who it is batched with.
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "kernels/paged_attention.h"
#include "model/activation_observer.h"
#include "model/kv_cache.h"
#include "model/mla.h"
#include "model/model.h"
#include "model/moe.h"
#include "util/thread_pool.h"

namespace warden::model {

// One sequence's share of a step.
struct SeqInput {
    std::span<const int32_t> tokens;    // new tokens, at positions [pos0, pos0 + n)
    int64_t pos0 = 0;                   // tokens already in this sequence's KV
    const int32_t* page_ids = nullptr;  // page table covering [0, pos0 + n)
    float* logits = nullptr;            // nullptr: none; else [n, vocab] (all_logits) or [vocab]
    bool all_logits = false;
    // Rows computed with the runtime matrices even when there are several (speculative
    // verification: each row must equal a one-token decode step bit for bit).
    bool decode_rows = false;
    // An MTP draft model (ModelWeights::mtp_in) combines each row's token with a hidden state:
    // [n, d_model], required there and ignored elsewhere.
    const float* hidden_in = nullptr;
    // nullptr: none; else [n, d_model], every row's final hidden state: for a model the input of
    // its head (after the final norm; what an MTP layer reads), for an MTP draft model its block
    // output before shared_head.norm (what the next chained MTP step reads).
    float* hidden_out = nullptr;
};

// Called before layer `layer` reads or writes sequence `seq`'s KV (--kv-integrity=layer).
// Returning false drops the sequence from the rest of the step: no KV writes, no logits.
using LayerCheck = std::function<bool(size_t seq, int64_t layer)>;

class Transformer {
  public:
    Transformer(const Model& model, util::ThreadPool& pool);

    // Runs one step. Returns, per sequence, whether it completed (false: dropped by check).
    std::vector<char> step(std::span<const SeqInput> seqs, const kernels::PagedKvStorage& kv,
                           const LayerCheck* check = nullptr);

    // Single-sequence convenience on a contiguous cache: runs tokens at positions
    // [cache.n_tokens(), +n) in chunks of kMaxChunk, writes the last token's logits ([vocab])
    // or every token's ([n, vocab]) when all_logits. Without all_logits, logits may be null: the
    // KV cache is filled and no head is computed.
    void forward(const int32_t* tokens, int64_t n, ContiguousKvCache& cache, float* logits,
                 bool all_logits);

    const Model& model() const { return model_; }
    // Every layer matrix's input rows go to `o` before it is multiplied (null: none; the default).
    void set_observer(ActivationObserver* o) {
        observer_ = o;
        moe_.observer = o;
        mla_.observer = o;
    }
    static constexpr int64_t kMaxChunk = 256;

  private:
    void ensure_scratch(int64_t n);
    void mtp_input(std::span<const SeqInput> seqs, std::span<const int64_t> row0);
    // cos/sin of every rotated pair at each row's position, computed once per step and used
    // for both q and k.
    void rope_tables(std::span<const int64_t> positions);
    void rope(float* x, int64_t n_rows, int64_t n_heads) const;

    const Model& model_;
    util::ThreadPool& pool_;
    int64_t scratch_n_ = 0;
    std::vector<float> x_;        // [n, d_model] residual stream
    std::vector<float> xb_;       // [n, d_model] normed input
    std::vector<float> q_;        // [n, n_heads * head_dim]
    std::vector<float> k_;        // [n, n_kv_heads * head_dim]
    std::vector<float> v_;        // [n, n_kv_heads * head_dim]
    std::vector<float> att_;      // [n, n_heads * head_dim]
    std::vector<float> proj_;     // [n, d_model]
    std::vector<float> gate_;     // [n, d_ff]
    std::vector<float> up_;       // [n, d_ff]
    std::vector<int64_t> pos_;    // [n] absolute position of each row
    std::vector<float> rope_cs_;  // [n, rope_dim / 2, 2] cos, sin
    std::vector<float> eh_;       // [n, 2 * d_model] MTP input rows before eh_proj
    MoeFfn moe_;                  // MoE FFN scratch (layers with LayerWeights::moe)
    MlaAttention mla_;            // latent attention scratch (layers with LayerWeights::mla)
    ActivationObserver* observer_ = nullptr;
};

}  // namespace warden::model
