#pragma once
// The paged KV cache: a PagePool sized from a byte budget whose page storage holds, per page,
// every layer's K and V blocks, plus the per-sequence operations the scheduler needs
// (grow a sequence's table, free it, verify it). Single-threaded: the scheduler owns it.
#include <cstdint>
#include <optional>
#include <string>

#include "kernels/paged_attention.h"
#include "kv/page_pool.h"
#include "kv/page_table.h"

namespace warden::kv {

struct KvCacheConfig {
    int64_t n_layers = 0;
    int64_t n_kv_heads = 0;
    int64_t head_dim = 0;
    tensor::KvType type = tensor::KvType::BF16;
    int32_t page_size = 16;
    int64_t budget_bytes = 0;  // page storage budget; the page count is derived from it
    bool scrub_on_free = false;
    kernels::KvScales scales = kernels::KvScales::TokenHead;  // scaled types only
    float tensor_scale = 1.0f;                                // with KvScales::Tensor
    kernels::FreshKv fresh = kernels::FreshKv::Self;
    bool k_only = false;  // MLA: per layer one K block (latent + rope key), no V block

    // A model's KV geometry; budget_bytes (and scrub_on_free) are set by the caller.
    static KvCacheConfig shaped(int64_t n_layers, int64_t n_kv_heads, int64_t head_dim,
                                tensor::KvType type, int32_t page_size) {
        KvCacheConfig c;
        c.n_layers = n_layers;
        c.n_kv_heads = n_kv_heads;
        c.head_dim = head_dim;
        c.type = type;
        c.page_size = page_size;
        return c;
    }
};

// Bytes of one page under this config: every layer's K and V blocks.
int64_t kv_page_bytes(const KvCacheConfig& c);
// The page layout of this config (base unset): where each layer's blocks and scales lie.
kernels::PagedKvStorage kv_storage_layout(const KvCacheConfig& c);
// The budget that holds exactly `tokens` tokens in whole pages (plus the reserved null page).
int64_t kv_budget_for_tokens(const KvCacheConfig& c, int64_t tokens);
// Tokens that c.budget_bytes holds (whole pages, minus the reserved null page); 0 if none.
int64_t kv_tokens_for_budget(const KvCacheConfig& c);
// "bf16", "fp8_e4m3 (token-head scales)", "fp8_e4m3 (tensor scale 1)": for logs and `info`.
std::string kv_format_name(const KvCacheConfig& c);

class KvCache {
  public:
    explicit KvCache(const KvCacheConfig& cfg);  // throws util::Error if not even one page fits

    const KvCacheConfig& config() const { return cfg_; }
    PagePool& pool() { return pool_; }
    const PagePool& pool() const { return pool_; }
    const kernels::PagedKvStorage& storage() const { return storage_; }
    int32_t page_size() const { return pool_.page_size(); }
    int64_t bytes_per_page() const { return storage_.bytes_per_page(); }
    int64_t capacity_tokens() const {
        return static_cast<int64_t>(pool_.capacity()) * pool_.page_size();
    }
    int64_t pages_for(int64_t n_tokens) const { return (n_tokens + page_size() - 1) / page_size(); }

    // Grows `table` so it covers n_tokens positions. All or nothing: returns false (and
    // allocates nothing) when the free pages do not suffice.
    bool reserve(PageTable& table, int64_t n_tokens);
    // Releases every page of the table and clears it. Returns how many releases the pool
    // refused (stale entries: the page was already freed by someone else).
    int64_t free(PageTable& table);
    std::optional<IntegrityViolation> verify(SeqId seq, const PageTable& table) const {
        return verify_table(pool_, seq, table.pages);
    }

  private:
    KvCacheConfig cfg_;
    kernels::PagedKvStorage storage_;
    PagePool pool_;
};

}  // namespace warden::kv
