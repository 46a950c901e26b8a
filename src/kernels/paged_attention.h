#pragma once
// Causal GQA attention for a batch of sequences whose K/V live in fixed-size pages. Each
// sequence brings its queries, its starting position and its page table (page ids in order);
// position j of a sequence lives in page page_ids[j / page_size], slot j % page_size.
// A contiguous cache is the special case of one page as long as the context.
//
// Storage formats (KvType): f32, bf16, f16 hold values; fp8_e4m3, fp8_e5m2 and int8 hold one
// code per element and a bf16 scale per (token, kv head) right after the codes in the same
// page block (KvScales::TokenHead), or no stored scale and one fixed scale for the whole cache
// (KvScales::Tensor). value = decode(code) * scale. Quantization happens in write_kv (scalar,
// identical on every ISA); dequantization happens inside the attention kernels.
#include <cstdint>
#include <span>

#include "kernels/attention.h"
#include "util/thread_pool.h"

namespace warden::kernels {

enum class KvScales { TokenHead, Tensor };

// Which of a sequence's positions the attention reads at full precision from k_new/v_new
// instead of from the pages (where write_kv also put them):
//   None:  every position from the pages;
//   Self:  query t reads its own position pos0 + t from k_new/v_new (results do not depend on
//          how a prompt is chunked, so prefill logits equal decode logits and a sequence's
//          outputs do not depend on its batch mates or on the scheduler's chunking);
//   Chunk: query t reads all of [pos0, pos0 + t] (this step's chunk) from k_new/v_new; more
//          precise inside long prefill chunks, but outputs then depend on chunk boundaries.
enum class FreshKv { None, Self, Chunk };
inline const char* fresh_kv_name(FreshKv f) {
    return f == FreshKv::None ? "none" : f == FreshKv::Self ? "self" : "chunk";
}
inline const char* kv_scales_name(KvScales s) {
    return s == KvScales::TokenHead ? "token-head" : "tensor";
}

// Where one layer's K and V sit inside the page storage.
struct PagedKvLayer {
    KvType type = KvType::BF16;
    uint8_t* base = nullptr;  // page 0's first byte
    int64_t page_stride = 0;  // bytes from one page to the next
    int64_t k_offset = 0;     // bytes from a page's start to this layer's K values
    int64_t v_offset = 0;     // ... and V values; each [n_kv_heads, page_size, head_dim] of `type`
    int64_t page_size = 0;
    int64_t n_kv_heads = 0;
    int64_t head_dim = 0;
    KvScales scales = KvScales::TokenHead;
    int64_t k_scale_offset =
        0;  // bytes from a page's start to K's scales: [page_size, n_kv_heads] bf16
    int64_t v_scale_offset = 0;  //   (only for scaled types with TokenHead scales)
    float tensor_scale = 1.0f;   // the scale of every element with KvScales::Tensor

    bool has_scale_array() const { return kv_type_scaled(type) && scales == KvScales::TokenHead; }
};

// The whole KV storage: page p holds, for every layer l, a K block then a V block. A block is
// the values [n_kv_heads, page_size, head_dim] of `type` (a kv head's rows are one contiguous run,
// what the attention reads per head), then (scaled types with TokenHead
// scales) the scales [page_size, n_kv_heads] as bf16; each part is padded to 16 bytes.
struct PagedKvStorage {
    KvType type = KvType::BF16;
    uint8_t* base = nullptr;
    int64_t page_stride = 0;
    int64_t page_size = 0;
    int64_t n_layers = 0;
    int64_t n_kv_heads = 0;
    int64_t head_dim = 0;
    KvScales scales = KvScales::TokenHead;
    float tensor_scale = 1.0f;
    FreshKv fresh =
        FreshKv::Self;    // how the forward pass uses a step's own K/V (not a layout property)
    bool k_only = false;  // MLA: one block per layer (K = latent + rope key, n_kv_heads 1), no V
                          // block; layer(l).v_offset == k_offset (kernels/mla_attention.h)

    static int64_t pad16(int64_t b) { return (b + 15) / 16 * 16; }
    int64_t value_bytes() const {
        return pad16(page_size * n_kv_heads * head_dim * kv_elem_bytes(type));
    }
    int64_t scale_bytes() const {
        return kv_type_scaled(type) && scales == KvScales::TokenHead
                   ? pad16(page_size * n_kv_heads * 2)
                   : 0;
    }
    int64_t block_bytes() const { return value_bytes() + scale_bytes(); }
    int64_t blocks_per_layer() const { return k_only ? 1 : 2; }
    int64_t bytes_per_page() const { return blocks_per_layer() * n_layers * block_bytes(); }
    PagedKvLayer layer(int64_t l) const {
        const int64_t k = blocks_per_layer() * l * block_bytes(),
                      v = k_only ? k : k + block_bytes();
        return {type,
                base,
                page_stride,
                k,
                v,
                page_size,
                n_kv_heads,
                head_dim,
                scales,
                k + value_bytes(),
                v + value_bytes(),
                tensor_scale};
    }
};

// Stores K/V of positions [pos0, pos0 + n) (k, v: [n, n_kv_heads * head_dim] f32) into their
// pages, converting to the storage type: round to nearest even, saturating at the format's
// largest finite value, NaN stays NaN (int8: NaN -> 0). Scaled types with TokenHead scales
// pick, per (token, kv head), scale = amax / qmax rounded up to bf16 (amax over the finite
// values of that head's row; 0 for an all-zero row).
void write_kv(const PagedKvLayer& kv, const int32_t* page_ids, int64_t pos0, int64_t n,
              const float* k, const float* v);

struct PagedAttentionSeq {
    const float* q = nullptr;  // [n_q, n_heads, head_dim]
    float* out = nullptr;      // [n_q, n_heads, head_dim]
    int64_t n_q = 0;
    int64_t pos0 = 0;                   // query t is at position pos0 + t and sees [0, pos0 + t]
    const int32_t* page_ids = nullptr;  // covers positions [0, pos0 + n_q)
    const float* k_new = nullptr;   // [n_q, n_kv_heads * head_dim] this step's K (f32), or nullptr
    const float* v_new = nullptr;   // ... and V
    FreshKv fresh = FreshKv::None;  // ignored without k_new/v_new
};

void paged_attention(std::span<const PagedAttentionSeq> seqs, int64_t n_heads,
                     const PagedKvLayer& kv, float scale, util::ThreadPool& pool);

// Dequantizes one stored (token, kv head) row of head_dim values to f32 (tests, tools).
void read_kv_row(const PagedKvLayer& kv, const int32_t* page_ids, int64_t pos, int64_t kv_head,
                 bool value, float* out);

}  // namespace warden::kernels
