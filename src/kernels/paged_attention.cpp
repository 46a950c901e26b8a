// Two passes per (sequence, query token, head) item, like attention.cpp, but walking the
// sequence's pages: scores over the visible prefix page by page, softmax, then the weighted
// sum of V page by page. The page walk costs one table lookup per page, not per position.
// Per page the format's kernels (paged_attention_{scalar,avx2,avx512}.cpp) decode the stored
// rows; the per-(token, head) scales are folded into the score multiplier (K) and the
// softmax weights (V), so no dequantized copy of the cache is ever made. Positions the step
// brings itself (FreshKv) are read from the f32 k_new/v_new instead.
// Items of all sequences are dealt round-robin to the threads so ragged lengths balance.
//
// write_kv quantizes in plain scalar code shared by every ISA, so the stored bytes never
// depend on the machine.
#include "kernels/paged_attention.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/kernels_internal.h"
#include "kernels/paged_attention_internal.h"
#include "tensor/float_convert.h"
#include "tensor/fp8.h"
#include "util/assert.h"
#include "util/error.h"

namespace warden::kernels {

static_assert(static_cast<int>(KvType::F32) == 0 && static_cast<int>(KvType::BF16) == 1 &&
              static_cast<int>(KvType::F16) == 2 && static_cast<int>(KvType::FP8_E4M3) == 3 &&
              static_cast<int>(KvType::FP8_E5M2) == 4 && static_cast<int>(KvType::INT8) == 5 &&
              detail::kKvTypes == 6);

namespace {

const detail::KvKernelTable& read_table() {
    const Isa isa = active_isa();
    return isa == Isa::Scalar ? detail::kv_kernels_scalar()
           : isa == Isa::AVX2 ? detail::kv_kernels_avx2()
                              : detail::kv_kernels_avx512();
}

const detail::KvReadKernels& read_kernels(KvType t) {
    return read_table().by_type[static_cast<int>(t)];
}

// A software prefetch of one cache line that the compiler keeps: GCC 12 deletes a loop of
// __builtin_prefetch calls here as if it had no effect (checked in the disassembly: not one
// prefetch instruction was left in this file), so the page-ahead prefetch below would never run.
// to_l2: into L2 only (prefetcht1), else into L1 as well (prefetcht0).
inline void prefetch_line(const uint8_t* p, bool to_l2) {
#if defined(__x86_64__) || defined(__i386__)
    if (to_l2)
        asm volatile("prefetcht1 %0" : : "m"(*p));
    else
        asm volatile("prefetcht0 %0" : : "m"(*p));
#else
    __builtin_prefetch(p, 0, to_l2 ? 2 : 3);
#endif
}

// Smallest bf16 >= x (x finite, >= 0).
uint16_t bf16_round_up(float x) {
    uint32_t u = std::bit_cast<uint32_t>(x);
    if (u & 0xffffu) u = (u & 0xffff0000u) + 0x10000u;
    return static_cast<uint16_t>(u >> 16);
}

// Quantizes one (token, head) row of dim values into `codes`; returns the scale's bf16 bits
// (TokenHead) or 0 (Tensor, or unscaled types).
uint16_t store_row(const PagedKvLayer& kv, const float* x, uint8_t* codes,
                   const detail::OpsTable& ops) {
    const int64_t dim = kv.head_dim;
    switch (kv.type) {
        case KvType::F32:
            std::memcpy(codes, x, static_cast<size_t>(dim) * 4);
            return 0;
        case KvType::BF16: {
            auto* out = reinterpret_cast<detail::bf16*>(codes);
            ops.f32_to_bf16_row(x, out, dim);
            return 0;
        }
        case KvType::F16: {
            for (int64_t i = 0; i < dim; ++i) {
                const float c = std::isnan(x[i]) ? x[i] : std::clamp(x[i], -65504.0f, 65504.0f);
                const tensor::f16_t h = tensor::f32_to_f16(c);
                std::memcpy(codes + 2 * i, &h, 2);
            }
            return 0;
        }
        default:
            break;
    }
    float s = kv.tensor_scale;
    uint16_t sbits = 0;
    if (kv.scales == KvScales::TokenHead) {
        float amax = 0.0f;
        for (int64_t i = 0; i < dim; ++i)
            if (std::isfinite(x[i])) amax = std::max(amax, std::fabs(x[i]));
        sbits = bf16_round_up(amax / kv_type_qmax(kv.type));
        if (amax > 0.0f && sbits < 0x0080u) sbits = 0x0080u;  // keep 1/s finite: at least 2^-126
        s = tensor::bf16_to_f32(sbits);
    }
    const bool unit = s == 0.0f;  // all finite values are 0: store them as they are
    for (int64_t i = 0; i < dim; ++i) {
        const float y = unit ? x[i] : x[i] / s;
        switch (kv.type) {
            case KvType::FP8_E4M3:
                codes[i] = tensor::f32_to_fp8_e4m3(y);
                break;
            case KvType::FP8_E5M2:
                codes[i] = tensor::f32_to_fp8_e5m2(y);
                break;
            default: {  // INT8: RNE, saturate at +-127, NaN -> 0
                const float c = std::isnan(y) ? 0.0f : std::clamp(y, -127.0f, 127.0f);
                codes[i] = static_cast<uint8_t>(static_cast<int8_t>(std::nearbyint(c)));
            }
        }
    }
    return sbits;
}

// How many pages ahead attend_chunk prefetches a page's rows and scales. One page of fp8 rows of a
// head is 1 KiB at head dim 64, read in well under a DRAM round trip; two pages ahead (and the
// scales, which were not prefetched at all) made decode attention 1.24x faster for fp8_e4m3,
// 1.30x for int8 and 1.15x for bf16 (bench_paged_attention, alternating builds; four pages ahead
// changed nothing: docs/KV_QUANT.md, Tried and dropped).
constexpr int64_t kPagesAhead = 2;
// A page's run of one head at or above this many bytes is prefetched into L2 only. With bf16 rows
// (2 KiB per page at head dim 64) prefetching into L1 left decode attention at 6.6 ms per step for
// a 2048-token context on the AVX2 Zen 4 VM and into L2 at 4.3 ms, where 1-byte rows (1 KiB) were
// 5% faster through L1 (bench_paged_attention, alternating builds).
constexpr int64_t kL2PrefetchRunBytes = 2048;

// Context positions per attention work item (see paged_attention).
constexpr int64_t kChunkPositions = 1024;
// Floats of chunk results held at once (16 MiB; see paged_attention); tests lower it to force
// several token batches (detail::set_max_partial_floats).
std::atomic<int64_t> g_max_partial_floats{int64_t{4} << 20};

struct Scratch {
    std::vector<float> scores;  // [heads of one item][n_ctx]
    std::vector<float> w;       // [page_size] per-row score multipliers (K) of one page
    std::vector<float> rows;    // [page_size][head_dim] one page's rows of one kv head, decoded
    std::vector<float> wg;      // [heads of one item][page_size] per-row weights (V) of each head
    std::vector<float> qs;  // [heads of one item][head_dim] the queries as group kernels take them
};

// Attention of query token t for the n_h consecutive query heads starting at h0, all of kv head
// g (a GQA group or part of one), over the context positions [c0, c1) (one chunk of the
// visible context, see paged_attention); q points at head h0's row, heads `dim` floats apart.
// Writes each head's softmax-weighted sum over the chunk, normalized by the chunk's own softmax,
// to o + h * o_stride, and (when ml is not null) the chunk's score max and exp sum to
// ml[h * ml_stride] and ml[h * ml_stride + 1] so chunks can be merged.
// With several heads, each page's K and V rows of head g are decoded once into `rows` (exact:
// the decoded values are the codes' values) and every head reads them there through the f32
// kernels: a group of G heads decodes each code once instead of G times, which is what makes
// the 1-byte formats cheaper than bf16 per token rather than dearer. Rows are decoded even for
// a single head, so a head's result never depends on how many heads share its item (which
// depends on the batch): batching stays invisible to the outputs. Where the table has whole-group
// kernels for the format (detail::KvGroupKernels: AVX2, AVX-512; bf16, e4m3, int8), the heads read
// the codes straight from the page instead, with exactly the bits of the path through `rows`, so
// which path a page takes (it depends on the item's queries and the page's codes) changes no
// output.
void attend_chunk(const detail::KvReadKernels& rk, const detail::KvReadKernels& rk32,
                  const detail::KvGroupKernels& gk, const detail::OpsTable& ops,
                  const PagedKvLayer& kv, const PagedAttentionSeq& s, int64_t t, int64_t g,
                  int64_t n_h, const float* q, float* o, int64_t o_stride, float* ml,
                  int64_t ml_stride, float scale, int64_t c0, int64_t c1, int64_t ctx_stride,
                  Scratch& sc) {
    const int64_t dim = kv.head_dim;
    const int64_t row = kv.n_kv_heads * dim;
    const int64_t eb = kv_elem_bytes(kv.type);
    const int64_t row_bytes = dim * eb;  // a head's rows are contiguous in its page block
    const int64_t head_bytes = kv.page_size * row_bytes;
    const int64_t n_ctx = s.pos0 + t + 1;
    int64_t fresh_begin = n_ctx;  // positions [fresh_begin, n_ctx) come from k_new/v_new
    if (s.k_new && s.v_new) {
        if (s.fresh == FreshKv::Self)
            fresh_begin = n_ctx - 1;
        else if (s.fresh == FreshKv::Chunk)
            fresh_begin = s.pos0;
    }
    const int64_t paged_end =
        std::min(fresh_begin, c1);  // positions [c0, paged_end) come from pages
    const int64_t p_begin = c0 / kv.page_size;
    const int64_t p_end = paged_end > c0 ? (paged_end + kv.page_size - 1) / kv.page_size : p_begin;
    const int64_t fresh0 = std::max(fresh_begin, c0);
    const bool per_row = kv.has_scale_array();
    const float fixed = kv_type_scaled(kv.type) ? kv.tensor_scale : 1.0f;
    const bool decode = kv.type != KvType::F32;  // f32 rows are read in place
    float* w = sc.w.data();
    float* rows = sc.rows.data();
    // Page p's positions inside this chunk: [j0, j0 + cnt) (chunks start on a page boundary).
    auto page_span = [&](int64_t p) {
        const int64_t j0 = p * kv.page_size;
        return std::pair<int64_t, int64_t>{j0, std::min(paged_end, j0 + kv.page_size) - j0};
    };
    // The rows of kv head g on page `page` at block offset `off`, as (pointer, stride, kernels):
    // decoded into `rows`, or in place for f32.
    auto page_rows = [&](const uint8_t* page, int64_t off, int64_t cnt) {
        const uint8_t* src = page + off + g * head_bytes;
        if (!decode)
            return std::tuple<const uint8_t*, int64_t, const detail::KvReadKernels*>{src, row_bytes,
                                                                                     &rk};
        rk.dequant(src, cnt * dim, rows);  // the head's cnt rows are one contiguous run
        return std::tuple<const uint8_t*, int64_t, const detail::KvReadKernels*>{
            reinterpret_cast<const uint8_t*>(rows), dim * 4, &rk32};
    };

    // Asks for a page's rows of head g (one contiguous run), and its per-row scales, before they
    // are needed. Pages lie far apart (a page holds every layer), so the hardware prefetchers
    // stall at each page change; without this, decoding the first row of a page waits on DRAM.
    // The scales of one head are 2 bytes every n_kv_heads * 2 (all heads' scales of a slot sit
    // together), a few lines per page that a multiplier loop would otherwise wait on one by one.
    const bool to_l2 = head_bytes >= kL2PrefetchRunBytes;
    auto prefetch_page = [&](int64_t p, int64_t off, int64_t scale_off) {
        if (p >= p_end) return;
        const uint8_t* pg = kv.base + static_cast<int64_t>(s.page_ids[p]) * kv.page_stride;
        const uint8_t* src = pg + off + g * head_bytes;
        const int64_t n = page_span(p).second, bytes = n * row_bytes;
        for (int64_t b = 0; b < bytes; b += 64) prefetch_line(src + b, to_l2);
        if (per_row) {
            const uint8_t* sc0 = pg + scale_off + g * 2;
            const int64_t sbytes = (n - 1) * kv.n_kv_heads * 2 + 2;
            for (int64_t b = 0; b < sbytes; b += 64) prefetch_line(sc0 + b, to_l2);
            prefetch_line(sc0 + sbytes - 1, to_l2);  // the last line when the run starts mid-line
        }
    };

    for (int64_t p = p_begin; p < p_begin + kPagesAhead; ++p)
        prefetch_page(p, kv.k_offset, kv.k_scale_offset);
    const bool group_q = gk.prepare && gk.prepare(q, n_h, dim, sc.qs.data());
    for (int64_t p = p_begin; p < p_end; ++p) {
        const uint8_t* page = kv.base + static_cast<int64_t>(s.page_ids[p]) * kv.page_stride;
        const auto [j0, cnt] = page_span(p);
        prefetch_page(p + kPagesAhead, kv.k_offset, kv.k_scale_offset);
        if (per_row) {
            const auto* sk = reinterpret_cast<const uint16_t*>(page + kv.k_scale_offset) + g;
            for (int64_t i = 0; i < cnt; ++i)
                w[i] = scale * tensor::bf16_to_f32(sk[i * kv.n_kv_heads]);
        } else {
            std::fill(w, w + cnt, scale * fixed);
        }
        // The whole group straight from the codes where the table can (the same bits), else
        // decoded once into scratch and read there by every head.
        float* const s0 = sc.scores.data() + (j0 - c0);
        if (group_q && gk.scores(sc.qs.data(), n_h, page + kv.k_offset + g * head_bytes, cnt, dim,
                                 w, s0, ctx_stride))
            continue;
        const auto [src, stride, k] = page_rows(page, kv.k_offset, cnt);
        for (int64_t h = 0; h < n_h; ++h)
            k->scores(q + h * dim, src, stride, cnt, dim, w, s0 + h * ctx_stride);
    }
    for (int64_t h = 0; h < n_h; ++h) {
        float* scores = sc.scores.data() + h * ctx_stride - c0;  // indexed by position
        for (int64_t j = fresh0; j < c1; ++j)
            scores[j] =
                scale * ops.dot_f32(q + h * dim, s.k_new + (j - s.pos0) * row + g * dim, dim);
        float mx, sum;
        ops.softmax_stats(scores + c0, c1 - c0, &mx, &sum);
        if (ml) {
            ml[h * ml_stride] = mx;
            ml[h * ml_stride + 1] = sum;
        }
        std::fill(o + h * o_stride, o + h * o_stride + dim, 0.0f);
    }
    for (int64_t p = p_begin; p < p_begin + kPagesAhead; ++p)
        prefetch_page(p, kv.v_offset, kv.v_scale_offset);
    for (int64_t p = p_begin; p < p_end; ++p) {
        const uint8_t* page = kv.base + static_cast<int64_t>(s.page_ids[p]) * kv.page_stride;
        const auto [j0, cnt] = page_span(p);
        prefetch_page(p + kPagesAhead, kv.v_offset, kv.v_scale_offset);
        // Each head's weights for this page's rows (its softmax scores times the rows' scales),
        // computed once for whichever path reads the rows.
        const auto* sv = reinterpret_cast<const uint16_t*>(page + kv.v_scale_offset) + g;
        float* const wg = sc.wg.data();
        for (int64_t h = 0; h < n_h; ++h) {
            const float* scores = sc.scores.data() + h * ctx_stride + (j0 - c0);
            float* wh = wg + h * kv.page_size;
            if (per_row) {
                for (int64_t i = 0; i < cnt; ++i)
                    wh[i] = scores[i] * tensor::bf16_to_f32(sv[i * kv.n_kv_heads]);
            } else if (fixed != 1.0f) {
                for (int64_t i = 0; i < cnt; ++i) wh[i] = scores[i] * fixed;
            } else {
                std::copy(scores, scores + cnt, wh);
            }
        }
        if (gk.accum && gk.accum(wg, kv.page_size, n_h, page + kv.v_offset + g * head_bytes, cnt,
                                 dim, o, o_stride))
            continue;
        const auto [src, stride, k] = page_rows(page, kv.v_offset, cnt);
        for (int64_t h = 0; h < n_h; ++h)
            k->accum(wg + h * kv.page_size, src, stride, cnt, dim, o + h * o_stride);
    }
    for (int64_t h = 0; h < n_h; ++h) {
        const float* scores = sc.scores.data() + h * ctx_stride - c0;
        for (int64_t j = fresh0; j < c1; ++j)
            ops.axpy_f32(scores[j], s.v_new + (j - s.pos0) * row + g * dim, o + h * o_stride, dim);
    }
}

void check_layer(const PagedKvLayer& kv) {
    util::check(kv.head_dim > 0 && kv.page_size > 0 && kv.n_kv_heads > 0,
                "paged attention: bad head dim or page size");
    util::check(!(kv.type == KvType::INT8 && kv.scales == KvScales::Tensor),
                "int8 KV needs per-(token, head) scales (--kv-scales=token-head)");
    util::check(std::isfinite(kv.tensor_scale) && kv.tensor_scale > 0.0f,
                "KV tensor scale must be positive");
}

}  // namespace

void write_kv(const PagedKvLayer& kv, const int32_t* page_ids, int64_t pos0, int64_t n,
              const float* k, const float* v) {
    check_layer(kv);
    const int64_t dim = kv.head_dim, row = kv.n_kv_heads * dim, eb = kv_elem_bytes(kv.type);
    const detail::OpsTable& ops = detail::ops_table(active_isa());
    const bool per_row = kv.has_scale_array();
    for (int64_t t = 0; t < n; ++t) {
        const int64_t pos = pos0 + t;
        uint8_t* page =
            kv.base + static_cast<int64_t>(page_ids[pos / kv.page_size]) * kv.page_stride;
        const int64_t slot = pos % kv.page_size;
        for (int64_t g = 0; g < kv.n_kv_heads; ++g) {
            const int64_t at = (g * kv.page_size + slot) * dim * eb;
            const uint16_t ks = store_row(kv, k + t * row + g * dim, page + kv.k_offset + at, ops);
            const uint16_t vs = store_row(kv, v + t * row + g * dim, page + kv.v_offset + at, ops);
            if (per_row) {
                std::memcpy(page + kv.k_scale_offset + (slot * kv.n_kv_heads + g) * 2, &ks, 2);
                std::memcpy(page + kv.v_scale_offset + (slot * kv.n_kv_heads + g) * 2, &vs, 2);
            }
        }
    }
}

void read_kv_row(const PagedKvLayer& kv, const int32_t* page_ids, int64_t pos, int64_t kv_head,
                 bool value, float* out) {
    check_layer(kv);
    const int64_t dim = kv.head_dim, eb = kv_elem_bytes(kv.type);
    const uint8_t* page =
        kv.base + static_cast<int64_t>(page_ids[pos / kv.page_size]) * kv.page_stride;
    const int64_t slot = pos % kv.page_size;
    const uint8_t* codes =
        page + (value ? kv.v_offset : kv.k_offset) + (kv_head * kv.page_size + slot) * dim * eb;
    detail::kv_kernels_scalar().by_type[static_cast<int>(kv.type)].dequant(codes, dim, out);
    float s = kv_type_scaled(kv.type) ? kv.tensor_scale : 1.0f;
    if (kv.has_scale_array()) {
        uint16_t b;
        std::memcpy(&b,
                    page + (value ? kv.v_scale_offset : kv.k_scale_offset) +
                        (slot * kv.n_kv_heads + kv_head) * 2,
                    2);
        s = tensor::bf16_to_f32(b);
    }
    if (s != 1.0f)
        for (int64_t i = 0; i < dim; ++i) out[i] *= s;
}

void paged_attention(std::span<const PagedAttentionSeq> seqs, int64_t n_heads,
                     const PagedKvLayer& kv, float scale, util::ThreadPool& pool) {
    util::check(kv.n_kv_heads > 0 && n_heads > 0 && n_heads % kv.n_kv_heads == 0,
                "paged attention: n_heads must be a positive multiple of n_kv_heads");
    check_layer(kv);
    const int64_t dim = kv.head_dim;
    const int64_t group = n_heads / kv.n_kv_heads;
    int64_t max_ctx = 0, n_tokens = 0;
    for (const PagedAttentionSeq& s : seqs) {
        WARDEN_ASSERT(s.n_q >= 0 && s.pos0 >= 0, "paged attention: negative length");
        n_tokens += s.n_q;
        max_ctx = std::max(max_ctx, s.pos0 + s.n_q);
    }
    if (n_tokens == 0) return;
    const detail::OpsTable& ops = detail::ops_table(active_isa());
    const detail::KvReadKernels& rk = read_kernels(kv.type);
    const detail::KvReadKernels& rk32 = read_kernels(KvType::F32);
    const detail::KvGroupKernels& gk = read_table().group[static_cast<int>(kv.type)];
    const int64_t w_len = std::min(max_ctx, kv.page_size);
    // Long contexts are split into chunks of kChunkPositions (rounded to whole pages), each its
    // own work item with its own softmax, merged afterwards (below): a batch-1 decode step at 8k
    // context then keeps every thread busy while reading each kv head's pages once. The split
    // depends only on the query's context length and the page size, never on the batch or the
    // thread count, so a token's output is the same in prefill and decode and in any batch; a
    // context of one chunk is computed exactly as without chunking.
    const int64_t chunk_len = kv.page_size * std::max<int64_t>(1, kChunkPositions / kv.page_size);
    auto n_chunks = [&](int64_t n_ctx) { return (n_ctx + chunk_len - 1) / chunk_len; };
    // Work items are (sequence, token, chunk, part of a GQA group), handed to the threads one at
    // a time from a shared counter, a token's full chunks before its last, partial one. Whole
    // groups share their decoded rows, and a group is split into parts only while there are
    // fewer items than threads (a model with fewer kv heads than threads at short context).
    // Results do not depend on the split or on which thread takes an item.
    //
    // Why not round-robin (thread t takes items t, t + T, ...) with groups split until there are
    // 4 items per thread: at batch 1 with two chunks and two threads, one thread would take every
    // full chunk and the other every partial one, and the split loses the group's shared rows.
    // For SmolLM2's 3 kv heads at batch 1 on 2 threads that was 1.3-2.1x slower per step from 700
    // to 2000 positions (bench_paged_attention bf16 1 CTX 30 2 16 30).
    struct Tok {
        int64_t seq, t, nc, item0, part0;  // part0: first partial (head, chunk) slot when nc > 1
    };
    thread_local std::vector<Tok> toks;
    toks.clear();
    int64_t groups = 0;  // (token, kv head, chunk) triples
    for (size_t i = 0; i < seqs.size(); ++i)
        for (int64_t t = 0; t < seqs[i].n_q; ++t) {
            toks.push_back({static_cast<int64_t>(i), t, n_chunks(seqs[i].pos0 + t + 1), 0, 0});
            groups += kv.n_kv_heads * toks.back().nc;
        }
    const int64_t enough = pool.size();  // items
    int64_t parts = 1;
    while (parts < group && group % (parts * 2) == 0 && groups * parts < enough) parts *= 2;
    if (groups * parts < enough) parts = group;  // group sizes that do not halve: one head per item
    const int64_t per_part = group / parts;
    const int64_t per_token = kv.n_kv_heads * parts;  // items per (sequence, token, chunk)
    const int64_t ctx_len = std::min(max_ctx, chunk_len);
    // Chunk results of multi-chunk tokens: [head][chunk] rows of dim, and (max, sum) pairs. A long
    // prefill chunk of a wide model would need hundreds of MB for all its tokens at once, so the
    // tokens go in batches whose results fit g_max_partial_floats (at least one token per batch).
    thread_local std::vector<float> part_o, part_ml;
    const int64_t cap = g_max_partial_floats.load(std::memory_order_relaxed);
    for (size_t b0 = 0; b0 < toks.size();) {
        int64_t total = 0, n_partial = 0;
        size_t b1 = b0;
        for (; b1 < toks.size(); ++b1) {
            Tok& k = toks[b1];
            const int64_t add = k.nc > 1 ? n_heads * k.nc : 0;
            if (b1 > b0 && (n_partial + add) * (dim + 2) > cap) break;
            k.item0 = total;
            k.part0 = n_partial;
            total += per_token * k.nc;
            n_partial += add;
        }
        if (static_cast<int64_t>(part_o.size()) < n_partial * dim)
            part_o.resize(static_cast<size_t>(n_partial * dim));
        if (static_cast<int64_t>(part_ml.size()) < n_partial * 2)
            part_ml.resize(static_cast<size_t>(n_partial * 2));
        float* const po = part_o.data();
        float* const pml = part_ml.data();
        const Tok* const tk = toks.data() + b0;
        const int64_t n_tok = static_cast<int64_t>(b1 - b0);
        b0 = b1;

        std::atomic<int64_t> next_item{0};
        pool.run([&](int, int) {
            thread_local Scratch sc;
            if (static_cast<int64_t>(sc.scores.size()) < ctx_len * per_part)
                sc.scores.resize(static_cast<size_t>(ctx_len * per_part));
            if (static_cast<int64_t>(sc.w.size()) < w_len) sc.w.resize(static_cast<size_t>(w_len));
            if (static_cast<int64_t>(sc.rows.size()) < w_len * dim)
                sc.rows.resize(static_cast<size_t>(w_len * dim));
            if (static_cast<int64_t>(sc.wg.size()) < per_part * kv.page_size)
                sc.wg.resize(static_cast<size_t>(per_part * kv.page_size));
            if (gk.prepare && static_cast<int64_t>(sc.qs.size()) < per_part * dim)
                sc.qs.resize(static_cast<size_t>(per_part * dim));
            int64_t ti = 0;
            for (int64_t item = next_item.fetch_add(1, std::memory_order_relaxed); item < total;
                 item = next_item.fetch_add(1, std::memory_order_relaxed)) {
                while (item >= tk[ti].item0 + per_token * tk[ti].nc) ++ti;
                const Tok& k = tk[ti];
                const PagedAttentionSeq& s = seqs[static_cast<size_t>(k.seq)];
                const int64_t local = item - k.item0;
                const int64_t chunk = local / per_token, part = local % per_token;
                const int64_t h0 = part * per_part, g = h0 / group;
                const int64_t at = (k.t * n_heads + h0) * dim;
                const int64_t c0 = chunk * chunk_len,
                              c1 = std::min(s.pos0 + k.t + 1, c0 + chunk_len);
                if (k.nc == 1) {
                    attend_chunk(rk, rk32, gk, ops, kv, s, k.t, g, per_part, s.q + at, s.out + at,
                                 dim, nullptr, 0, scale, c0, c1, ctx_len, sc);
                } else {
                    const int64_t slot =
                        k.part0 + h0 * k.nc + chunk;  // head h0 + h at slot + h * nc
                    attend_chunk(rk, rk32, gk, ops, kv, s, k.t, g, per_part, s.q + at,
                                 po + slot * dim, k.nc * dim, pml + 2 * slot, 2 * k.nc, scale, c0,
                                 c1, ctx_len, sc);
                }
            }
        });
        if (n_partial == 0) continue;
        // Merge the chunks of each (token, head): weights sum_c * exp(max_c - max), chunks in
        // order.
        pool.run([&](int tid, int nthreads) {
            for (int64_t x = tid; x < n_tok * n_heads; x += nthreads) {
                const Tok& k = tk[x / n_heads];
                if (k.nc == 1) continue;
                const int64_t h = x % n_heads;
                const int64_t slot = k.part0 + h * k.nc;
                float* ml = pml + 2 * slot;  // chunk c: (max, sum) at ml[2c], ml[2c + 1]
                float mx = ml[0];
                for (int64_t c = 1; c < k.nc; ++c) mx = std::max(mx, ml[2 * c]);
                // Each chunk's weight replaces its sum (this (token, head)'s slots are this
                // thread's alone), so exp runs once per chunk.
                float wsum = 0.0f;
                for (int64_t c = 0; c < k.nc; ++c) {
                    ml[2 * c + 1] *= std::exp(ml[2 * c] - mx);
                    wsum += ml[2 * c + 1];
                }
                float* out = seqs[static_cast<size_t>(k.seq)].out + (k.t * n_heads + h) * dim;
                const float* oc = po + slot * dim;
                std::fill(out, out + dim, 0.0f);
                for (int64_t c = 0; c < k.nc; ++c) {
                    const float a = ml[2 * c + 1] / wsum;
                    for (int64_t d = 0; d < dim; ++d) out[d] += a * oc[c * dim + d];
                }
            }
        });
    }
}

namespace detail {
void set_max_partial_floats(int64_t n) {
    g_max_partial_floats.store(n, std::memory_order_relaxed);
}
}  // namespace detail

}  // namespace warden::kernels
