// Two passes per (sequence, query token, head) item, like attention.cpp, but walking the
// sequence's pages: scores over the visible prefix page by page, softmax, then the weighted
// sum of V page by page. The page walk costs one table lookup per page, not per position.
// Items of all sequences are dealt round-robin to the threads so ragged lengths balance.
#include "kernels/paged_attention.h"

#include <algorithm>
#include <vector>

#include "kernels/kernels_internal.h"
#include "util/error.h"

namespace warden::kernels {

namespace {

template <typename T, typename Dot, typename Axpy>
void attend_one(const PagedKvLayer& kv, const PagedAttentionSeq& s, int64_t t, int64_t g, const float* qh, float* oh,
                float scale, float* scores, const detail::OpsTable& ops, Dot dot, Axpy axpy) {
    const int64_t dim = kv.head_dim;
    const int64_t row = kv.n_kv_heads * dim;
    const int64_t n_ctx = s.pos0 + t + 1;
    const int64_t n_pages = (n_ctx + kv.page_size - 1) / kv.page_size;
    for (int64_t p = 0; p < n_pages; ++p) {
        const uint8_t* page = kv.base + static_cast<int64_t>(s.page_ids[p]) * kv.page_stride;
        const T* k = reinterpret_cast<const T*>(page + kv.k_offset) + g * dim;
        const int64_t j0 = p * kv.page_size, j1 = std::min(n_ctx, j0 + kv.page_size);
        for (int64_t j = j0; j < j1; ++j) scores[j] = scale * dot(qh, k + (j - j0) * row, dim);
    }
    ops.softmax(scores, n_ctx);
    std::fill(oh, oh + dim, 0.0f);
    for (int64_t p = 0; p < n_pages; ++p) {
        const uint8_t* page = kv.base + static_cast<int64_t>(s.page_ids[p]) * kv.page_stride;
        const T* v = reinterpret_cast<const T*>(page + kv.v_offset) + g * dim;
        const int64_t j0 = p * kv.page_size, j1 = std::min(n_ctx, j0 + kv.page_size);
        for (int64_t j = j0; j < j1; ++j) axpy(scores[j], v + (j - j0) * row, oh, dim);
    }
}

}  // namespace

void write_kv(const PagedKvLayer& kv, const int32_t* page_ids, int64_t pos0, int64_t n, const float* k,
              const float* v) {
    const int64_t row = kv.n_kv_heads * kv.head_dim;
    const detail::OpsTable& ops = detail::ops_table(active_isa());
    for (int64_t t = 0; t < n; ++t) {
        const int64_t pos = pos0 + t;
        uint8_t* page = kv.base + static_cast<int64_t>(page_ids[pos / kv.page_size]) * kv.page_stride;
        const int64_t slot = pos % kv.page_size;
        if (kv.type == KvType::BF16) {
            ops.f32_to_bf16_row(k + t * row, reinterpret_cast<detail::bf16*>(page + kv.k_offset) + slot * row, row);
            ops.f32_to_bf16_row(v + t * row, reinterpret_cast<detail::bf16*>(page + kv.v_offset) + slot * row, row);
        } else {
            std::copy(k + t * row, k + (t + 1) * row, reinterpret_cast<float*>(page + kv.k_offset) + slot * row);
            std::copy(v + t * row, v + (t + 1) * row, reinterpret_cast<float*>(page + kv.v_offset) + slot * row);
        }
    }
}

void paged_attention(std::span<const PagedAttentionSeq> seqs, int64_t n_heads, const PagedKvLayer& kv, float scale,
                     util::ThreadPool& pool) {
    util::check(kv.n_kv_heads > 0 && n_heads > 0 && n_heads % kv.n_kv_heads == 0,
                "paged attention: n_heads must be a positive multiple of n_kv_heads");
    util::check(kv.head_dim > 0 && kv.page_size > 0, "paged attention: bad head dim or page size");
    const int64_t dim = kv.head_dim;
    const int64_t group = n_heads / kv.n_kv_heads;
    // Item ranges per sequence: items [first[i], first[i+1]) belong to sequence i.
    std::vector<int64_t> first(seqs.size() + 1, 0);
    int64_t max_ctx = 0;
    for (size_t i = 0; i < seqs.size(); ++i) {
        util::check(seqs[i].n_q >= 0 && seqs[i].pos0 >= 0, "paged attention: negative length");
        first[i + 1] = first[i] + seqs[i].n_q * n_heads;
        max_ctx = std::max(max_ctx, seqs[i].pos0 + seqs[i].n_q);
    }
    const int64_t total = first.back();
    if (total == 0) return;
    const detail::OpsTable& ops = detail::ops_table(active_isa());

    pool.run([&](int tid, int nt) {
        thread_local std::vector<float> scores;
        if (static_cast<int64_t>(scores.size()) < max_ctx) scores.resize(static_cast<size_t>(max_ctx));
        size_t si = 0;
        for (int64_t item = tid; item < total; item += nt) {
            while (item >= first[si + 1]) ++si;
            const PagedAttentionSeq& s = seqs[si];
            const int64_t local = item - first[si];
            const int64_t t = local / n_heads, h = local % n_heads, g = h / group;
            const float* qh = s.q + local * dim;
            float* oh = s.out + local * dim;
            if (kv.type == KvType::BF16) {
                attend_one<detail::bf16>(kv, s, t, g, qh, oh, scale, scores.data(), ops, ops.dot_bf16, ops.axpy_bf16);
            } else {
                attend_one<float>(kv, s, t, g, qh, oh, scale, scores.data(), ops, ops.dot_f32, ops.axpy_f32);
            }
        }
    });
}

}  // namespace warden::kernels
