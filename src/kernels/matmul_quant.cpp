// Layout helpers of kernels/matmul_quant.h and the activation quantizer (shared by all ISAs:
// it runs once per token row and matmul, O(cols), so one scalar definition keeps every ISA on
// the same int8 activations).
#include "kernels/matmul_quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "kernels/cpu_features.h"
#include "kernels/kernels_internal.h"
#include "kernels/matmul_kquant.h"
#include "tensor/float_convert.h"
#include "tensor/fp8.h"
#include "util/assert.h"
#include "util/error.h"

namespace warden::kernels {

namespace {
int64_t n_panels(const WeightMatrix& w) {
    return (w.rows + kPanelRows - 1) / kPanelRows;
}
int64_t q4_group_bytes(const WeightMatrix& w) {
    return 32 + (w.asym ? 32 : 0) + w.group * 8;
}
// Q8: where column k's quad starts within a panel (add (high ? 32 : 0) + lane * 4 + k % 4), and
// where block b's 16 scales are. Per channel, one scale block leads the panel; with group 32 each
// 32-block leads with its own (matmul_quant.h).
using detail::kQ8BlockBytes;
int64_t q8_quad_offset(const WeightMatrix& w, int64_t k) {
    return w.group == 0 ? 32 + (k / 4) * 64 : (k / 32) * kQ8BlockBytes + 32 + (k % 32 / 4) * 64;
}
int64_t q8_scale_offset(const WeightMatrix& w, int64_t b) {
    return w.group == 0 ? 0 : b * kQ8BlockBytes;
}
int64_t q8_scale_count(const WeightMatrix& w) {
    return w.group == 0 ? 1 : w.cols / 32;
}
}  // namespace

void check_quant_shape(const WeightMatrix& w) {
    util::check(w.rows >= 0 && w.cols >= 0, "quantized matrix: negative shape");
    // Built only for an error message: every matmul call and every packed row checks the shape.
    auto shp = [&] { return "[" + std::to_string(w.rows) + ", " + std::to_string(w.cols) + "]"; };
    switch (w.type) {
        case WeightType::Q4:
            if (w.row_major && (w.asym || w.act_f32))
                throw util::Error("row-major int4 is symmetric W4A8 only");
            if (w.group != 32 && w.group != 128)
                throw util::Error("int4 group size must be 32 or 128, got " +
                                  std::to_string(w.group));
            if (w.cols % w.group != 0)
                throw util::Error("int4 group size " + std::to_string(w.group) +
                                  " does not divide the row length " + std::to_string(w.cols) +
                                  " of a " + shp() + " matrix");
            break;
        case WeightType::Q8:
            if (w.group != 0 && w.group != 32)
                throw util::Error("int8 group size must be 32 (or per channel), got " +
                                  std::to_string(w.group));
            if (w.cols % kActBlock != 0)
                throw util::Error("int8 weights need a row length divisible by 32, got " + shp());
            break;
        case WeightType::FP8:
            if (w.group != 0 && !tensor::fp8_block_valid(w.group))
                throw util::Error("fp8 block size must be a multiple of 4 from 4 to 256, got " +
                                  std::to_string(w.group));
            if (w.row_major && (w.group == 0 || w.cols % 4 != 0))
                throw util::Error(
                    "row-major FP8 needs block scales and a row length divisible "
                    "by 4, got " +
                    shp());
            break;
        default:
            if (!is_kquant(w.type))
                throw util::Error("check_quant_shape: not a quantized weight type");
            if (w.cols % kquant_block_elems(w.type) != 0)
                throw util::Error(std::string(kquant_type_name(w.type)) +
                                  " weights need a row length divisible by " +
                                  std::to_string(kquant_block_elems(w.type)) + ", got " + shp());
            break;
    }
}

int64_t quant_panel_bytes(const WeightMatrix& w) {
    switch (w.type) {
        case WeightType::Q4:
            return w.cols / w.group * q4_group_bytes(w);
        case WeightType::Q8:
            return w.group == 0 ? 32 + w.cols * 16 : w.cols / 32 * kQ8BlockBytes;
        case WeightType::FP8:
            return fp8_blocks(w) * 64 + w.cols * 16;
        default:
            if (!is_kquant(w.type))
                throw util::Error("quant_panel_bytes: not a quantized weight type");
            return kPanelRows * kquant_row_bytes(w);
    }
}

int64_t quant_packed_bytes(const WeightMatrix& w) {
    return n_panels(w) * quant_panel_bytes(w);
}

float quant_scale_to_f32(const WeightMatrix& w, uint16_t bits) {
    return w.bf16_scales ? tensor::bf16_to_f32(bits) : tensor::f16_to_f32(bits);
}

namespace {
// Q4: the quad of columns [k, k + 4) (k % 4 == 0) in panel p, 32 bytes; a 32-column chunk's 8
// quads follow each other. Then row lr's scales and codes (columns [k0, k0 + n), whole quads)
// written into its panel p, the other rows' nibbles kept.
uint8_t* q4_quad(const WeightMatrix& w, uint8_t* p, int64_t k) {
    return p + (k / w.group) * q4_group_bytes(w) + (w.asym ? 64 : 32) + (k % w.group / 4) * 32;
}
void put_q4_scales(const WeightMatrix& w, uint8_t* p, int64_t lr, const uint16_t* d,
                   const uint16_t* m) {
    for (int64_t g = 0; g < w.cols / w.group; ++g) {
        uint8_t* b = p + g * q4_group_bytes(w);
        std::memcpy(b + lr * 2, d + g, 2);
        if (w.asym) std::memcpy(b + 32 + lr * 2, m + g, 2);
    }
}
void put_q4_codes(const WeightMatrix& w, uint8_t* p, int64_t lr, int64_t k0, int64_t n,
                  const uint8_t* codes) {
    const int64_t lane = lr % 8;
    const bool high = lr >= 8;
    // A quad's 4 codes of this row are 4 consecutive bytes (one nibble each): merge them as one
    // 32-bit word (loading a model packs every row, so this loop is on its load path).
    for (int64_t k = k0; k < k0 + n; k += 4) {
        uint8_t* at = q4_quad(w, p, k) + lane * 4;
        uint32_t q, word;
        std::memcpy(&q, codes + (k - k0), 4);
        std::memcpy(&word, at, 4);
        q &= 0x0f0f0f0fu;
        word = high ? (word & 0x0f0f0f0fu) | (q << 4) : (word & 0xf0f0f0f0u) | q;
        std::memcpy(at, &word, 4);
    }
}
// The 32 codes of a source chunk in column order.
void q4_chunk_codes(const uint8_t* chunk, bool split_halves, uint8_t* codes) {
    for (int i = 0; i < 16; ++i) {
        const uint8_t lo = chunk[i] & 0x0f, hi = chunk[i] >> 4;
        if (split_halves) {
            codes[i] = lo;
            codes[i + 16] = hi;
        } else {
            codes[2 * i] = lo;
            codes[2 * i + 1] = hi;
        }
    }
}
#if defined(__SSE2__)
// c[0..3] as a 4x4 matrix of 32-bit words, transposed: word j of every c[i] stored as one 16-byte
// vector at dst + j * stride (the int4 and int8 panels' quads are rows of 4-byte words).
void store_transposed_4x4_epi32(const __m128i* c, uint8_t* dst, int64_t stride) {
    const __m128i t0 = _mm_unpacklo_epi32(c[0], c[1]), t1 = _mm_unpacklo_epi32(c[2], c[3]);
    const __m128i t2 = _mm_unpackhi_epi32(c[0], c[1]), t3 = _mm_unpackhi_epi32(c[2], c[3]);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), _mm_unpacklo_epi64(t0, t1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + stride), _mm_unpackhi_epi64(t0, t1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 2 * stride), _mm_unpacklo_epi64(t2, t3));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 3 * stride), _mm_unpackhi_epi64(t2, t3));
}
// One chunk of a whole panel: rows[i] is row i's 16 source bytes; the chunk's 8 quads at dst.
// Per lane, the 32 codes of rows lane (low nibbles) and lane + 8 (high) in column order, as two
// vectors of four quads' words; then 4x4 transposes of 32-bit words put lanes side by side.
void pack_q4_chunk_sse2(const uint8_t* const* rows, bool split_halves, uint8_t* dst) {
    const __m128i mask = _mm_set1_epi8(0x0f);
    const auto codes = [&](const uint8_t* src, __m128i& c0, __m128i& c1) {
        const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
        const __m128i lo = _mm_and_si128(v, mask);
        const __m128i hi = _mm_and_si128(_mm_srli_epi16(v, 4), mask);
        c0 = split_halves ? lo : _mm_unpacklo_epi8(lo, hi);
        c1 = split_halves ? hi : _mm_unpackhi_epi8(lo, hi);
    };
    __m128i q[2][8];  // q[h][lane]: quads 4h..4h+3 of the lane
    for (int lane = 0; lane < 8; ++lane) {
        __m128i a0, a1, b0, b1;
        codes(rows[lane], a0, a1);
        codes(rows[lane + 8], b0, b1);
        q[0][lane] = _mm_or_si128(a0, _mm_slli_epi16(b0, 4));  // codes < 16: no carry across bytes
        q[1][lane] = _mm_or_si128(a1, _mm_slli_epi16(b1, 4));
    }
    for (int h = 0; h < 2; ++h)
        for (int half = 0; half < 2; ++half)  // lanes 4 * half .. 4 * half + 3
            store_transposed_4x4_epi32(q[h] + 4 * half, dst + 4 * h * 32 + 16 * half, 32);
}
#endif
}  // namespace

void pack_quant_row(const WeightMatrix& w, int64_t r, const QuantRow& row, uint8_t* packed) {
    WARDEN_ASSERT(r >= 0 && r < w.rows, "pack_quant_row: row out of bounds");
    // The word-at-a-time packing below needs whole quads of codes, which a valid shape guarantees.
    check_quant_shape(w);
    if (is_kquant(w.type)) {  // the row's blocks as stored (kernels/matmul_kquant.h)
        util::check(static_cast<int64_t>(row.q.size()) == kquant_row_bytes(w),
                    "pack_quant_row: wrong block bytes");
        std::memcpy(packed + r * kquant_row_bytes(w), row.q.data(), row.q.size());
        return;
    }
    WARDEN_ASSERT(static_cast<int64_t>(row.q.size()) == w.cols, "pack_quant_row: wrong code count");
    uint8_t* p = packed + (r / kPanelRows) * quant_panel_bytes(w);
    const int64_t lr = r % kPanelRows, lane = lr % 8;
    const bool high = lr >= 8;
    if (w.type == WeightType::Q4) {
        const int64_t ng = w.cols / w.group;
        WARDEN_ASSERT(static_cast<int64_t>(row.d.size()) == ng &&
                          (!w.asym || static_cast<int64_t>(row.m.size()) == ng),
                      "pack_quant_row: wrong scale count");
        put_q4_scales(w, p, lr, row.d.data(), w.asym ? row.m.data() : nullptr);
        put_q4_codes(w, p, lr, 0, w.cols, row.q.data());
    } else if (w.type == WeightType::Q8) {
        WARDEN_ASSERT(static_cast<int64_t>(row.d.size()) == q8_scale_count(w),
                      "pack_quant_row: wrong scale count");
        for (int64_t b = 0; b < q8_scale_count(w); ++b)
            std::memcpy(p + q8_scale_offset(w, b) + lr * 2, &row.d[static_cast<size_t>(b)], 2);
        for (int64_t k = 0; k < w.cols; k += 4)
            std::memcpy(p + q8_quad_offset(w, k) + (high ? 32 : 0) + lane * 4, row.q.data() + k, 4);
    } else {  // FP8: its scale (per channel) or block scales, then the codes
        WARDEN_ASSERT(!w.group || static_cast<int64_t>(row.s.size()) == fp8_blocks(w),
                      "pack_quant_row: wrong scale count");
        pack_fp8_scales(w, r, w.group ? row.s.data() : &row.scale, packed);
        pack_fp8_codes(w, r, r + 1, row.q.data(), packed);
    }
}

namespace {
#if defined(__SSE2__)
// A whole panel's codes at columns [k, k + 16) for every k + 16 <= cols: 16 rows of 16 bytes
// (row i at src + i * cols) transposed into 16 columns of 16 rows (column k at dst + k * 16), by
// interleaving bytes, then pairs, quads and octets of rows. Returns the columns done.
int64_t pack_fp8_panel_sse2(int64_t cols, const uint8_t* src, uint8_t* dst) {
    static_assert(kPanelRows == 16);
    int64_t k = 0;
    for (; k + 16 <= cols; k += 16) {
        __m128i a[16], b[16], c[16];
        for (int i = 0; i < 16; ++i)
            a[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i * cols + k));
        for (int i = 0; i < 8; ++i) {  // rows 2i, 2i + 1 interleaved: columns 0-7, 8-15
            b[i] = _mm_unpacklo_epi8(a[2 * i], a[2 * i + 1]);
            b[8 + i] = _mm_unpackhi_epi8(a[2 * i], a[2 * i + 1]);
        }
        for (int h = 0; h < 2; ++h)  // four rows 4j..4j+3: columns 8h + 0-3, 8h + 4-7
            for (int j = 0; j < 4; ++j) {
                c[8 * h + j] = _mm_unpacklo_epi16(b[8 * h + 2 * j], b[8 * h + 2 * j + 1]);
                c[8 * h + 4 + j] = _mm_unpackhi_epi16(b[8 * h + 2 * j], b[8 * h + 2 * j + 1]);
            }
        for (int g = 0; g < 4; ++g) {  // columns 4g..4g+3; c[4g + q] holds rows 4q..4q+3
            const __m128i lo0 = _mm_unpacklo_epi32(c[4 * g], c[4 * g + 1]);      // rows 0-7
            const __m128i hi0 = _mm_unpackhi_epi32(c[4 * g], c[4 * g + 1]);      // of 2 cols
            const __m128i lo1 = _mm_unpacklo_epi32(c[4 * g + 2], c[4 * g + 3]);  // rows 8-15
            const __m128i hi1 = _mm_unpackhi_epi32(c[4 * g + 2], c[4 * g + 3]);
            uint8_t* d = dst + (k + 4 * g) * kPanelRows;
            _mm_storeu_si128(reinterpret_cast<__m128i*>(d), _mm_unpacklo_epi64(lo0, lo1));
            _mm_storeu_si128(reinterpret_cast<__m128i*>(d + 16), _mm_unpackhi_epi64(lo0, lo1));
            _mm_storeu_si128(reinterpret_cast<__m128i*>(d + 32), _mm_unpacklo_epi64(hi0, hi1));
            _mm_storeu_si128(reinterpret_cast<__m128i*>(d + 48), _mm_unpackhi_epi64(hi0, hi1));
        }
    }
    return k;
}
#endif
}  // namespace

void pack_fp8_codes(const WeightMatrix& w, int64_t r0, int64_t r1, const uint8_t* src,
                    uint8_t* packed) {
    util::check(w.type == WeightType::FP8 && r0 >= 0 && r0 <= r1 && r1 <= w.rows,
                "pack_fp8_codes: not an FP8 matrix or rows out of bounds");
    const int64_t cols = w.cols, off = fp8_blocks(w) * 64;
    for (int64_t p0 = r0; p0 < r1;) {
        const int64_t p1 = std::min(r1, (p0 / kPanelRows + 1) * kPanelRows);
        uint8_t* dst = packed + (p0 / kPanelRows) * quant_panel_bytes(w) + off;
        const uint8_t* s0 = src + (p0 - r0) * cols;
        int64_t k0 = 0;
#if defined(__SSE2__)
        if (p1 - p0 == kPanelRows) k0 = pack_fp8_panel_sse2(cols, s0, dst);
#endif
        const int64_t lr0 = p0 % kPanelRows;
        for (int64_t k = k0; k < cols; ++k)
            for (int64_t i = 0; i < p1 - p0; ++i) dst[k * kPanelRows + lr0 + i] = s0[i * cols + k];
        p0 = p1;
    }
}

void pack_q8_0_panel(const uint8_t* src, int64_t row_bytes, int64_t n, int64_t cols,
                     uint8_t* panel) {
    util::check(n >= 0 && n <= kPanelRows && cols % 32 == 0 && row_bytes >= cols / 32 * 34,
                "pack_q8_0_panel: bad shape");
    static constexpr uint8_t kZero[34] = {};
    for (int64_t b = 0; b < cols / 32; ++b) {
        uint8_t* blk = panel + b * kQ8BlockBytes;
        const uint8_t* rows[kPanelRows];  // each row's block b: [f16 d][32 int8 codes]
        for (int64_t i = 0; i < kPanelRows; ++i) {
            rows[i] = i < n ? src + i * row_bytes + b * 34 : kZero;
            std::memcpy(blk + 2 * i, rows[i], 2);
        }
        // Quad j of the block holds code dword j of rows 0-7 (row i at 4i), then of rows 8-15.
#if defined(__SSE2__)
        for (int h = 0; h < 2; ++h)            // rows 8h..8h+7
            for (int g = 0; g < 2; ++g)        // of them rows 8h + 4g .. + 3
                for (int c = 0; c < 2; ++c) {  // dwords 4c .. 4c + 3
                    __m128i v[4];
                    for (int q = 0; q < 4; ++q)
                        v[q] = _mm_loadu_si128(
                            reinterpret_cast<const __m128i*>(rows[8 * h + 4 * g + q] + 2 + 16 * c));
                    store_transposed_4x4_epi32(v, blk + 32 + 4 * c * 64 + 32 * h + 16 * g, 64);
                }
#else
        for (int64_t i = 0; i < kPanelRows; ++i)
            for (int64_t j = 0; j < 8; ++j)
                std::memcpy(blk + 32 + j * 64 + (i / 8) * 32 + (i % 8) * 4, rows[i] + 2 + 4 * j, 4);
#endif
    }
}

void pack_fp8_scales(const WeightMatrix& w, int64_t r, const float* s, uint8_t* packed) {
    util::check(w.type == WeightType::FP8 && r >= 0 && r < w.rows,
                "pack_fp8_scales: not an FP8 matrix or row out of bounds");
    uint8_t* p = packed + (r / kPanelRows) * quant_panel_bytes(w) + (r % kPanelRows) * 4;
    for (int64_t b = 0; b < fp8_blocks(w); ++b) std::memcpy(p + b * 64, s + b, 4);
}

void pack_q4_codes(const WeightMatrix& w, int64_t r0, int64_t r1, const Q4CodeRows& src,
                   uint8_t* packed) {
    util::check(w.type == WeightType::Q4 && r0 >= 0 && r0 <= r1 && r1 <= w.rows,
                "pack_q4_codes: not an int4 matrix or rows out of bounds");
    check_quant_shape(w);
    const int64_t chunks = w.cols / 32;
    const auto chunk_at = [&](int64_t r, int64_t c) {
        return src.data + (r - r0) * src.row_stride + c * src.chunk_stride;
    };
    for (int64_t p0 = r0; p0 < r1;) {
        const int64_t p1 = std::min(r1, (p0 / kPanelRows + 1) * kPanelRows);
        uint8_t* p = packed + (p0 / kPanelRows) * quant_panel_bytes(w);
#if defined(__SSE2__)
        if (p1 - p0 == kPanelRows) {
            const uint8_t* rows[kPanelRows];
            for (int64_t c = 0; c < chunks; ++c) {
                for (int64_t i = 0; i < kPanelRows; ++i) rows[i] = chunk_at(p0 + i, c);
                pack_q4_chunk_sse2(rows, src.split_halves, q4_quad(w, p, 32 * c));
            }
            p0 = p1;
            continue;
        }
#endif
        uint8_t codes[32];
        for (int64_t r = p0; r < p1; ++r)
            for (int64_t c = 0; c < chunks; ++c) {
                q4_chunk_codes(chunk_at(r, c), src.split_halves, codes);
                put_q4_codes(w, p, r % kPanelRows, 32 * c, 32, codes);
            }
        p0 = p1;
    }
}

void pack_q4_scales(const WeightMatrix& w, int64_t r, const uint16_t* d, const uint16_t* m,
                    uint8_t* packed) {
    util::check(w.type == WeightType::Q4 && r >= 0 && r < w.rows && (!w.asym || m),
                "pack_q4_scales: not an int4 matrix, row out of bounds or no mins");
    put_q4_scales(w, packed + (r / kPanelRows) * quant_panel_bytes(w), r % kPanelRows, d, m);
}

void pack_q4_block_panel(const uint8_t* src, int64_t row_bytes, int64_t n, int64_t cols, bool asym,
                         uint8_t* panel) {
    const int64_t bb = asym ? 20 : 18;
    util::check(n >= 0 && n <= kPanelRows && cols % 32 == 0 && row_bytes >= cols / 32 * bb,
                "pack_q4_block_panel: bad shape");
    WeightMatrix w;
    w.type = WeightType::Q4;
    w.rows = kPanelRows;
    w.cols = cols;
    w.group = 32;
    w.asym = asym;
    if (n < kPanelRows) std::memset(panel, 0, static_cast<size_t>(quant_panel_bytes(w)));
    if (n == 0) return;
    Q4CodeRows codes;
    codes.data = src + (asym ? 4 : 2);  // past each block's d (and m)
    codes.row_stride = row_bytes;
    codes.chunk_stride = bb;
    codes.split_halves = true;
    pack_q4_codes(w, 0, n, codes, panel);
    for (int64_t g = 0; g < cols / 32; ++g) {  // the scales as stored: f16 d (and m) per block
        uint8_t* blk = panel + g * q4_group_bytes(w);
        for (int64_t i = 0; i < n; ++i) {
            const uint8_t* s = src + i * row_bytes + g * bb;
            std::memcpy(blk + 2 * i, s, 2);
            if (asym) std::memcpy(blk + 32 + 2 * i, s + 2, 2);
        }
    }
}

namespace {
// One panel of row-major matrix w's panel layout; a panel of n < 16 rows is zeroed first, so its
// padding rows have zero codes and scales.
WeightMatrix rows_panel_layout(const WeightMatrix& w, int64_t n, uint8_t* panel) {
    WeightMatrix pw = w;
    pw.row_major = false;
    pw.rows = kPanelRows;
    if (n < kPanelRows) std::memset(panel, 0, static_cast<size_t>(quant_panel_bytes(pw)));
    return pw;
}
}  // namespace

void pack_q4_rows_panel(const WeightMatrix& w, int64_t p, uint8_t* panel) {
    util::check(w.type == WeightType::Q4 && w.row_major && p >= 0 && p * kPanelRows < w.rows,
                "pack_q4_rows_panel: not a row-major int4 matrix, or panel out of range");
    const int64_t r0 = p * kPanelRows, n = std::min<int64_t>(kPanelRows, w.rows - r0);
    const WeightMatrix pw = rows_panel_layout(w, n, panel);
    Q4CodeRows codes;
    codes.data = static_cast<const uint8_t*>(w.data) + r0 * (w.cols / 2);
    codes.row_stride = w.cols / 2;
    pack_q4_codes(pw, 0, n, codes, panel);
    const int64_t ng = w.cols / w.group;
    const auto* sc = static_cast<const uint8_t*>(w.scales) + r0 * ng * 2;  // any byte offset
    for (int64_t g = 0; g < ng; ++g) {
        uint8_t* b = panel + g * q4_group_bytes(pw);
        for (int64_t i = 0; i < n; ++i) std::memcpy(b + i * 2, sc + (i * ng + g) * 2, 2);
    }
}

void pack_fp8_rows_panel(const WeightMatrix& w, int64_t p, uint8_t* panel) {
    util::check(w.type == WeightType::FP8 && w.row_major && w.group > 0 && w.scale_block_rows > 0 &&
                    p >= 0 && p * kPanelRows < w.rows,
                "pack_fp8_rows_panel: not a row-major FP8 matrix, or panel out of range");
    const int64_t r0 = p * kPanelRows, n = std::min<int64_t>(kPanelRows, w.rows - r0);
    const WeightMatrix pw = rows_panel_layout(w, n, panel);
    pack_fp8_codes(pw, 0, n, static_cast<const uint8_t*>(w.data) + r0 * w.cols, panel);
    const auto* grid = static_cast<const float*>(w.scales);
    for (int64_t i = 0; i < n; ++i)
        pack_fp8_scales(pw, i, grid + (r0 + i) / w.scale_block_rows * fp8_blocks(w), panel);
}

int64_t rows_bytes(const WeightMatrix& w) {
    if (w.type == WeightType::FP8)  // codes, then the f32 grid: a scale per block of
                                    // scale_block_rows rows and group columns
        return w.rows * w.cols +
               (w.rows + w.scale_block_rows - 1) / w.scale_block_rows * fp8_blocks(w) * 4;
    return w.rows * (w.cols / 2) + w.rows * (w.cols / w.group) * 2;
}

QuantRow unpack_quant_row(const WeightMatrix& w, int64_t r) {
    util::check(r >= 0 && r < w.rows, "unpack_quant_row: row out of bounds");
    if (is_kquant(w.type)) {
        const uint8_t* b = kquant_row(w, r);
        return QuantRow{std::vector<uint8_t>(b, b + kquant_row_bytes(w)), {}, {}, 0.0f, {}};
    }
    if (w.type == WeightType::FP8 && w.row_major) {
        QuantRow row;
        const auto* codes = static_cast<const uint8_t*>(w.data) + r * w.cols;
        row.q.assign(codes, codes + w.cols);
        const auto* grid = static_cast<const float*>(w.scales);
        const float* rs = grid + r / w.scale_block_rows * fp8_blocks(w);
        row.s.assign(rs, rs + fp8_blocks(w));
        return row;
    }
    if (w.type == WeightType::Q4 && w.row_major) {
        QuantRow row;
        const int64_t ng = w.cols / w.group;
        const auto* codes = static_cast<const uint8_t*>(w.data) + r * (w.cols / 2);
        row.q.resize(static_cast<size_t>(w.cols));
        for (int64_t k = 0; k < w.cols; ++k)
            row.q[static_cast<size_t>(k)] = (codes[k / 2] >> (4 * (k % 2))) & 0x0f;
        row.d.resize(static_cast<size_t>(ng));  // the scales may sit at any byte offset
        std::memcpy(row.d.data(), static_cast<const uint8_t*>(w.scales) + r * ng * 2,
                    static_cast<size_t>(ng) * 2);
        return row;
    }
    const uint8_t* p =
        static_cast<const uint8_t*>(w.data) + (r / kPanelRows) * quant_panel_bytes(w);
    const int64_t lr = r % kPanelRows, lane = lr % 8;
    const bool high = lr >= 8;
    QuantRow row;
    row.q.resize(static_cast<size_t>(w.cols));
    if (w.type == WeightType::Q4) {
        const int64_t ng = w.cols / w.group, gb = q4_group_bytes(w);
        row.d.resize(static_cast<size_t>(ng));
        if (w.asym) row.m.resize(static_cast<size_t>(ng));
        for (int64_t g = 0; g < ng; ++g) {
            const uint8_t* b = p + g * gb;
            std::memcpy(&row.d[static_cast<size_t>(g)], b + lr * 2, 2);
            if (w.asym) std::memcpy(&row.m[static_cast<size_t>(g)], b + 32 + lr * 2, 2);
            const uint8_t* qs = b + (w.asym ? 64 : 32);
            for (int64_t i = 0; i < w.group; ++i) {
                const uint8_t byte = qs[(i / 4) * 32 + lane * 4 + i % 4];
                row.q[static_cast<size_t>(g * w.group + i)] = high ? byte >> 4 : byte & 0x0f;
            }
        }
    } else if (w.type == WeightType::Q8) {
        row.d.resize(static_cast<size_t>(q8_scale_count(w)));
        for (int64_t b = 0; b < q8_scale_count(w); ++b)
            std::memcpy(&row.d[static_cast<size_t>(b)], p + q8_scale_offset(w, b) + lr * 2, 2);
        for (int64_t k = 0; k < w.cols; ++k)
            row.q[static_cast<size_t>(k)] =
                p[q8_quad_offset(w, k) + (high ? 32 : 0) + lane * 4 + k % 4];
    } else {  // FP8: its scale (per channel) or block scales, then the codes
        const int64_t nb = fp8_blocks(w);
        if (w.group) row.s.resize(static_cast<size_t>(nb));
        float* s = w.group ? row.s.data() : &row.scale;
        for (int64_t b = 0; b < nb; ++b) std::memcpy(s + b, p + b * 64 + lr * 4, 4);
        for (int64_t k = 0; k < w.cols; ++k)
            row.q[static_cast<size_t>(k)] = p[nb * 64 + k * 16 + lr];
    }
    return row;
}

void dequant_row(const WeightMatrix& w, int64_t r, float* out) {
    if (is_kquant(w.type)) {
        util::check(r >= 0 && r < w.rows, "dequant_row: row out of bounds");
        kquant_dequant_row(w, r, out);
        return;
    }
    const QuantRow row = unpack_quant_row(w, r);
    for (int64_t k = 0; k < w.cols; ++k) {
        const uint8_t q = row.q[static_cast<size_t>(k)];
        if (w.type == WeightType::Q4) {
            const auto g = static_cast<size_t>(k / w.group);
            const float d = quant_scale_to_f32(w, row.d[g]);
            out[k] = w.asym ? std::fma(static_cast<float>(q), d, quant_scale_to_f32(w, row.m[g]))
                            : (static_cast<float>(q) - 8.0f) * d;
        } else if (w.type == WeightType::Q8) {
            const auto b = static_cast<size_t>(w.group == 0 ? 0 : k / 32);
            out[k] = static_cast<float>(static_cast<int8_t>(q)) * quant_scale_to_f32(w, row.d[b]);
        } else {
            out[k] = tensor::fp8_e4m3_to_f32(q) *
                     (w.group ? row.s[static_cast<size_t>(k / w.group)] : row.scale);
        }
    }
}

namespace detail {
// matmul_quant_avx2.cpp (declared here: the AVX2 TU includes no shared header but
// kernels_internal.h, see the ODR note there).
void quantize_acts_avx2(const float* x, int64_t n, int64_t cols, int8_t* xq, float* xd, int32_t* xs,
                        int32_t* xz);
}  // namespace detail

namespace {
// The xz word of one 32-block from its codes (matmul_quant.h).
int32_t zero_point_pairs(const int8_t* q) {
    int32_t lo = 0, hi = 0;
    for (int64_t i = 0; i < kActBlock; ++i) (i % 4 < 2 ? lo : hi) += q[i];
    const auto h16 = [](int32_t sum) {
        return static_cast<uint32_t>(static_cast<uint16_t>(static_cast<int16_t>(-8 * sum)));
    };
    return static_cast<int32_t>(h16(lo) | h16(hi) << 16);
}

void quantize_acts_scalar(const float* x, int64_t n, int64_t cols, int8_t* xq, float* xd,
                          int32_t* xs, int32_t* xz) {
    const int64_t nb = cols / kActBlock;
    for (int64_t t = 0; t < n; ++t)
        for (int64_t b = 0; b < nb; ++b) {
            const float* v = x + t * cols + b * kActBlock;
            int8_t* q = xq + t * cols + b * kActBlock;
            float a = 0.0f;
            for (int64_t i = 0; i < kActBlock; ++i) a = std::fmax(a, std::fabs(v[i]));
            const float d = a / 127.0f;
            const float id = a > 0.0f ? 127.0f / a : 0.0f;
            int32_t s = 0;
            for (int64_t i = 0; i < kActBlock; ++i) {
                float f = std::nearbyint(v[i] * id);
                f = f > 127.0f ? 127.0f : (f < -127.0f ? -127.0f : f);
                if (!(f == f)) f = 0.0f;  // NaN activations: no UB in the int conversion
                q[i] = static_cast<int8_t>(f);
                s += q[i];
            }
            xd[t * nb + b] = d;
            xs[t * nb + b] = s;
            if (xz) xz[t * nb + b] = zero_point_pairs(q);
        }
}
}  // namespace

void quantize_acts_isa(Isa isa, const float* x, int64_t n, int64_t cols, int8_t* xq, float* xd,
                       int32_t* xs, int32_t* xz) {
    if (isa != Isa::Scalar && isa_supported(isa)) {  // AVX-512 machines use the AVX2 variant
        detail::quantize_acts_avx2(x, n, cols, xq, xd, xs, xz);
        return;
    }
    quantize_acts_scalar(x, n, cols, xq, xd, xs, xz);
}

void quantize_acts(const float* x, int64_t n, int64_t cols, int8_t* xq, float* xd, int32_t* xs,
                   int32_t* xz) {
    quantize_acts_isa(active_isa(), x, n, cols, xq, xd, xs, xz);
}

}  // namespace warden::kernels
