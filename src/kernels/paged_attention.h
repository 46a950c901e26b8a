#pragma once
// Causal GQA attention for a batch of sequences whose K/V live in fixed-size pages. Each
// sequence brings its queries, its starting position and its page table (page ids in order);
// position j of a sequence lives in page page_ids[j / page_size], slot j % page_size.
// A contiguous cache is the special case of one page as long as the context.
#include <cstdint>
#include <span>

#include "kernels/attention.h"
#include "util/thread_pool.h"

namespace warden::kernels {

// Where one layer's K and V sit inside the page storage.
struct PagedKvLayer {
    KvType type = KvType::BF16;
    uint8_t* base = nullptr;        // page 0's first byte
    int64_t page_stride = 0;        // bytes from one page to the next
    int64_t k_offset = 0;           // bytes from a page's start to this layer's K block
    int64_t v_offset = 0;           // ... and V block; each block is [page_size, n_kv_heads, head_dim]
    int64_t page_size = 0;
    int64_t n_kv_heads = 0;
    int64_t head_dim = 0;
};

// The whole KV storage: page p holds, for every layer l, a K block then a V block, each
// [page_size, n_kv_heads, head_dim] of `type`.
struct PagedKvStorage {
    KvType type = KvType::BF16;
    uint8_t* base = nullptr;
    int64_t page_stride = 0;
    int64_t page_size = 0;
    int64_t n_layers = 0;
    int64_t n_kv_heads = 0;
    int64_t head_dim = 0;

    int64_t block_bytes() const { return page_size * n_kv_heads * head_dim * (type == KvType::BF16 ? 2 : 4); }
    int64_t bytes_per_page() const { return 2 * n_layers * block_bytes(); }
    PagedKvLayer layer(int64_t l) const {
        return {type, base, page_stride, 2 * l * block_bytes(), (2 * l + 1) * block_bytes(), page_size, n_kv_heads, head_dim};
    }
};

// Stores K/V of positions [pos0, pos0 + n) (k, v: [n, n_kv_heads * head_dim] f32) into their
// pages, converting to the storage type.
void write_kv(const PagedKvLayer& kv, const int32_t* page_ids, int64_t pos0, int64_t n, const float* k,
              const float* v);

struct PagedAttentionSeq {
    const float* q = nullptr;         // [n_q, n_heads, head_dim]
    float* out = nullptr;             // [n_q, n_heads, head_dim]
    int64_t n_q = 0;
    int64_t pos0 = 0;                 // query t is at position pos0 + t and sees [0, pos0 + t]
    const int32_t* page_ids = nullptr;  // covers positions [0, pos0 + n_q)
};

void paged_attention(std::span<const PagedAttentionSeq> seqs, int64_t n_heads, const PagedKvLayer& kv,
                     float scale, util::ThreadPool& pool);

}  // namespace warden::kernels
