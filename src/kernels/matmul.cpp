// Dispatch + threading for matmul.h, and the packed-layout helpers. Output rows are split over
// the pool in whole 16-row panels (kPanelRows; each panel is one contiguous weight stream).
// Since every ISA computes each output
// as the same sequential fma chain, the split and the ISA never change a result bit.
#include "kernels/matmul.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/decode_tuning.h"
#include "kernels/kernels_internal.h"
#include "kernels/matmul_bf16_tiles.h"
#include "kernels/matmul_kquant.h"
#include "kernels/matmul_quant.h"
#include "kernels/ops.h"
#include "tensor/float_convert.h"
#include "util/assert.h"
#include "util/error.h"

namespace warden::kernels {
namespace {

const detail::MatmulTable& table(Isa isa) {
    if (!isa_supported(isa)) isa = Isa::Scalar;  // never run instructions the CPU lacks
    switch (isa) {
        // AVX-512: VNNI kernels for int4/int8 weights with int8 activations (AVX2 needs three
        // instructions per multiply-add), and zmm f32/bf16 kernels for several tokens (twice the
        // multiply-adds per instruction where prefill is FMA-bound). By the contract in matmul.h /
        // matmul_quant.h the results are identical in every ISA.
        case Isa::AVX512:
            return detail::matmul_avx512();
        // AMX: the AVX-512 table with the multi-token W4A8/W8A8 GEMMs on tiles (bit-identical to
        // the VNNI kernels: integer block sums are exact; matmul_quant_amx.cpp), and bf16 weights
        // with a tile copy on AMX-BF16 at every token count (matmul_bf16_amx.cpp).
        case Isa::AMX:
            return detail::matmul_amx();
        case Isa::AVX2:
            return detail::matmul_avx2();
        case Isa::Scalar:
            break;
    }
    return detail::matmul_scalar();
}

bool is_quant(const WeightMatrix& w) {
    return w.type == WeightType::Q4 || w.type == WeightType::Q8 || w.type == WeightType::FP8 ||
           is_kquant(w.type);
}

// W4A8/W8A8 matrices take their activations quantized to int8 (kernels/matmul_quant.h).
bool int_acts(const WeightMatrix& w) {
    return w.type == WeightType::Q8 || (w.type == WeightType::Q4 && !w.act_f32) ||
           is_kquant(w.type);
}

// bf16 weights that take the AMX-BF16 tile kernel on table t: those with a tile copy, where t has
// the kernel, and tile-only matrices (no panels left, kernels/matmul_bf16_tiles.h) on any table.
// The choice never depends on the token count (kernels/matmul_bf16_tiles.h).
bool takes_bf16_tiles(const WeightMatrix& w, const detail::MatmulTable& t) {
    return w.type == WeightType::BF16 && w.tiles != nullptr &&
           (t.bf16_tiles != nullptr || w.data == nullptr);
}

// The tile kernel of table t, or, where t has none (a tile-only matrix on an ISA set after load),
// the same kernel on the software tile model: the same arithmetic, bit for bit.
auto bf16_tile_kernel(const detail::MatmulTable& t) {
    return t.bf16_tiles != nullptr ? t.bf16_tiles : &detail::mm_bf16_amx_tiles_emulated;
}

// x split into bf16 hi and lo halves for the tile kernel (split_bf16_acts).
struct SplitActs {
    const detail::bf16* hi = nullptr;
    const detail::bf16* lo = nullptr;
};

struct QuantizedActs {
    const int8_t* xq = nullptr;
    const float* xd = nullptr;
    const int32_t* xs = nullptr;
    const int32_t* xz = nullptr;
};
// Activation scratch of one matmul call (matmul_grouped or matmul_rows), per thread and reused:
// grown, never shrunk, so steady-state decode allocates nothing. A call sizes it once with
// begin() (later growth would move what earlier groups point at), then takes consecutive pieces.
struct ActScratch {
    std::vector<int8_t> xq;  // int8 codes of every quantized x, one after another
    std::vector<float> xd;
    std::vector<int32_t> xs, xz;
    std::vector<float> x_e4m3;         // x * 2^120 of every FP8 one-token input
    std::vector<detail::bf16> xsplit;  // hi then lo halves of every input split for bf16 tiles
    size_t oq = 0, ob = 0, oe = 0, osplit = 0;  // taken so far in this call

    void begin(size_t nq, size_t nb, size_t ne, size_t ns = 0) {
        if (xq.size() < nq) xq.resize(nq);
        if (xd.size() < nb) {
            xd.resize(nb);
            xs.resize(nb);
            xz.resize(nb);
        }
        if (x_e4m3.size() < ne) x_e4m3.resize(ne);
        if (xsplit.size() < ns) xsplit.resize(ns);
        oq = ob = oe = osplit = 0;
    }
    // Elements split_bf16 takes for x [n, cols].
    static size_t split_elems(int64_t n, int64_t cols) {
        return 2 * static_cast<size_t>(bf16_tile_tokens(n) * bf16_tile_cols(cols));
    }
    // x [n, cols] split into hi and lo (kernels/matmul_bf16_tiles.h) in the next elements.
    SplitActs split_bf16(const float* x, int64_t n, int64_t cols) {
        const size_t half = split_elems(n, cols) / 2;
        detail::bf16* hi = xsplit.data() + osplit;
        split_bf16_acts(x, n, cols, hi, hi + half);
        osplit += 2 * half;
        return {hi, hi + half};
    }
    // x [n, cols] quantized to int8 (kernels/matmul_quant.h) in the next n * cols codes.
    QuantizedActs quantize(const float* x, int64_t n, int64_t cols) {
        const QuantizedActs a{xq.data() + oq, xd.data() + ob, xs.data() + ob, xz.data() + ob};
        quantize_acts(x, n, cols, xq.data() + oq, xd.data() + ob, xs.data() + ob, xz.data() + ob);
        oq += static_cast<size_t>(n * cols);
        ob += static_cast<size_t>(n * cols / kActBlock);
        return a;
    }
    // x * 2^120 (one token row of `cols`) for the FP8 kernels' multiply-free widening
    // (detail::QuantArgs::x_e4m3); null when some element would not be finite (|x| >= 2^8, inf,
    // NaN), and the kernels then widen as before.
    const float* scaled_x(const float* x, int64_t cols) {
        float* out = x_e4m3.data() + oe;
        oe += static_cast<size_t>(cols);
        bool overflow = false;  // also set by NaN (the comparison is false)
        for (int64_t k = 0; k < cols; ++k) {
            const float v = x[k] * detail::kE4m3Pow120;
            out[k] = v;
            overflow |= !(std::fabs(v) <= std::numeric_limits<float>::max());
        }
        return overflow ? nullptr : out;
    }
};

// Whether a matmul of w over n tokens on `isa` gets x * 2^120 (QuantArgs::x_e4m3): FP8 at one
// token on the SIMD kernels; the scalar ones widen with the multiply and ignore it.
bool takes_e4m3_scaled_x(const WeightMatrix& w, int64_t n, Isa isa) {
    return w.type == WeightType::FP8 && n == 1 && isa != Isa::Scalar;
}

// Per-call arguments of a quantized matmul (acts: the quantized x when int_acts(w)).
detail::QuantArgs quant_args(const WeightMatrix& w, const float* x, int64_t n, float* y,
                             const QuantizedActs& acts) {
    detail::QuantArgs a{};
    switch (w.type) {
        case WeightType::Q4:
            a.kind = w.row_major ? detail::kQuantKindQ4Rows : 0;
            break;
        case WeightType::Q8:
            a.kind = 1;
            break;
        case WeightType::FP8:
            a.kind = w.row_major ? detail::kQuantKindFp8Rows : 2;
            break;
        default:
            a.kind = kquant_kind(w.type);
            break;
    }
    a.rows = w.rows;
    a.cols = w.cols;
    a.data = static_cast<const uint8_t*>(w.data);
    a.group = w.group;
    a.asym = w.asym;
    a.bf16_scales = w.bf16_scales;
    a.act_f32 = w.act_f32;
    a.scales = static_cast<const uint8_t*>(w.scales);
    a.scale_block_rows = w.scale_block_rows;
    a.x = x;
    a.n = n;
    a.y = y;
    a.ldy = w.rows;
    a.xq = acts.xq;
    a.xd = acts.xd;
    a.xs = acts.xs;
    a.xz = acts.xz;
    return a;
}

// Fewest tokens for which a W4A8 call gets unpack scratch: two 4-token passes, so at least one
// pass reads the unpacked codes.
constexpr int64_t kQ4UnpackMinTokens = 8;

// The calling thread's unpack scratch (detail::QuantArgs::unpack) of at least `bytes` bytes:
// grown, never shrunk, so steady-state steps allocate nothing.
uint8_t* unpack_scratch(int64_t bytes) {
    thread_local std::vector<uint8_t> buf;
    const auto need = static_cast<size_t>(bytes) + 32;
    if (buf.size() < need) buf.resize(need);
    const auto addr = reinterpret_cast<uintptr_t>(buf.data());
    return buf.data() + ((32 - addr % 32) % 32);
}

// Bytes of the Q5_0 / Q5_1 / IQ4_NL unpack scratch over n tokens (detail::QuantArgs::unpack).
int64_t kq5_unpack_bytes(int64_t cols, int64_t n) {
    const int64_t nb = cols / 32, nbp = (nb + 7) / 8 * 8;
    if (n == 1) return 40 * nbp;
    return std::max(40 * nbp + (n >= 8 ? detail::kQ5UnpackTokens * (cols + 8 * nb) : 0),
                    68 * nbp + detail::kQ5UnpackTokens * 36 * nbp);
}

// Q8_0 / Q4_0 / Q4_1 / row-major int4 and FP8 (read in place, row after row) over several
// tokens: each 16-row panel is formed in the calling thread's scratch in the panel layout and
// handed to that format's kernel of table t, which is written for many tokens (activations
// broadcast against 16 rows at once, AMX tiles where there are some). Both compute the panel
// format's arithmetic, so the outputs are the one-token kernel's bit for bit; forming a panel costs
// about what reading it does, once per call.
constexpr int64_t kPanelContractMinTokens = 2;
void blocks_as_panels(const detail::MatmulTable& t, const WeightMatrix& w,
                      const detail::QuantArgs& qa, int64_t r0, int64_t r1) {
    const bool q8 = qa.kind == detail::kQuantKindQ8_0, rows = qa.kind == detail::kQuantKindQ4Rows,
               fp8 = qa.kind == detail::kQuantKindFp8Rows, asym = qa.kind == detail::kQuantKindQ4_1;
    const int64_t row_bytes = rows || fp8 ? 0 : kquant_row_bytes(w);
    WeightMatrix pw;  // one panel of the panel format
    pw.type = q8 ? WeightType::Q8 : fp8 ? WeightType::FP8 : WeightType::Q4;
    pw.rows = kPanelRows;
    pw.cols = w.cols;
    pw.group = rows || fp8 ? w.group : 32;
    pw.asym = asym;
    pw.bf16_scales = rows && w.bf16_scales;
    const int64_t panel_bytes = quant_panel_bytes(pw);
    // The int4 kernel's own unpack scratch after the panel, where it takes one (run_rows).
    const bool unpack = !q8 && !fp8 && t.quant_uses_unpack && qa.n >= kQ4UnpackMinTokens;
    const int64_t unpack_bytes = unpack ? w.cols * kPanelRows : 0;
    uint8_t* panel = unpack_scratch((panel_bytes + 31) / 32 * 32 + unpack_bytes);
    detail::QuantArgs q = qa;
    q.kind = q8 ? 1 : fp8 ? 2 : 0;
    q.group = pw.group;
    q.asym = asym;
    q.bf16_scales = pw.bf16_scales;
    q.act_f32 = false;
    q.data = panel;
    q.unpack = unpack ? panel + (panel_bytes + 31) / 32 * 32 : nullptr;
    for (int64_t p0 = r0; p0 < r1;) {
        const int64_t base = p0 / kPanelRows * kPanelRows;
        const int64_t p1 = std::min(r1, base + kPanelRows);
        const int64_t n = std::min(w.rows, base + kPanelRows) - base;
        const uint8_t* src = static_cast<const uint8_t*>(w.data) + base * row_bytes;
        if (fp8)
            pack_fp8_rows_panel(w, base / kPanelRows, panel);
        else if (rows)
            pack_q4_rows_panel(w, base / kPanelRows, panel);
        else if (q8)
            pack_q8_0_panel(src, row_bytes, n, w.cols, panel);
        else
            pack_q4_block_panel(src, row_bytes, n, w.cols, asym, panel);
        q.rows = n;
        q.y = qa.y + base;
        t.quant(q, p0 - base, p1 - base);
        p0 = p1;
    }
}

// Rows [r0, r1) of one matrix; qa: its quant_args when it is quantized, sx: its split
// activations when it takes the bf16 tiles.
void run_rows(const detail::MatmulTable& t, const WeightMatrix& w, const float* x, int64_t n,
              float* y, int64_t r0, int64_t r1, const detail::QuantArgs& qa, const SplitActs& sx) {
    if (takes_bf16_tiles(w, t)) {
        const detail::Bf16TileArgs a{
            static_cast<const uint8_t*>(w.tiles), w.rows, w.cols, sx.hi, sx.lo, n, y, w.rows};
        bf16_tile_kernel(t)(a, r0, r1);
    } else if (is_quant(w) && detail::kquant_kind_is_panel_contract(qa.kind) &&
               n >= kPanelContractMinTokens) {
        blocks_as_panels(t, w, qa, r0, r1);
    } else if (is_quant(w)) {
        // Q5_0 / Q5_1 / IQ4_NL at any token count: the SIMD kernels unpack each row once into it
        // (the scalar one ignores it).
        // Q3_K: each token's per-super-block terms, formed once per call (32 bytes each); Q2_K:
        // each token's 16-weight activation sums (32 bytes per super-block).
        const bool q5 = qa.kind == detail::kQuantKindQ5_0 || qa.kind == detail::kQuantKindQ5_1 ||
                        qa.kind == detail::kQuantKindIQ4NL;
        const bool q3 = qa.kind == detail::kQuantKindQ3K || qa.kind == detail::kQuantKindQ2K;
        if ((t.quant_uses_unpack && qa.kind == 0 && !qa.act_f32 && n >= kQ4UnpackMinTokens) || q5 ||
            q3) {
            detail::QuantArgs q = qa;
            q.unpack = unpack_scratch(q5   ? kq5_unpack_bytes(w.cols, n)
                                      : q3 ? n * (w.cols / 256) * 32
                                           : w.cols * kPanelRows);
            t.quant(q, r0, r1);
            return;
        }
        t.quant(qa, r0, r1);
    } else if (w.type == WeightType::BF16) {
        t.bf16(static_cast<const detail::bf16*>(w.data), w.cols, x, n, y, w.rows, r0, r1);
    } else {
        t.f32(static_cast<const float*>(w.data), w.cols, x, n, y, w.rows, r0, r1);
    }
}

// Fewest panels one grab of matmul_grouped takes: two, so batch-1 W4A8/W8A8 on AVX-512 can read
// them as a pair (matmul_quant_avx512.cpp).
constexpr int64_t kMinGrab = 2;

// One matrix of a matmul_grouped call, with its group's input.
struct GroupEntry {
    const WeightMatrix* w = nullptr;
    float* y = nullptr;
    const float* x = nullptr;
    int64_t n = 0;
    detail::QuantArgs qa{};  // when the matrix is quantized
    SplitActs sx{};          // when it takes the bf16 tiles
};

// The calling thread's storage for matmul_grouped and matmul_rows: grown, never shrunk, so
// steady-state decode steps allocate nothing. Neither is re-entered on one thread (pool jobs run
// kernels only), so one set per thread suffices.
struct GroupedScratch {
    std::vector<GroupEntry> entries;
    std::vector<int64_t> panel0;  // entry i owns global panels [panel0[i], panel0[i+1])
    ActScratch acts;
};
GroupedScratch& grouped_scratch() {
    thread_local GroupedScratch s;
    return s;
}

// One matmul_grouped call: the panels of all matrices in one global numbering, handed out to
// the pool's threads in shrinking grabs from a shared counter.
struct GroupedJob {
    const detail::MatmulTable* t = nullptr;
    const GroupEntry* entries = nullptr;
    const int64_t* panel0 = nullptr;
    size_t count = 0;
    // Each grab: 1/(grab_div * threads) of the panels left (DecodeTuning's default unless batch 1).
    int64_t grab_div = DecodeTuning{}.grab_div;
    std::atomic<int64_t> next{0};

    // Global panels [p0, p1) (may span matrices).
    void run_panels(int64_t p0, int64_t p1) const {
        // The first entry whose panels end after p0.
        size_t i = static_cast<size_t>(std::upper_bound(panel0 + 1, panel0 + count + 1, p0) -
                                       (panel0 + 1));
        for (; i < count && p0 < p1; ++i) {
            if (p0 >= panel0[i + 1]) continue;  // a matrix of 0 rows
            const int64_t e = std::min(p1, panel0[i + 1]);
            const GroupEntry& g = entries[i];
            const int64_t r0 = (p0 - panel0[i]) * kPanelRows,
                          r1 = std::min(g.w->rows, (e - panel0[i]) * kPanelRows);
            run_rows(*t, *g.w, g.x, g.n, g.y, r0, r1, g.qa, g.sx);
            p0 = e;
        }
    }
};

// What one matmul_grouped group's matrices need of its x: int8-quantized activations (some W4A8 /
// W8A8 matrix), x * 2^120 (some FP8 matrix at one token), x split for the bf16 tiles (some bf16
// matrix with a tile copy, on a table with the kernel).
struct GroupNeeds {
    bool int_acts = false, scaled_x = false, split = false;
};
GroupNeeds group_needs(const MatmulGroup& g, Isa isa, const detail::MatmulTable& t) {
    GroupNeeds need;
    for (const MatmulOut& o : g.outs)
        if (takes_bf16_tiles(*o.w, t)) {
            need.split = true;
        } else if (is_quant(*o.w)) {
            need.int_acts |= int_acts(*o.w);
            need.scaled_x |= takes_e4m3_scaled_x(*o.w, g.n, isa);
        }
    return need;
}

}  // namespace

void pack_weight_row(WeightType t, int64_t cols, int64_t r, const float* row, void* packed) {
    const int64_t base = (r / kPanelRows) * cols * kPanelRows + r % kPanelRows;
    if (t == WeightType::BF16) {
        auto* p = static_cast<uint16_t*>(packed) + base;
        for (int64_t k = 0; k < cols; ++k) p[k * kPanelRows] = tensor::f32_to_bf16(row[k]);
    } else {
        auto* p = static_cast<float*>(packed) + base;
        for (int64_t k = 0; k < cols; ++k) p[k * kPanelRows] = row[k];
    }
}

namespace {

uint16_t quiet_bf16(uint16_t h) {
    return (h & 0x7fffu) > 0x7f80u ? static_cast<uint16_t>(h | 0x40u) : h;  // as f32_to_bf16
}

#if defined(__SSE2__)
// Columns [0, cols rounded down to 8) of one whole panel (kPanelRows source rows from src, row
// stride cols): 8 x 8 transposes of 16-bit codes in SSE2 registers (x86-64's baseline, so no
// dispatch), NaNs quieted lane by lane as quiet_bf16 does. Returns the columns done. The scalar
// loop below took a fifth of a bf16 safetensors checkpoint's load, two bytes at a time from 16
// rows.
int64_t pack_bf16_panel_sse2(int64_t cols, const uint8_t* src, uint16_t* dst) {
    static_assert(kPanelRows == 16);
    const __m128i mag = _mm_set1_epi16(0x7fff), inf = _mm_set1_epi16(0x7f80),
                  quiet = _mm_set1_epi16(0x40);
    int64_t k = 0;
    for (; k + 8 <= cols; k += 8)
        for (int h = 0; h < 2; ++h) {  // rows 0-7, then 8-15
            __m128i r[8];
            for (int i = 0; i < 8; ++i) {
                const __m128i v = _mm_loadu_si128(
                    reinterpret_cast<const __m128i*>(src + ((h * 8 + i) * cols + k) * 2));
                const __m128i nan = _mm_cmpgt_epi16(_mm_and_si128(v, mag), inf);
                r[i] = _mm_or_si128(v, _mm_and_si128(nan, quiet));
            }
            __m128i a[8], b[8];
            for (int i = 0; i < 4; ++i) {  // pairs of rows interleaved: columns 0-3, 4-7
                a[2 * i] = _mm_unpacklo_epi16(r[2 * i], r[2 * i + 1]);
                a[2 * i + 1] = _mm_unpackhi_epi16(r[2 * i], r[2 * i + 1]);
            }
            for (int i = 0; i < 2; ++i) {  // quads of rows: columns 0-1, 2-3, 4-5, 6-7
                b[4 * i] = _mm_unpacklo_epi32(a[4 * i], a[4 * i + 2]);
                b[4 * i + 1] = _mm_unpackhi_epi32(a[4 * i], a[4 * i + 2]);
                b[4 * i + 2] = _mm_unpacklo_epi32(a[4 * i + 1], a[4 * i + 3]);
                b[4 * i + 3] = _mm_unpackhi_epi32(a[4 * i + 1], a[4 * i + 3]);
            }
            for (int j = 0; j < 4; ++j) {  // all 8 rows: column 2j, then 2j + 1
                uint16_t* d = dst + (k + 2 * j) * kPanelRows + h * 8;
                _mm_storeu_si128(reinterpret_cast<__m128i*>(d), _mm_unpacklo_epi64(b[j], b[4 + j]));
                _mm_storeu_si128(reinterpret_cast<__m128i*>(d + kPanelRows),
                                 _mm_unpackhi_epi64(b[j], b[4 + j]));
            }
        }
    return k;
}
#endif

}  // namespace

void pack_bf16_rows(int64_t cols, int64_t r0, int64_t r1, const uint8_t* src, void* packed) {
    auto* out = static_cast<uint16_t*>(packed);
    for (int64_t p0 = r0; p0 < r1;) {
        // Rows [p0, p1) share a panel: its columns are written in order, kPanelRows apart.
        const int64_t p1 = std::min(r1, (p0 / kPanelRows + 1) * kPanelRows);
        uint16_t* dst = out + (p0 / kPanelRows) * cols * kPanelRows + p0 % kPanelRows;
        const uint8_t* s0 = src + (p0 - r0) * cols * 2;
        int64_t k0 = 0;
#if defined(__SSE2__)
        if (p1 - p0 == kPanelRows) k0 = pack_bf16_panel_sse2(cols, s0, dst);
#endif
        for (int64_t k = k0; k < cols; ++k)
            for (int64_t i = 0; i < p1 - p0; ++i) {
                uint16_t h;
                std::memcpy(&h, s0 + (i * cols + k) * 2, 2);
                dst[k * kPanelRows + i] = quiet_bf16(h);
            }
        p0 = p1;
    }
}

namespace {
// Row-major matrices are matmul weights only as quantized codes read in place (int4 rows,
// FP8 rows); row-major f32 / bf16 rows are lookup tables (mapped embeddings).
void check_matmul_weights(const WeightMatrix& w) {
    util::check(!w.row_major || w.type == WeightType::Q4 || w.type == WeightType::FP8,
                "matmul: a row-major lookup table is not a matmul's weights");
}
}  // namespace

void unpack_weight_row(const WeightMatrix& w, int64_t r, float* out) {
    util::check(r >= 0 && r < w.rows, "unpack_weight_row: row out of bounds");
    if (is_quant(w)) {
        dequant_row(w, r, out);
        return;
    }
    if (w.row_major) {
        util::check(w.type == WeightType::BF16 || w.type == WeightType::F32,
                    "unpack_weight_row: row-major rows are f32 or bf16");
        if (w.type == WeightType::F32) {
            std::memcpy(out, static_cast<const float*>(w.data) + r * w.cols,
                        static_cast<size_t>(w.cols) * sizeof(float));
        } else {
            bf16_to_f32_row(static_cast<const bf16_t*>(w.data) + r * w.cols, out, w.cols);
        }
        return;
    }
    if (w.type == WeightType::BF16 && w.data == nullptr) {
        unpack_bf16_tile_row(w, r, out);
        return;
    }
    const int64_t base = (r / kPanelRows) * w.cols * kPanelRows + r % kPanelRows;
    if (w.type == WeightType::BF16) {
        const auto* p = static_cast<const uint16_t*>(w.data) + base;
        for (int64_t k = 0; k < w.cols; ++k) out[k] = tensor::bf16_to_f32(p[k * kPanelRows]);
    } else {
        const auto* p = static_cast<const float*>(w.data) + base;
        for (int64_t k = 0; k < w.cols; ++k) out[k] = p[k * kPanelRows];
    }
}

WeightMatrix weight_layout(const tensor::WeightFormat& f, int64_t rows, int64_t cols) {
    WeightMatrix w;
    w.type = f.type;
    w.rows = rows;
    w.cols = cols;
    w.group = f.group;
    w.asym = f.asym;
    w.bf16_scales = f.bf16_scales;
    w.act_f32 = f.act_f32;
    return w;
}

int64_t weight_bytes(const tensor::WeightFormat& f, int64_t rows, int64_t cols) {
    if (!f.quantized())
        return packed_weight_elems(rows, cols) * (f.type == WeightType::BF16 ? 2 : 4);
    return quant_packed_bytes(weight_layout(f, rows, cols));
}

void matmul_rows(Isa isa, const WeightMatrix& w, const float* x, int64_t n, float* y,
                 int64_t row_begin, int64_t row_end) {
    WARDEN_ASSERT(row_begin >= 0 && row_begin <= row_end && row_end <= w.rows,
                  "matmul_rows: row range out of bounds");
    check_matmul_weights(w);
    if (n <= 0 || row_begin == row_end) return;
    detail::QuantArgs qa{};
    SplitActs sx{};
    const detail::MatmulTable& t = table(isa);
    if (takes_bf16_tiles(w, t)) {
        ActScratch& s = grouped_scratch().acts;
        s.begin(0, 0, 0, ActScratch::split_elems(n, w.cols));
        sx = s.split_bf16(x, n, w.cols);
    } else if (is_quant(w)) {
        check_quant_shape(w);
        const bool int8_x = int_acts(w), scaled = takes_e4m3_scaled_x(w, n, isa);
        ActScratch& s = grouped_scratch().acts;
        s.begin(int8_x ? static_cast<size_t>(n * w.cols) : 0,
                int8_x ? static_cast<size_t>(n * w.cols / kActBlock) : 0,
                scaled ? static_cast<size_t>(w.cols) : 0);
        qa = quant_args(w, x, n, y, int8_x ? s.quantize(x, n, w.cols) : QuantizedActs{});
        if (scaled) qa.x_e4m3 = s.scaled_x(x, w.cols);
    }
    run_rows(t, w, x, n, y, row_begin, row_end, qa, sx);
}

void matmul(const WeightMatrix& w, const float* x, int64_t n, float* y, util::ThreadPool& pool) {
    const MatmulOut o{&w, y};
    matmul_multi(std::span<const MatmulOut>(&o, 1), x, n, pool);
}

void matmul_multi(std::span<const MatmulOut> outs, const float* x, int64_t n,
                  util::ThreadPool& pool) {
    const MatmulGroup g{outs, x, n};
    matmul_grouped(std::span<const MatmulGroup>(&g, 1), pool);
}

void matmul_grouped(std::span<const MatmulGroup> groups, util::ThreadPool& pool) {
    const Isa isa = active_isa();
    const detail::MatmulTable& tab = table(isa);
    GroupedScratch& s = grouped_scratch();
    // Pass 1: check shapes and size the activation scratch of every group that needs it.
    size_t nq = 0, nb = 0, ne = 0, ns = 0, count = 0;
    bool one_token = true;  // batch 1: the decode tuning's grab size applies
    for (const MatmulGroup& g : groups) {
        if (g.n <= 0 || g.outs.empty()) continue;
        one_token = one_token && g.n == 1;
        const int64_t cols = g.outs[0].w->cols;
        for (const MatmulOut& o : g.outs) {
            const WeightMatrix& w = *o.w;
            util::check(w.rows >= 0 && w.cols >= 0, "matmul: negative weight shape");
            util::check(w.cols == cols, "matmul_multi: matrices with different input sizes");
            check_matmul_weights(w);
            if (is_quant(w)) check_quant_shape(w);
        }
        const GroupNeeds need = group_needs(g, isa, tab);
        if (need.split) ns += ActScratch::split_elems(g.n, cols);
        if (need.int_acts) {
            nq += static_cast<size_t>(g.n * cols);
            nb += static_cast<size_t>(g.n * cols / kActBlock);
        }
        if (need.scaled_x) ne += static_cast<size_t>(cols);
        count += g.outs.size();
    }
    if (count == 0) return;
    s.acts.begin(nq, nb, ne, ns);
    if (s.entries.size() < count) s.entries.resize(count);
    if (s.panel0.size() < count + 1) s.panel0.resize(count + 1);
    // Pass 2: quantize each group's activations once (for all its int8-activation matrices) and
    // lay the matrices out in one panel numbering.
    size_t i = 0;
    s.panel0[0] = 0;
    for (const MatmulGroup& g : groups) {
        if (g.n <= 0 || g.outs.empty()) continue;
        const int64_t cols = g.outs[0].w->cols;
        const GroupNeeds need = group_needs(g, isa, tab);
        const QuantizedActs acts =
            need.int_acts ? s.acts.quantize(g.x, g.n, cols) : QuantizedActs{};
        const SplitActs split = need.split ? s.acts.split_bf16(g.x, g.n, cols) : SplitActs{};
        const float* x_e4m3 = need.scaled_x ? s.acts.scaled_x(g.x, cols) : nullptr;
        for (const MatmulOut& o : g.outs) {
            GroupEntry& e = s.entries[i];
            e = GroupEntry{o.w, o.y, g.x, g.n, {}, {}};
            if (takes_bf16_tiles(*o.w, tab)) {
                e.sx = split;
            } else if (is_quant(*o.w)) {
                e.qa = quant_args(*o.w, g.x, g.n, o.y, acts);
                if (takes_e4m3_scaled_x(*o.w, g.n, isa)) e.qa.x_e4m3 = x_e4m3;
            }
            s.panel0[i + 1] = s.panel0[i] + (o.w->rows + kPanelRows - 1) / kPanelRows;
            ++i;
        }
    }
    GroupedJob job;
    job.t = &tab;
    job.entries = s.entries.data();
    job.panel0 = s.panel0.data();
    job.count = count;
    const int64_t total = s.panel0[count];
    if (total == 0) return;
    const int nt = pool.size();
    if (nt == 1 || total == 1) {
        job.run_panels(0, total);
        return;
    }
    // Guided self-scheduling: each grab takes 1/(div * threads) of the panels still left, at least
    // kMinGrab. Early grabs are long contiguous runs (few restarts of the weight streams); the last
    // ones are a few panels, so the threads finish within a few panels' time of each other. Fixed
    // grabs of total / (8 * threads) left one thread waiting ~half a grab per matmul (at batch 1
    // on two threads ~40-80 us for an FFN matrix, estimated from ~13 GB/s per thread); guided grabs
    // made 1B-shaped batch-1 decode 1-4% faster on AVX-512 and 4-7% on AVX2 (grab sizes per CPU:
    // docs/WEIGHT_QUANT.md, Decode tuning per CPU).
    // div is DecodeTuning's default (2) but at batch 1, where the decode tuning chooses it
    // (DecodeTuning::grab_div: the number of grabs against the finishing spread). A lambda
    // capturing one pointer fits in std::function's small buffer, so a decode matmul does no heap
    // allocation.
    if (one_token) job.grab_div = decode_tuning().grab_div;
    GroupedJob* jp = &job;
    pool.run([jp](int, int threads) {
        const int64_t tot = jp->panel0[jp->count],
                      divisor = jp->grab_div * static_cast<int64_t>(threads);
        int64_t p0 = jp->next.load(std::memory_order_relaxed);
        while (p0 < tot) {
            const int64_t c = std::max<int64_t>(kMinGrab, (tot - p0) / divisor);
            // A failed exchange reloads p0 (another thread grabbed first): size the grab again.
            if (!jp->next.compare_exchange_weak(p0, p0 + c, std::memory_order_relaxed)) continue;
            jp->run_panels(p0, std::min(tot, p0 + c));
            p0 = jp->next.load(std::memory_order_relaxed);
        }
    });
}

}  // namespace warden::kernels
