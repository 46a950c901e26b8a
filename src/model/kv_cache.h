#pragma once
// Contiguous single-sequence KV cache: one "page" as long as the context. It is the reference
// layout the paged pool (kv/) must reproduce, and what `warden run`/`logits` use.
#include <cstdint>
#include <vector>

#include "kernels/paged_attention.h"
#include "model/model_config.h"

namespace warden::model {

class ContiguousKvCache {
  public:
    ContiguousKvCache(const ModelConfig& c, int64_t max_ctx, tensor::KvType type);

    int64_t capacity() const { return storage_.page_size; }
    int64_t n_tokens() const { return n_tokens_; }
    void set_n_tokens(int64_t n) { n_tokens_ = n; }
    tensor::KvType type() const { return storage_.type; }
    int64_t bytes() const { return static_cast<int64_t>(buf_.size()); }
    const kernels::PagedKvStorage& storage() const { return storage_; }
    const int32_t* page_ids() const { return &page_id_; }

  private:
    int64_t n_tokens_ = 0;
    std::vector<uint8_t> buf_;  // [n_layers][K|V][max_ctx][n_kv_heads][head_dim]
    kernels::PagedKvStorage storage_;
    int32_t page_id_ = 0;
};

}  // namespace warden::model
