// AVX2 + FMA + F16C paged-attention read kernels. Every format is widened to f32 eight lanes
// at a time in registers:
//   bf16: zero-extend to 32 bits and shift left 16;  f16: vcvtph2ps;
//   fp8_e5m2: the code is the top byte of an f16 (code << 8), then vcvtph2ps (exact, inf/NaN too);
//   fp8_e4m3: s.eeee.mmm -> f16 s.0eeee.mmm0000000, which is the e4m3 value times 2^-8 for
//             normals and subnormals alike (exact); the 2^8 goes into the per-row multiplier,
//             the NaN codes (x.1111.111) are mapped to an f16 NaN;
//   int8: sign-extend to 32 bits, convert.
// Dot products keep two 8-lane accumulators; the weighted V sum updates 4 vectors of the output
// per pass over the rows, each element one fma chain over j in order (so it differs from the
// scalar kernel only by fma's single rounding). Tails (dim % 8) go through a zero-padded buffer.
#include <immintrin.h>

#include "kernels/fp8_avx2.h"
#include "kernels/paged_attention_internal.h"

namespace warden::kernels::detail {
namespace {

struct LdF32 {
    static constexpr int kBytes = 4;
    static constexpr float kMul = 1.0f;
    static __m256 load8(const uint8_t* p) {
        return _mm256_loadu_ps(reinterpret_cast<const float*>(p));
    }
};
struct LdBF16 {
    static constexpr int kBytes = 2;
    static constexpr float kMul = 1.0f;
    static __m256 load8(const uint8_t* p) {
        const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
};
struct LdF16 {
    static constexpr int kBytes = 2;
    static constexpr float kMul = 1.0f;
    static __m256 load8(const uint8_t* p) {
        return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    }
};
struct LdE5M2 {
    static constexpr int kBytes = 1;
    static constexpr float kMul = 1.0f;
    static __m256 load8(const uint8_t* p) {
        const __m128i w = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
        return _mm256_cvtph_ps(_mm_slli_epi16(w, 8));
    }
};
struct LdE4M3 {
    static constexpr int kBytes = 1;
    static constexpr float kMul = 256.0f;
    static __m256 load8(const uint8_t* p) {
        const __m128i w = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
        const __m128i mag = _mm_and_si128(w, _mm_set1_epi16(0x7f));
        __m128i h = _mm_or_si128(_mm_slli_epi16(_mm_and_si128(w, _mm_set1_epi16(0x80)), 8),
                                 _mm_slli_epi16(mag, 7));
        const __m128i nan = _mm_cmpeq_epi16(mag, _mm_set1_epi16(0x7f));
        h = _mm_or_si128(h, _mm_and_si128(nan, _mm_set1_epi16(0x7c00)));
        return _mm256_cvtph_ps(h);
    }
};
struct LdI8 {
    static constexpr int kBytes = 1;
    static constexpr float kMul = 1.0f;
    static __m256 load8(const uint8_t* p) {
        return _mm256_cvtepi32_ps(
            _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
    }
};

// Loads elements [i, dim) (fewer than 8) of a row, zero-padded.
template <typename L>
inline __m256 load_tail(const uint8_t* row, int64_t i, int64_t dim) {
    alignas(32) uint8_t buf[8 * L::kBytes] = {};
    for (int64_t b = 0; b < (dim - i) * L::kBytes; ++b) buf[b] = row[i * L::kBytes + b];
    return L::load8(buf);
}
inline __m256 load_tail_f32(const float* x, int64_t i, int64_t dim) {
    alignas(32) float buf[8] = {};
    for (int64_t k = 0; k < dim - i; ++k) buf[k] = x[i + k];
    return _mm256_load_ps(buf);
}

// Eight rows at a time: each row's dot product runs in its own accumulator (two 8-wide fma
// chains per row over the 16-element halves of each 16-block, as in the one-row loop), then the
// eight accumulators are reduced together by a transpose (hadd) tree, one vector of 8 scores,
// instead of a horizontal sum per row. A row's result depends only on its own data (the same
// operations in the same order wherever it sits), so scores do not depend on batch or split.
template <typename L>
inline __m256 dot_row(const float* q, __m256 qtail, const uint8_t* r, int64_t dim) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= dim; i += 16) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), L::load8(r + i * L::kBytes), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8), L::load8(r + (i + 8) * L::kBytes), a1);
    }
    if (i + 8 <= dim) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), L::load8(r + i * L::kBytes), a0);
        i += 8;
    }
    if (i < dim) a1 = _mm256_fmadd_ps(qtail, load_tail<L>(r, i, dim), a1);
    return _mm256_add_ps(a0, a1);
}

// Lane k of the result = the sum of the 8 lanes of v[k] (a fixed tree per row).
inline __m256 reduce8(const __m256* v) {
    const __m256 t0 = _mm256_hadd_ps(v[0], v[1]), t1 = _mm256_hadd_ps(v[2], v[3]);
    const __m256 t2 = _mm256_hadd_ps(v[4], v[5]), t3 = _mm256_hadd_ps(v[6], v[7]);
    const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
    // u0 = [r0 r1 r2 r3 | r0 r1 r2 r3] halves (low 128 = lanes 0-3 partial, high = lanes 4-7
    // partial)
    return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20),
                         _mm256_permute2f128_ps(u0, u1, 0x31));
}

template <typename L>
void scores(const float* q, const uint8_t* rows, int64_t stride, int64_t n, int64_t dim,
            const float* mult, float* s) {
    const __m256 kmul = _mm256_set1_ps(L::kMul);
    // q's last dim % 8 elements, zero-padded (used only when dim is not a multiple of 8).
    const __m256 qtail = dim % 8 ? load_tail_f32(q, dim / 8 * 8, dim) : _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 acc[8];
        for (int r = 0; r < 8; ++r) acc[r] = dot_row<L>(q, qtail, rows + (j + r) * stride, dim);
        _mm256_storeu_ps(
            s + j, _mm256_mul_ps(_mm256_mul_ps(reduce8(acc), kmul), _mm256_loadu_ps(mult + j)));
    }
    if (j < n) {
        __m256 acc[8];
        for (int r = 0; r < 8; ++r)
            acc[r] = j + r < n ? dot_row<L>(q, qtail, rows + (j + r) * stride, dim)
                               : _mm256_setzero_ps();
        alignas(32) float out[8];
        _mm256_store_ps(out, _mm256_mul_ps(reduce8(acc), kmul));
        for (int64_t r = 0; r < n - j; ++r) s[j + r] = out[r] * mult[j + r];
    }
}

// out[0, 8K) += sum_j w[j] * decode(row_j)[0, 8K): K independent fma chains over the rows.
template <typename L, int K>
inline void accum_cols(const float* w, const uint8_t* rows, int64_t stride, int64_t n, float* out) {
    __m256 o[K];
    for (int k = 0; k < K; ++k) o[k] = _mm256_loadu_ps(out + 8 * k);
    for (int64_t j = 0; j < n; ++j, rows += stride) {
        const __m256 wj = _mm256_set1_ps(w[j] * L::kMul);
        for (int k = 0; k < K; ++k)
            o[k] = _mm256_fmadd_ps(wj, L::load8(rows + 8 * k * L::kBytes), o[k]);
    }
    for (int k = 0; k < K; ++k) _mm256_storeu_ps(out + 8 * k, o[k]);
}

template <typename L>
void accum(const float* w, const uint8_t* rows, int64_t stride, int64_t n, int64_t dim,
           float* out) {
    // 64 outputs at a time (eight independent fma chains keep both FMA units busy, where four wait
    // on the fma latency), then 32, then 8. Each output adds its rows in order whatever the width.
    int64_t d = 0;
    for (; d + 64 <= dim; d += 64) accum_cols<L, 8>(w, rows + d * L::kBytes, stride, n, out + d);
    for (; d + 32 <= dim; d += 32) accum_cols<L, 4>(w, rows + d * L::kBytes, stride, n, out + d);
    for (; d + 8 <= dim; d += 8) accum_cols<L, 1>(w, rows + d * L::kBytes, stride, n, out + d);
    if (d < dim) {
        alignas(32) float buf[8] = {};
        for (int64_t k = 0; k < dim - d; ++k) buf[k] = out[d + k];
        __m256 o0 = _mm256_load_ps(buf);
        for (int64_t j = 0; j < n; ++j)
            o0 = _mm256_fmadd_ps(_mm256_set1_ps(w[j] * L::kMul),
                                 load_tail<L>(rows + j * stride, d, dim), o0);
        _mm256_store_ps(buf, o0);
        for (int64_t k = 0; k < dim - d; ++k) out[d + k] = buf[k];
    }
}

template <typename L>
void dequant(const uint8_t* row, int64_t dim, float* out) {
    const __m256 mul = _mm256_set1_ps(L::kMul);
    int64_t i = 0;
    for (; i + 8 <= dim; i += 8)
        _mm256_storeu_ps(out + i, _mm256_mul_ps(L::load8(row + i * L::kBytes), mul));
    if (i < dim) {
        alignas(32) float buf[8];
        _mm256_store_ps(buf, _mm256_mul_ps(load_tail<L>(row, i, dim), mul));
        for (int64_t k = 0; k < dim - i; ++k) out[i + k] = buf[k];
    }
}

// True when the count codes at p hold no NaN code (x.1111.111).
inline bool e4m3_finite(const uint8_t* p, int64_t count) {
    const __m256i m7f = _mm256_set1_epi8(0x7f);
    __m256i nan = _mm256_setzero_si256();
    int64_t i = 0;
    for (; i + 32 <= count; i += 32) {
        const __m256i v =
            _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)), m7f);
        nan = _mm256_or_si256(nan, _mm256_cmpeq_epi8(v, m7f));
    }
    if (!_mm256_testz_si256(nan, nan)) return false;
    for (; i < count; ++i)
        if ((p[i] & 0x7f) == 0x7f) return false;
    return true;
}

// e4m3 rows, fast path: the weight kernel's widening (kernels/fp8_avx2.h), 4 ops per 8 values
// instead of LdE4M3's ~11. It would read the NaN codes (x.1111.111) as +-480, so the run it is
// given (the attention passes one kv head's rows of a page at once) is scanned for them first
// (3 ops per 32 codes) and a run holding one takes the LdE4M3 path: NaN stays NaN, bit-exact
// with the scalar reference.
void dequant_e4m3(const uint8_t* row, int64_t dim, float* out) {
    if (!e4m3_finite(row, dim)) {
        dequant<LdE4M3>(row, dim, out);
        return;
    }
    const avx2::E4m3x16 dec;
    int64_t i = 0;
    for (; i + 16 <= dim; i += 16) {
        __m256 lo, hi;
        dec(row + i, lo, hi);
        _mm256_storeu_ps(out + i, lo);
        _mm256_storeu_ps(out + i + 8, hi);
    }
    if (i < dim) dequant<LdE4M3>(row + i, dim - i, out + i);
}

// Whole-group kernels (KvGroupKernels): each page's run of codes widened once, in registers, for
// every head of the group, with no f32 scratch between decoding and use, giving exactly the bits
// of `dequant` followed by this table's F32 `scores` / `accum` (dot_row's two chains and reduce8's
// tree per row; one fma chain per output element over the rows in order). How codes become f32
// and what the other operand carries:
//   e4m3: widened without their * 2^120 (sign-extend, shift, mask: the value times 2^-120); the
//         query (scores) or the weight (accum) carries the 2^120. The product is the value times
//         the query exactly (x * 2^120 is exact for |x| < 2^8) and the fma rounds it once, as
//         after dequant. A NaN code (read as +-480) or an |x| >= 2^8 declines the call;
//   int8, bf16: widened to their exact values, nothing carried, nothing declined.
// Without these, decode attention on an AVX2 host decoded every page into scratch and read it
// back once per head: at a 2048-token context it read bf16 KV at 5 GB/s of the 12.5 GB/s this
// access pattern gets from one core (bench_paged_attention).
struct GrE4m3 {
    static constexpr int64_t kBytes = 1;
    static constexpr bool kScaled = true;
    static __m256 load8(const uint8_t* p) {
        const __m256i v =
            _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
        return _mm256_castsi256_ps(_mm256_and_si256(
            _mm256_slli_epi32(v, 20), _mm256_set1_epi32(static_cast<int32_t>(0x87f00000u))));
    }
};
struct GrI8 {
    static constexpr int64_t kBytes = 1;
    static constexpr bool kScaled = false;
    static __m256 load8(const uint8_t* p) { return LdI8::load8(p); }
};
struct GrBf16 {
    static constexpr int64_t kBytes = 2;
    static constexpr bool kScaled = false;
    static __m256 load8(const uint8_t* p) { return LdBF16::load8(p); }
};

// True when every |x[i]| < 2^8 (NaN fails): x * 2^120 is then finite and exact.
inline bool below_pow8(const float* x, int64_t n) {
    const __m256 lim = _mm256_set1_ps(256.0f);
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 a = _mm256_and_ps(_mm256_loadu_ps(x + i), abs_mask);
        if (_mm256_movemask_ps(_mm256_cmp_ps(a, lim, _CMP_LT_OQ)) != 0xff) return false;
    }
    for (; i < n; ++i)
        if (!(x[i] < 256.0f && x[i] > -256.0f)) return false;
    return true;
}

// Heads [0, HC) of qs (the queries as L needs them, D floats per head): their scores over rows
// [0, n), 16 codes widened at a time and used by every head before the next 16.
template <class L, int64_t D, int HC>
void group_scores_heads(const float* qs, const uint8_t* rows, int64_t n, const float* mult,
                        float* s, int64_t s_stride) {
    for (int64_t j = 0; j < n; j += 8) {
        __m256 acc[HC][8];
        for (int r = 0; r < 8; ++r) {
            if (j + r >= n) {
                for (int h = 0; h < HC; ++h) acc[h][r] = _mm256_setzero_ps();
                continue;
            }
            const uint8_t* row = rows + (j + r) * D * L::kBytes;
            __m256 a0[HC], a1[HC];
            for (int h = 0; h < HC; ++h) a0[h] = a1[h] = _mm256_setzero_ps();
            for (int64_t i = 0; i < D; i += 16) {  // dot_row's two chains, the same order
                const __m256 x0 = L::load8(row + i * L::kBytes);
                const __m256 x1 = L::load8(row + (i + 8) * L::kBytes);
                for (int h = 0; h < HC; ++h) {
                    a0[h] = _mm256_fmadd_ps(_mm256_loadu_ps(qs + h * D + i), x0, a0[h]);
                    a1[h] = _mm256_fmadd_ps(_mm256_loadu_ps(qs + h * D + i + 8), x1, a1[h]);
                }
            }
            for (int h = 0; h < HC; ++h) acc[h][r] = _mm256_add_ps(a0[h], a1[h]);
        }
        for (int h = 0; h < HC; ++h) {
            float* sh = s + h * s_stride;
            if (j + 8 <= n) {
                _mm256_storeu_ps(sh + j, _mm256_mul_ps(reduce8(acc[h]), _mm256_loadu_ps(mult + j)));
            } else {
                alignas(32) float out[8];
                _mm256_store_ps(out, reduce8(acc[h]));
                for (int64_t r = 0; r < n - j; ++r) sh[j + r] = out[r] * mult[j + r];
            }
        }
    }
}

template <class L>
bool group_prepare(const float* q, int64_t n_h, int64_t dim, float* qs) {
    return group_queries<L::kScaled>(q, n_h, dim, qs,
                                     [](const float* p, int64_t n) { return below_pow8(p, n); });
}

template <class L>
bool group_scores(const float* qs, int64_t n_h, const uint8_t* rows, int64_t n, int64_t dim,
                  const float* mult, float* s, int64_t s_stride) {
    if (dim != 64 && dim != 128) return false;
    if (L::kScaled && !e4m3_finite(rows, n * dim)) return false;
    by_head_groups<kGroupHeads>(n_h, [&]<int HC>(int64_t h0) {
        if (dim == 64)
            group_scores_heads<L, 64, HC>(qs + h0 * 64, rows, n, mult, s + h0 * s_stride, s_stride);
        else
            group_scores_heads<L, 128, HC>(qs + h0 * 128, rows, n, mult, s + h0 * s_stride,
                                           s_stride);
    });
    return true;
}

// Heads [0, HC), output columns [0, 8K) of each: out_h += sum_j ws[h][j] * row_j, each element
// one fma chain over j in order (accum's arithmetic, so the same bits whatever the column and row
// split). ws: the weights as the codes need them, kRowBlock apart per head.
constexpr int64_t kRowBlock = 64;

template <class L, int K, int HC>
void group_accum_cols(const float* ws, const uint8_t* rows, int64_t row_bytes, int64_t n,
                      float* out, int64_t o_stride) {
    __m256 o[HC][K];
    for (int h = 0; h < HC; ++h)
        for (int k = 0; k < K; ++k) o[h][k] = _mm256_loadu_ps(out + h * o_stride + 8 * k);
    for (int64_t j = 0; j < n; ++j, rows += row_bytes) {
        __m256 x[K];
        for (int k = 0; k < K; ++k) x[k] = L::load8(rows + 8 * k * L::kBytes);
        for (int h = 0; h < HC; ++h) {
            const __m256 wj = _mm256_broadcast_ss(ws + h * kRowBlock + j);
            for (int k = 0; k < K; ++k) o[h][k] = _mm256_fmadd_ps(wj, x[k], o[h][k]);
        }
    }
    for (int h = 0; h < HC; ++h)
        for (int k = 0; k < K; ++k) _mm256_storeu_ps(out + h * o_stride + 8 * k, o[h][k]);
}

// Heads [0, HC) of one head group, D columns each, in column blocks of K vectors: HC * K
// accumulators, the K widened codes and the broadcast weight within 16 registers, at least 8
// independent chains where the heads allow (three heads: 9).
template <class L, int64_t D, int HC>
void group_accum_heads(const float* w, int64_t w_stride, const uint8_t* rows, int64_t n, float* out,
                       int64_t o_stride) {
    constexpr int K = HC == 3 ? 3 : HC == 2 ? 4 : 8;
    alignas(32) float ws[HC * kRowBlock];
    for (int64_t j0 = 0; j0 < n; j0 += kRowBlock) {
        const int64_t nb = n - j0 < kRowBlock ? n - j0 : kRowBlock;
        for (int h = 0; h < HC; ++h)
            for (int64_t j = 0; j < nb; ++j)  // * 1 is exact
                ws[h * kRowBlock + j] =
                    w[h * w_stride + j0 + j] * (L::kScaled ? kE4m3Pow120 : 1.0f);
        const uint8_t* rb = rows + j0 * D * L::kBytes;
        int64_t d = 0;
        for (; d + 8 * K <= D; d += 8 * K)
            group_accum_cols<L, K, HC>(ws, rb + d * L::kBytes, D * L::kBytes, nb, out + d,
                                       o_stride);
        for (; d + 16 <= D; d += 16)
            group_accum_cols<L, 2, HC>(ws, rb + d * L::kBytes, D * L::kBytes, nb, out + d,
                                       o_stride);
        for (; d < D; d += 8)
            group_accum_cols<L, 1, HC>(ws, rb + d * L::kBytes, D * L::kBytes, nb, out + d,
                                       o_stride);
    }
}

template <class L>
bool group_accum(const float* w, int64_t w_stride, int64_t n_h, const uint8_t* rows, int64_t n,
                 int64_t dim, float* out, int64_t o_stride) {
    if (dim != 64 && dim != 128) return false;
    if (L::kScaled) {
        for (int64_t h = 0; h < n_h; ++h)
            if (!below_pow8(w + h * w_stride, n)) return false;
        if (!e4m3_finite(rows, n * dim)) return false;
    }
    by_head_groups<kGroupHeads>(n_h, [&]<int HC>(int64_t h0) {
        if (dim == 64)
            group_accum_heads<L, 64, HC>(w + h0 * w_stride, w_stride, rows, n, out + h0 * o_stride,
                                         o_stride);
        else
            group_accum_heads<L, 128, HC>(w + h0 * w_stride, w_stride, rows, n, out + h0 * o_stride,
                                          o_stride);
    });
    return true;
}

template <typename L>
constexpr KvReadKernels make() {
    return {scores<L>, accum<L>, dequant<L>};
}

}  // namespace

const KvKernelTable& kv_kernels_avx2() {
    static const KvKernelTable t = [] {
        KvKernelTable k{{make<LdF32>(), make<LdBF16>(), make<LdF16>(),
                         KvReadKernels{scores<LdE4M3>, accum<LdE4M3>, dequant_e4m3}, make<LdE5M2>(),
                         make<LdI8>()}};
        constexpr int kBf16 = 1, kE4m3 = 3, kI8 = 5;
        k.group[kE4m3] = {group_prepare<GrE4m3>, group_scores<GrE4m3>, group_accum<GrE4m3>};
        k.group[kI8] = {group_prepare<GrI8>, group_scores<GrI8>, group_accum<GrI8>};
        k.group[kBf16] = {group_prepare<GrBf16>, group_scores<GrBf16>, group_accum<GrBf16>};
        return k;
    }();
    return t;
}

}  // namespace warden::kernels::detail
