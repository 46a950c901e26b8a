#pragma once
// KV pages in another server's format (prefill/decode disaggregation): a decode server names
// the format its pool stores (KvWireFormat: KV type, scale layout, page size) and the model
// whose KV it holds; a prefill server whose own pool differs rewrites the prompt's positions
// into that format (convert_kv_pages) before they travel, so the decode server receives
// exactly the bytes its own write_kv would have stored for the same K/V values.
//
// What can convert: any KV type, scale layout or page size. What cannot: another model or
// attention shape (layers, KV heads, head size, MLA latent layout); check_wire_format says
// which, in words.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "kv/kv_cache.h"

namespace warden::kv {

// The model whose KV a page holds, independent of its storage format and of the weight
// format that computed it: the checkpoint's identity (model_id) and the attention shape.
uint64_t kv_model_fingerprint(const KvCacheConfig& c, std::string_view model_id);

struct KvWireFormat {
    uint32_t type = 0;    // tensor::KvType
    uint32_t scales = 0;  // kernels::KvScales
    float tensor_scale = 1.0f;
    int32_t page_size = 0;
    uint64_t page_bytes = 0;  // what the receiver allocated per page (cross-check)
    uint64_t model = 0;       // kv_model_fingerprint of the receiver
};
KvWireFormat kv_wire_format(const KvCacheConfig& c, std::string_view model_id);

// The receiver's config as seen by a sender holding `own` (same model): own's shape with the
// wire's storage format. Sets *error (and returns nullopt) when the model differs or the format
// is not one this build can store.
std::optional<KvCacheConfig> check_wire_format(const KvCacheConfig& own, std::string_view model_id,
                                               const KvWireFormat& w, std::string* error);

// Same bytes per position: no conversion needed.
bool same_storage_format(const KvCacheConfig& a, const KvCacheConfig& b);

// Rewrites positions [0, n_tokens) held in `pages` of `src` into dst.pages_for(n_tokens)
// consecutive pages of layout `dst` starting at dst_base: each stored (token, head) row is read
// back as f32 and stored again by write_kv (dst's rounding and per-(token, head) scales).
// Bytes of dst pages past n_tokens are zero.
void convert_kv_pages(const KvCache& src, std::span<const PageRef> pages, int64_t n_tokens,
                      const KvCacheConfig& dst, uint8_t* dst_base);

}  // namespace warden::kv
