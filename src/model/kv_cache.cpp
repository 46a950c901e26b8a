#include "model/kv_cache.h"

#include <cstring>

#include "kernels/ops.h"
#include "util/error.h"

namespace warden::model {

ContiguousKvCache::ContiguousKvCache(const ModelConfig& c, int64_t max_ctx, kernels::KvType type)
    : n_layers_(c.n_layers), n_kv_heads_(c.n_kv_heads), head_dim_(c.head_dim), max_ctx_(max_ctx),
      type_(type) {
    util::check(max_ctx > 0, "KV cache needs a positive context length");
    const auto elems = static_cast<size_t>(n_layers_ * max_ctx_ * n_kv_heads_ * head_dim_);
    const size_t esz = type == kernels::KvType::BF16 ? 2 : 4;
    k_.assign(elems * esz, 0);
    v_.assign(elems * esz, 0);
}

int64_t ContiguousKvCache::bytes() const { return static_cast<int64_t>(k_.size() + v_.size()); }

void ContiguousKvCache::write(int64_t layer, int64_t pos, int64_t n, const float* k, const float* v) {
    util::check(pos >= 0 && pos + n <= max_ctx_, "KV cache overflow");
    const int64_t row = n_kv_heads_ * head_dim_;
    const int64_t off = (layer * max_ctx_ + pos) * row;
    if (type_ == kernels::KvType::BF16) {
        auto* kd = reinterpret_cast<uint16_t*>(k_.data()) + off;
        auto* vd = reinterpret_cast<uint16_t*>(v_.data()) + off;
        kernels::f32_to_bf16_row(k, kd, n * row);
        kernels::f32_to_bf16_row(v, vd, n * row);
    } else {
        std::memcpy(reinterpret_cast<float*>(k_.data()) + off, k, static_cast<size_t>(n * row) * 4);
        std::memcpy(reinterpret_cast<float*>(v_.data()) + off, v, static_cast<size_t>(n * row) * 4);
    }
}

kernels::KvView ContiguousKvCache::view(int64_t layer) const {
    const size_t esz = type_ == kernels::KvType::BF16 ? 2 : 4;
    const size_t off = static_cast<size_t>(layer * max_ctx_ * n_kv_heads_ * head_dim_) * esz;
    return {type_, k_.data() + off, v_.data() + off, n_kv_heads_, head_dim_};
}

}  // namespace warden::model
