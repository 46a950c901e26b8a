#pragma once
// Per-ISA kernel entry points. Each ISA lives in its own translation unit (compiled with its
// own -m flags by file-name suffix) inside its own namespace; the dispatch files (ops.cpp,
// matmul.cpp) pick one of these tables at run time.
//
// ODR caution: the *_avx2.cpp / *_avx512.cpp / *_amx.cpp files must not odr-use inline functions or
// templates from shared headers (std::min, tensor::f32_to_bf16, ...). Such functions are
// emitted as weak symbols in every TU that uses them, and the linker may keep the copy that
// was compiled with AVX-512 instructions, which then crashes on older CPUs. Those files keep
// their helpers in an anonymous namespace and only include <immintrin.h> and this header.
#include <cstdint>

namespace warden::kernels::detail {

using bf16 = uint16_t;

// 2^120. An e4m3 code whose sign, exponent and mantissa bits are moved into an f32 (sign at bit
// 31, e.mmm at bits 26..20) is its value times 2^-120, exactly, subnormal codes included; the FP8
// kernels (matmul_quant_avx2/avx512, fp8_avx2.h, avx512_compat.h) multiply either the code or
// the activations (QuantArgs::x_e4m3, matmul.cpp) by this.
constexpr float kE4m3Pow120 = 0x1p120f;

// Calls f.template operator()<NT>(t) for consecutive tiles of tokens [t, t + NT) covering [0, n):
// tiles of kMax tokens, the last one of up to kLastMax (>= kMax: a short remainder joins the last
// full tile when the kernel runs that many tokens in one pass). The multi-token matmul kernels
// pass their own lambda, so every instantiation is that file's alone (built with its -m flags).
template <int NT, class F>
inline void token_tile_of(int64_t count, int64_t t, F& f) {
    if (count == NT)
        f.template operator()<NT>(t);
    else if constexpr (NT > 1)
        token_tile_of<NT - 1>(count, t, f);
}
template <int kMax, int kLastMax = kMax, class F>
inline void for_token_tiles(int64_t n, F&& f) {
    static_assert(kMax >= 1 && kLastMax >= kMax);
    int64_t t = 0;
    for (; n - t > kLastMax; t += kMax) f.template operator()<kMax>(t);
    if (t < n) token_tile_of<kLastMax>(n - t, t, f);
}

struct OpsTable {
    void (*rmsnorm)(const float* x, const float* w, float* y, int64_t n, float eps);
    void (*silu_mul)(const float* gate, const float* up, float* out, int64_t n);
    void (*softmax)(float* x, int64_t n);
    // softmax, also returning the max and the sum of exp(x - max) it normalized by (what
    // split-context attention needs to merge the softmaxes of context chunks).
    void (*softmax_stats)(float* x, int64_t n, float* max_out, float* sum_out);
    float (*dot_f32)(const float* a, const float* b, int64_t n);
    float (*dot_bf16)(const float* a, const bf16* b, int64_t n);
    void (*axpy_f32)(float a, const float* x, float* y, int64_t n);
    void (*axpy_bf16)(float a, const bf16* x, float* y, int64_t n);
    void (*f32_to_bf16_row)(const float* x, bf16* y, int64_t n);
    void (*bf16_to_f32_row)(const bf16* x, float* y, int64_t n);
    int64_t (*argmax)(const float* x, int64_t n);  // kernels/ops.h
};

// The scalar parts of kernels::argmax, shared by the SIMD kernels (ops_scalar.cpp; not inline,
// so no ISA's build of them is linked into another). argmax_scalar is the contract itself.
// argmax_merge finishes a SIMD pass: `lanes` candidates (each lane's largest value and the first
// index that had it; index -1: the lane saw nothing above -inf) merged to the first index of the
// largest, then x[i, n) in order. It returns 0 when nothing beat -inf (then every non-NaN value is
// -inf, x[0] among them, when the caller has checked that x[0] is not NaN).
int64_t argmax_scalar(const float* x, int64_t n);
int64_t argmax_merge(const float* lane_max, const int32_t* lane_idx, int lanes, const float* x,
                     int64_t i, int64_t n);

// y[t, r] = sum_k x[t, k] * W[r, k] for t in [0, n), r in [row_begin, row_end).
// W: [rows, cols] in the packed panel layout of kernels/matmul.h (panels of 16 output rows,
// element (r, k) at (r / 16) * cols * 16 + k * 16 + r % 16, padding rows zero; f32 or bf16
// bits), x: [n, cols], y: [n, ldy] with ldy >= rows; only columns [row_begin, row_end) of y
// are written. Every output is ONE sequential fma chain over k = 0..cols-1 starting from
// 0.0f (the bit-exactness contract of matmul.h), for any n and any row range. Kernels read
// the packed panels in place and need no scratch memory.
// A quantized matmul call (layouts and arithmetic: kernels/matmul_quant.h). xq/xd/xs/xz are the
// per-token activation blocks (W4A8 / W8A8), x the f32 activations (W4A16 / FP8).
struct QuantArgs {
    int kind;  // 0 = Q4, 1 = Q8, 2 = FP8, kQuantKindQ4K and after: GGUF blocks as stored
               // (kernels/matmul_kquant.h)
    int64_t rows, cols;
    const uint8_t* data;
    int64_t group;             // Q4: 32 or 128; Q8: 0 (a scale per row) or 32 (a scale per block);
                               // FP8: 0 (a scale per row) or the columns per scale (block-scaled)
    const uint8_t* scales;     // kQuantKindQ4Rows, kQuantKindFp8Rows: WeightMatrix::scales
    int64_t scale_block_rows;  // kQuantKindFp8Rows: WeightMatrix::scale_block_rows
    bool asym, bf16_scales, act_f32;
    const float* x;
    const int8_t* xq;
    const float* xd;
    const int32_t* xs;
    const int32_t* xz;
    int64_t n;
    float* y;
    int64_t ldy;
    // W4A8 and Q5_0 / Q5_1 / IQ4_NL: the calling thread's scratch (32-byte aligned), where the
    // kernel unpacks each panel's (W4A8: 16 * cols bytes) or row's codes to bytes once for all its
    // token passes; null: read the blocks in place. Never shared between threads. Set by
    // matmul.cpp's run_rows when it pays. Q5_0 / Q5_1 / IQ4_NL (nb = cols / 32, nbp = nb rounded up
    // to 8): codes[32 * nbp] bytes, d[nbp] and m[nbp] f32, then, at 8 tokens or more, the
    // transposed activations of kQ5UnpackTokens tokens: kQ5UnpackTokens * cols bytes, xd and xs
    // (kQ5UnpackTokens * nb f32 and int32); at one token the token's activations rearranged
    // (32 * nbp bytes) and its xd and xs (nbp each); IQ4_NL at more tokens without VNNI a row's
    // codes and their magnitudes (2 * 32 * nbp bytes), its d (nbp f32), then kQ5UnpackTokens
    // tokens' rearranged activations and xd (36 * nbp bytes each): kq5_unpack_bytes. Q3_K: n
    // tokens' per-super-block terms, 32 bytes each.
    uint8_t* unpack = nullptr;
    // FP8 at one token (n == 1): x * 2^120, when every element of it is finite (each |x| < 2^8);
    // null otherwise. A code widened without its * 2^120 (e4m3 value * 2^-120, exact, subnormal
    // codes included) times this is exactly the contract's product e4m3(code) * x, so the kernels
    // skip one multiply per 16 weights and keep the result bits. Set by matmul.cpp.
    const float* x_e4m3 = nullptr;
    // W4A8 on the AVX2 kernel: its software prefetch distance in bytes, or -1 for the kernel's
    // own (2048). The AVX-512 entry sets it from DecodeTuning::q4_avx2_prefetch when it hands batch
    // 1 to the AVX2 kernel (q4_avx2).
    int64_t q4_avx2_prefetch = -1;
};

// QuantArgs::kind of the GGUF-block layouts (kernels/matmul_kquant.h); every ISA's `quant` hands
// kinds >= kQuantKindQ4K to its mm_kquant_* kernel.
constexpr int kQuantKindQ4K = 3, kQuantKindQ5K = 4, kQuantKindQ6K = 5, kQuantKindQ5_0 = 6,
              kQuantKindQ5_1 = 7, kQuantKindQ2K = 8, kQuantKindQ3K = 9, kQuantKindIQ4NL = 10,
              kQuantKindIQ4XS = 11, kQuantKindQ8_0 = 12, kQuantKindQ4_0 = 13, kQuantKindQ4_1 = 14,
              kQuantKindQ4Rows = 15, kQuantKindFp8Rows = 16;
// The in-place kinds that compute a panel format's contract (kernels/matmul_kquant.h: Q8_0 is
// int8-g32's, Q4_0 / Q4_1 int4-g32's and int4-g32-asym's, Q4Rows and Fp8Rows (row-major int4
// and FP8, kernels/matmul_quant.h) int4's and fp8-bG's): one chain per row, not eight lanes.
inline bool kquant_kind_is_panel_contract(int kind) {
    return kind == kQuantKindQ8_0 || kind == kQuantKindQ4_0 || kind == kQuantKindQ4_1 ||
           kind == kQuantKindQ4Rows || kind == kQuantKindFp8Rows;
}
// Tokens whose activations one Q5_0 / Q5_1 / IQ4_NL row pass reads in the transposed layout.
constexpr int64_t kQ5UnpackTokens = 64;
// Per kind - kQuantKindQ4K: weights and bytes of one block (a 256-weight super-block or a 32-weight
// block).
constexpr int64_t kKQuantKindElems[] = {256, 256, 256, 32, 32, 256, 256,
                                        32,  256, 32,  32, 32, 32,  1};
constexpr int64_t kKQuantKindBytes[] = {144, 176, 210, 22, 24, 84, 110, 18, 136, 34, 18, 20, 16, 1};
void mm_kquant_scalar(const QuantArgs& a, int64_t row_begin, int64_t row_end);  // matmul_kquant.cpp
void mm_kquant_avx2(const QuantArgs& a, int64_t row_begin,
                    int64_t row_end);  // matmul_kquant_avx2.cpp
void mm_kquant_avx512(const QuantArgs& a, int64_t row_begin,
                      int64_t row_end);  // matmul_kquant_avx512.cpp

// int8-g32 (Q8 group 32): bytes of one 32-column block of a panel, its 16 u16 scales then 8
// quads of 16 rows x 4 codes (kernels/matmul_quant.h).
constexpr int64_t kQ8BlockBytes = 32 + 8 * 64;

// A bf16 matmul on AMX-BF16 tiles (layouts and arithmetic: kernels/matmul_bf16_tiles.h).
struct Bf16TileArgs {
    const uint8_t* tiles;  // the weights' tile copy
    int64_t rows, cols;
    const bf16* xhi;  // the split activations, [bf16_tile_tokens(n), bf16_tile_cols(cols)] each
    const bf16* xlo;
    int64_t n;
    float* y;
    int64_t ldy;
};

struct MatmulTable {
    void (*f32)(const float* w, int64_t cols, const float* x, int64_t n, float* y, int64_t ldy,
                int64_t row_begin, int64_t row_end);
    void (*bf16)(const bf16* w, int64_t cols, const float* x, int64_t n, float* y, int64_t ldy,
                 int64_t row_begin, int64_t row_end);
    // Rows per thread-split unit: one packed panel (16) for every ISA, so a panel's stream is
    // never shared between threads. Results do not depend on the split (see above).
    int64_t row_tile;
    // Quantized weights, rows [row_begin, row_end) for all n tokens.
    void (*quant)(const QuantArgs& a, int64_t row_begin, int64_t row_end);
    // Whether `quant` reads QuantArgs::unpack (multi-token W4A8 codes unpacked once per panel):
    // only the AVX2 kernel does, so the others are not handed a scratch buffer they ignore.
    bool quant_uses_unpack;
    // bf16 weights with a tile copy (WeightMatrix::tiles, kernels/matmul_bf16_tiles.h): the
    // AMX-BF16 kernel, on every token count; null where the table has none (every ISA but AMX with
    // AMX-BF16), and then the panel kernel `bf16` runs.
    void (*bf16_tiles)(const Bf16TileArgs& a, int64_t row_begin, int64_t row_end);
};

void mm_quant_avx2(const QuantArgs& a, int64_t row_begin,
                   int64_t row_end);  // matmul_quant_avx2.cpp
// AVX-512 VNNI for W4A8 and W8A8, the AVX2 kernels otherwise (matmul_quant_avx512.cpp).
void mm_quant_avx512(const QuantArgs& a, int64_t row_begin, int64_t row_end);

const OpsTable& ops_scalar();
const OpsTable& ops_avx2();
const OpsTable& ops_avx512();
const MatmulTable& matmul_scalar();
const MatmulTable& matmul_avx2();
// AVX-512: zmm f32/bf16 kernels for several tokens (one token: matmul_avx2's) and mm_quant_avx512
// (matmul_avx512.cpp).
const MatmulTable& matmul_avx512();
// AMX: matmul_avx512()'s table with `quant` = mm_quant_amx (matmul_quant_amx.cpp): W4A8 and W8A8
// over several tokens on AMX-INT8 tiles, everything else mm_quant_avx512; and, where the CPU has
// AMX-BF16, `bf16_tiles` = mm_bf16_amx_tiles for bf16 weights with a tile copy.
const MatmulTable& matmul_amx();
void mm_quant_amx(const QuantArgs& a, int64_t row_begin, int64_t row_end);
// The AMX-BF16 kernel (matmul_bf16_amx.cpp); matmul_amx()'s bf16_tiles where the CPU has AMX-BF16.
void mm_bf16_amx_tiles(const Bf16TileArgs& a, int64_t row_begin, int64_t row_end);
// The same kernel on the software tile model (matmul_bf16_amx_model.cpp): bit for bit the native
// kernel's results on any CPU, at a fraction of its speed.
void mm_bf16_amx_tiles_emulated(const Bf16TileArgs& a, int64_t row_begin, int64_t row_end);
// The tile kernel itself, for every token count (tests; the formats amx_quant_kind accepts).
void mm_quant_amx_tiles(const QuantArgs& a, int64_t row_begin, int64_t row_end);
// One tile instruction on the hardware (amx::tile_op<amx::Native>, kernels/amx_tile.h), for the
// tests that check the tile model against it on AMX hosts. Only call where Isa::AMX is supported.
void amx_tile_op_native(int op, int c_rows, int c_colsb, int a_colsb, const void* a, int64_t lda,
                        const void* b, int64_t ldb, void* c, int64_t ldc);
// Which QuantArgs the tile kernel computes: W4A8 (Q4, any group, sym or asym) and W8A8 (Q8 per
// channel or group 32). Internal linkage: the AVX-512/AMX files use it too (ODR note above).
static inline bool amx_quant_kind(const QuantArgs& a) {
    return (a.kind == 0 && !a.act_f32) || a.kind == 1;
}

}  // namespace warden::kernels::detail

namespace warden::kernels {
enum class Isa;
namespace detail {
// Table for an ISA the CPU supports (unsupported ISAs fall back to scalar). Defined in ops.cpp.
const OpsTable& ops_table(Isa isa);
}  // namespace detail
}  // namespace warden::kernels
