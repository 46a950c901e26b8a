#include "kv/kv_cache.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "util/error.h"

namespace warden::kv {

kernels::PagedKvStorage kv_storage_layout(const KvCacheConfig& c) {
    kernels::PagedKvStorage s;
    s.type = c.type;
    s.page_size = c.page_size;
    s.n_layers = c.n_layers;
    s.n_kv_heads = c.n_kv_heads;
    s.head_dim = c.head_dim;
    s.scales = c.scales;
    s.tensor_scale = c.tensor_scale;
    s.fresh = c.fresh;
    s.k_only = c.k_only;
    s.page_stride = s.bytes_per_page();
    return s;
}

namespace {
kernels::PagedKvStorage layout(const KvCacheConfig& c) {
    return kv_storage_layout(c);
}

int32_t page_count(const KvCacheConfig& c) {
    util::check(c.page_size > 0 && c.page_size <= 4096, "--kv-page-size must be in [1, 4096]");
    util::check(!(c.type == tensor::KvType::INT8 && c.scales == kernels::KvScales::Tensor),
                "--kv-dtype int8 needs --kv-scales=token-head (a per-tensor int8 scale would need "
                "calibration)");
    util::check(std::isfinite(c.tensor_scale) && c.tensor_scale > 0.0f,
                "KV tensor scale must be positive");
    const int64_t per_page = layout(c).bytes_per_page();
    util::check(per_page > 0, "KV cache: empty page layout");
    const int64_t n = c.budget_bytes / per_page - 1;  // one page is the reserved null page
    util::check(n >= 1, "KV budget of " + std::to_string(c.budget_bytes) +
                            " bytes holds no page of " + std::to_string(per_page) + " bytes");
    util::check(n <= (int64_t{1} << 30), "KV budget is too large");
    return static_cast<int32_t>(n);
}
}  // namespace

int64_t kv_page_bytes(const KvCacheConfig& c) {
    return layout(c).bytes_per_page();
}

int64_t kv_budget_for_tokens(const KvCacheConfig& c, int64_t tokens) {
    return ((tokens + c.page_size - 1) / c.page_size + 1) * kv_page_bytes(c);
}

int64_t kv_tokens_for_budget(const KvCacheConfig& c) {
    const int64_t per_page = kv_page_bytes(c);
    if (per_page <= 0) return 0;
    return std::max<int64_t>(0, c.budget_bytes / per_page - 1) * c.page_size;
}

std::string kv_format_name(const KvCacheConfig& c) {
    std::string s = tensor::kv_type_name(c.type);
    if (tensor::kv_type_scaled(c.type)) {
        if (c.scales == kernels::KvScales::TokenHead) {
            s += " (bf16 scale per token and kv head)";
        } else {
            char buf[64];
            std::snprintf(buf, sizeof buf, " (tensor scale %g)",
                          static_cast<double>(c.tensor_scale));
            s += buf;
        }
    }
    return s;
}

KvCache::KvCache(const KvCacheConfig& cfg)
    : cfg_(cfg),
      storage_(layout(cfg)),
      pool_(page_count(cfg), cfg.page_size, layout(cfg).bytes_per_page(), cfg.scrub_on_free) {
    storage_.base = pool_.data(kNullPage);
}

bool KvCache::reserve(PageTable& table, int64_t n_tokens) {
    const int64_t need = pages_for(n_tokens) - static_cast<int64_t>(table.pages.size());
    if (need <= 0) return true;
    if (need > pool_.free_pages()) return false;
    for (int64_t i = 0; i < need; ++i) table.pages.push_back(*pool_.allocate());
    return true;
}

int64_t KvCache::free(PageTable& table) {
    int64_t refused = 0;
    for (const PageRef& r : table.pages) refused += pool_.release(r) != PoolStatus::Ok;
    table.pages.clear();
    table.n_tokens = 0;
    return refused;
}

}  // namespace warden::kv
