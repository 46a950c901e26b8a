#include "kv/kv_convert.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "kv/keyed_hash.h"
#include "kv/kv_handoff.h"

namespace warden::kv {

uint64_t kv_model_fingerprint(const KvCacheConfig& c, std::string_view model_id) {
    SipHasher h(HashKey{0x77617264656e6b76ULL, 0x6d6f64656c303031ULL});
    h.u64(static_cast<uint64_t>(c.n_layers));
    h.u64(static_cast<uint64_t>(c.n_kv_heads));
    h.u64(static_cast<uint64_t>(c.head_dim));
    h.u32(c.k_only ? 1 : 0);
    h.update(model_id.data(), model_id.size());
    return h.finish();
}

KvWireFormat kv_wire_format(const KvCacheConfig& c, std::string_view model_id) {
    KvWireFormat w;
    w.type = static_cast<uint32_t>(c.type);
    w.scales = static_cast<uint32_t>(c.scales);
    w.tensor_scale = c.tensor_scale;
    w.page_size = c.page_size;
    w.page_bytes = static_cast<uint64_t>(kv_page_bytes(c));
    w.model = kv_model_fingerprint(c, model_id);
    return w;
}

std::optional<KvCacheConfig> check_wire_format(const KvCacheConfig& own, std::string_view model_id,
                                               const KvWireFormat& w, std::string* error) {
    auto fail = [&](std::string why) -> std::optional<KvCacheConfig> {
        if (error) *error = std::move(why);
        return std::nullopt;
    };
    if (w.model != kv_model_fingerprint(own, model_id))
        return fail(
            "model mismatch: the decode server's KV is for another model or attention shape "
            "(checkpoint content, layers, KV heads or head size differ); run both roles on the "
            "same "
            "checkpoint");
    if (w.type > static_cast<uint32_t>(tensor::KvType::INT8) ||
        w.scales > static_cast<uint32_t>(kernels::KvScales::Tensor))
        return fail("unknown KV format requested (type " + std::to_string(w.type) + ", scales " +
                    std::to_string(w.scales) + ")");
    KvCacheConfig d = own;
    d.type = static_cast<tensor::KvType>(w.type);
    d.scales = static_cast<kernels::KvScales>(w.scales);
    d.tensor_scale = w.tensor_scale;
    d.page_size = w.page_size;
    if (w.page_size < 1 || w.page_size > 4096 || !std::isfinite(w.tensor_scale) ||
        w.tensor_scale <= 0.0f ||
        (d.type == tensor::KvType::INT8 && d.scales == kernels::KvScales::Tensor))
        return fail("KV format requested is not storable (page size " +
                    std::to_string(w.page_size) + ", " + kv_format_name(d) + ")");
    if (static_cast<uint64_t>(kv_page_bytes(d)) != w.page_bytes)
        return fail("KV page size mismatch: " + kv_format_name(d) + " pages are " +
                    std::to_string(kv_page_bytes(d)) + " bytes here, " +
                    std::to_string(w.page_bytes) + " on the decode server");
    return d;
}

bool same_storage_format(const KvCacheConfig& a, const KvCacheConfig& b) {
    // The same inputs as the layout fingerprint's format part.
    return kv_layout_fingerprint(a, "") == kv_layout_fingerprint(b, "");
}

void convert_kv_pages(const KvCache& src, std::span<const PageRef> pages, int64_t n_tokens,
                      const KvCacheConfig& dst, uint8_t* dst_base) {
    const kernels::PagedKvStorage& s = src.storage();
    kernels::PagedKvStorage d = kv_storage_layout(dst);
    d.base = dst_base;
    const int64_t dst_pages = (n_tokens + dst.page_size - 1) / dst.page_size;
    std::memset(dst_base, 0, static_cast<size_t>(dst_pages * d.bytes_per_page()));
    std::vector<int32_t> src_ids(pages.size()), dst_ids(static_cast<size_t>(dst_pages));
    for (size_t i = 0; i < pages.size(); ++i) src_ids[i] = pages[i].page.v;
    for (size_t i = 0; i < dst_ids.size(); ++i) dst_ids[i] = static_cast<int32_t>(i);
    const int64_t row = s.n_kv_heads * s.head_dim;
    std::vector<float> k(static_cast<size_t>(n_tokens * row)), v(k.size());
    for (int64_t l = 0; l < s.n_layers; ++l) {
        const kernels::PagedKvLayer sl = s.layer(l);
        for (int64_t t = 0; t < n_tokens; ++t)
            for (int64_t h = 0; h < s.n_kv_heads; ++h) {
                float* kr = k.data() + t * row + h * s.head_dim;
                kernels::read_kv_row(sl, src_ids.data(), t, h, false, kr);
                if (s.k_only)
                    std::memcpy(v.data() + t * row + h * s.head_dim, kr,
                                static_cast<size_t>(s.head_dim) * sizeof(float));
                else
                    kernels::read_kv_row(sl, src_ids.data(), t, h, true,
                                         v.data() + t * row + h * s.head_dim);
            }
        kernels::write_kv(d.layer(l), dst_ids.data(), 0, n_tokens, k.data(), v.data());
    }
}

}  // namespace warden::kv
