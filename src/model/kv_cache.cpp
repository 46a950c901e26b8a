#include "model/kv_cache.h"

#include "util/error.h"

namespace warden::model {

ContiguousKvCache::ContiguousKvCache(const ModelConfig& c, int64_t max_ctx, tensor::KvType type) {
    util::check(max_ctx > 0, "KV cache needs a positive context length");
    storage_.type = type;
    storage_.page_size = max_ctx;
    storage_.n_layers = c.n_layers;
    const KvShape shape = c.kv_shape();  // MLA: one latent + rope-key row per token, no V
    storage_.n_kv_heads = shape.n_kv_heads;
    storage_.head_dim = shape.head_dim;
    storage_.k_only = shape.k_only;
    buf_.assign(static_cast<size_t>(storage_.bytes_per_page()), 0);
    storage_.base = buf_.data();
    storage_.page_stride = storage_.bytes_per_page();
}

}  // namespace warden::model
