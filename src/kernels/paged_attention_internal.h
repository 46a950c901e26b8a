#pragma once
// Per-ISA kernels of the paged attention read path, one set per KV storage format. Same ODR
// rule as kernels_internal.h: the *_avx2.cpp file includes only <immintrin.h>, this header
// and tensor/fp8.h (out-of-line functions only).
#include <cstdint>

#include "kernels/kernels_internal.h"

namespace warden::kernels::detail {

// Indexes of KvType (attention.h), checked by static_asserts in paged_attention.cpp.
inline constexpr int kKvTypes = 6;

struct KvReadKernels {
    // scores[j] = mult[j] * dot(q, decode(row_j)) for j in [0, n); row_j starts at
    // rows + j * stride (bytes) and holds dim elements.
    void (*scores)(const float* q, const uint8_t* rows, int64_t stride, int64_t n, int64_t dim,
                   const float* mult, float* scores);
    // out[d] += sum_j w[j] * decode(row_j)[d], j = 0..n-1 in order, for d in [0, dim).
    void (*accum)(const float* w, const uint8_t* rows, int64_t stride, int64_t n, int64_t dim,
                  float* out);
    // out[d] = decode(row)[d] (unscaled); exact, the same bits on every ISA (NaN stays NaN).
    void (*dequant)(const uint8_t* row, int64_t dim, float* out);
};

// Whole-group kernels for one page's run of rows of one kv head (rows contiguous, `dim` codes
// apart): each code is widened in registers once for all n_h query heads of the group, with no
// f32 scratch between decoding and use. Each returns false, having written nothing, when it
// cannot give exactly the bits of `dequant` followed by the F32 entry's `scores` / `accum` of the
// same table (an unsupported head dim, a NaN code in the rows, a query or weight too large for
// the scaling it uses); the caller then takes that path. Null where a table has none.
struct KvGroupKernels {
    // Once per query group: the n_h queries (dim floats each, contiguous) as `scores` takes them,
    // into qs (n_h * dim floats). False when `scores` cannot take these queries at all.
    bool (*prepare)(const float* q, int64_t n_h, int64_t dim, float* qs);
    // s[h * s_stride + j] = mult[j] * dot(q_h, decode(row_j)) for h < n_h, j < n, where qs holds
    // prepare's form of the queries q_h.
    bool (*scores)(const float* qs, int64_t n_h, const uint8_t* rows, int64_t n, int64_t dim,
                   const float* mult, float* s, int64_t s_stride);
    // out_h[d] += sum_j w_h[j] * decode(row_j)[d], j in order; w_h = w + h * w_stride,
    // out_h = out + h * o_stride.
    bool (*accum)(const float* w, int64_t w_stride, int64_t n_h, const uint8_t* rows, int64_t n,
                  int64_t dim, float* out, int64_t o_stride);
};

// At most kGroupHeads query heads of a group share one widening of a row in the whole-group
// kernels (their accumulators fill the registers); more take turns.
inline constexpr int kGroupHeads = 3;

// Calls f.template operator()<HC>(h0) for heads [h0, h0 + HC) of n_h, in groups of kMax (at
// most 3) that share one widening of each row, the last group smaller. Each kernel file passes
// its own lambda, so every instantiation is that file's alone (built with its -m flags).
template <int kMax, class F>
inline void by_head_groups(int64_t n_h, F&& f) {
    static_assert(kMax >= 1 && kMax <= 3);
    for (int64_t h0 = 0; h0 < n_h; h0 += kMax) {
        const int64_t hc = n_h - h0 < kMax ? n_h - h0 : kMax;
        if (hc == 3)
            f.template operator()<3>(h0);
        else if (hc == 2)
            f.template operator()<2>(h0);
        else
            f.template operator()<1>(h0);
    }
}

// The queries as the whole-group kernels take them: times kE4m3Pow120 for scaled e4m3
// rows, declined where below(q, count), the kernel file's own check of |q| < 2^8, says no; as they
// are otherwise. Once per query group, not per page. Each kernel file passes its own lambda, so
// every instantiation is that file's alone.
template <bool kScaled, class Below>
inline bool group_queries(const float* q, int64_t n_h, int64_t dim, float* qs, Below&& below) {
    if (dim != 64 && dim != 128) return false;
    if (kScaled && !below(q, n_h * dim)) return false;
    const float carry = kScaled ? kE4m3Pow120 : 1.0f;
    for (int64_t i = 0; i < n_h * dim; ++i) qs[i] = q[i] * carry;  // * 1 is exact
    return true;
}

struct KvKernelTable {
    KvReadKernels by_type[kKvTypes];
    KvGroupKernels group[kKvTypes] = {};
};

const KvKernelTable& kv_kernels_scalar();
// Tests: the most floats of chunk results paged_attention holds at once (default 4M); a small
// value makes it run a long context's tokens in several batches.
void set_max_partial_floats(int64_t n);
const KvKernelTable& kv_kernels_avx2();
// The AVX2 table with the kernels decode attention spends its time in widened to 16 lanes (F32
// scores and accum, bf16 / f16 / fp8_e4m3 / int8 dequant): paged_attention_avx512.cpp.
const KvKernelTable& kv_kernels_avx512();

}  // namespace warden::kernels::detail
