#pragma once
// Intel AMX tiles behind one small interface with two backends, so the same kernel source runs on
// the matrix engine (amx::Native, in a translation unit built with -mamx-tile -mamx-int8
// -mamx-bf16) and, on any CPU, on a software model of the instructions (amx::Model), which the
// tests check against scalar references and, on AMX hosts, against the hardware bit for bit.
//
// A backend is a struct of static functions; tile numbers are template arguments because the
// instructions encode them (GCC's intrinsics even paste them into the assembly text):
//   config(cfg) LDTILECFG         release()     TILERELEASE
//   zero<T>()   TILEZERO          load<T>(p, stride) TILELOADD     store<T>(p, stride) TILESTORED
//   dpbssd<C, A, B>() and dpbsud/dpbusd/dpbuud (int8 x int8 -> int32), dpbf16ps<C, A, B>()
// Native implements only the tile-number combinations the kernels use (a static_assert says when
// another is asked for); the model takes any.
//
// The model follows the pseudocode of Intel's SDM (palette 1: 8 tiles of at most 16 rows x 64
// bytes):
//   TILELOADD: rows[t] rows of colsb[t] bytes from p + r * stride; the rest of each row and the
//     rows past rows[t] become zero. TILESTORED writes rows[t] x colsb[t] bytes.
//   TDPB[SU][SU]D c, a, b: for m < c.rows, k < a.colsb / 4, n < c.colsb / 4:
//     c[m][n] += a[m].byte[4k + i] * b[k].byte[4n + i] over i = 0..3 (bytes signed or unsigned as
//     the name says: first letter a, second b), int32 arithmetic wrapping; bytes past c.colsb and
//     rows past c.rows become zero. Shapes must agree (a.rows == c.rows, a.colsb == 4 * b.rows,
//     b.colsb == c.colsb), as the instruction faults otherwise; the model aborts.
//   TDPBF16PS c, a, b (the current SDM's operation): per row m, two f32 chains per column n start
//     at 0: even[n] = fma(a[m].bf16[2k], b[k].bf16[2n], even[n]) and odd[n] likewise with
//     elements 2k+1, over k in order; then c[m][n] = c[m][n] + (even[n] + odd[n]). Every step
//     rounds to nearest even, treats denormal inputs (bf16 and f32 alike) as zero of the same
//     sign and flushes a tiny result (tininess detected after rounding, as x86 does) to zero of
//     the result's sign; MXCSR is neither read nor written. NaN results are NaN, but their
//     payload is not modelled (the tests compare NaN-ness only).
#include <cstdint>
#include <cstdio>
#include <cstdlib>

// GCC spells the target macros __AMX_TILE__ ..., clang __AMXTILE__ ...
#if (defined(__AMX_TILE__) && defined(__AMX_INT8__) && defined(__AMX_BF16__)) || \
    (defined(__AMXTILE__) && defined(__AMXINT8__) && defined(__AMXBF16__))
#include <immintrin.h>
#define WARDEN_AMX_NATIVE 1
#endif

namespace warden::kernels::amx {

constexpr int kTiles = 8, kMaxRows = 16, kMaxColsb = 64;

// LDTILECFG's 64-byte operand, palette 1.
struct alignas(64) TileConfig {
    uint8_t palette = 1;
    uint8_t start_row = 0;
    uint8_t reserved[14] = {};
    uint16_t colsb[16] = {};
    uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

// Everything below has internal linkage: the model and the backends are compiled into native-ISA
// and portable translation units alike, whose copies must never be merged by the linker.
namespace {

inline uint32_t f32_bits(float f) {
    uint32_t u;
    __builtin_memcpy(&u, &f, 4);
    return u;
}
inline float bits_f32(uint32_t u) {
    float f;
    __builtin_memcpy(&f, &u, 4);
    return f;
}

// Denormal (or zero) f32 -> zero of the same sign.
inline float daz(float x) {
    const uint32_t u = f32_bits(x);
    return (u & 0x7f800000u) == 0 ? bits_f32(u & 0x80000000u) : x;
}

// a * b + c with one rounding to nearest even, denormal inputs read as zero and a tiny result
// flushed to zero. Tininess after rounding: the exact result is tiny when, rounded to f32's
// precision with an unbounded exponent, it is below 2^-126 in magnitude. fmaf rounds to the
// denormal grid instead, which decides the same except when it returns exactly +-2^-126: then the
// product is recomputed 2^64 times larger (a normal result, so rounded with f32's full precision)
// to see which side of 2^-126 the unbounded rounding falls on.
inline float fma_daz_ftz(float a, float b, float c) {
    a = daz(a);
    b = daz(b);
    c = daz(c);
    const float r = __builtin_fmaf(a, b, c);
    const uint32_t u = f32_bits(r);
    const uint32_t mag = u & 0x7fffffffu;
    if (mag >= 0x00800000u && mag != 0x00800000u) return r;   // normal, above 2^-126, inf, NaN
    if (mag < 0x00800000u) return bits_f32(u & 0x80000000u);  // denormal or zero: flushed
    // |r| == 2^-126. A result this small from operands this large is impossible unless both
    // |a| and |b| stay below 2^64 or one of them is scaled: scale the smaller one.
    constexpr float k64 = 0x1p64f;
    const bool scale_a = __builtin_fabsf(a) <= __builtin_fabsf(b);
    const float s =
        scale_a ? __builtin_fmaf(a * k64, b, c * k64) : __builtin_fmaf(a, b * k64, c * k64);
    return __builtin_fabsf(s) < 0x1p-62f ? bits_f32(u & 0x80000000u) : r;
}

[[noreturn]] inline void model_fault(const char* what) {
    std::fprintf(stderr, "amx model: %s (the instruction would fault)\n", what);
    std::abort();
}

// The architectural state the model keeps per thread, as the hardware does.
struct ModelState {
    TileConfig cfg;
    bool configured = false;
    alignas(64) uint8_t tile[kTiles][kMaxRows][kMaxColsb] = {};
};
inline ModelState& model_state() {
    static thread_local ModelState s;
    return s;
}

inline void model_config(const TileConfig& c) {
    ModelState& s = model_state();
    if (c.palette != 1) model_fault("LDTILECFG: only palette 1 is modelled");
    for (int t = 0; t < kTiles; ++t)
        if (c.rows[t] > kMaxRows || c.colsb[t] > kMaxColsb || (c.rows[t] == 0) != (c.colsb[t] == 0))
            model_fault("LDTILECFG: tile shape out of range");
    s.cfg = c;
    s.configured = true;
    for (auto& t : s.tile)
        for (auto& r : t)
            for (auto& b : r) b = 0;
}

inline void model_release() {
    model_state() = ModelState{};
}

inline ModelState& model_checked(int t) {
    ModelState& s = model_state();
    if (!s.configured || t < 0 || t >= kTiles || s.cfg.rows[t] == 0)
        model_fault("tile not configured");
    return s;
}

inline void model_zero(int t) {
    ModelState& s = model_checked(t);
    for (auto& r : s.tile[t])
        for (auto& b : r) b = 0;
}

inline void model_load(int t, const void* p, int64_t stride) {
    ModelState& s = model_checked(t);
    const auto* src = static_cast<const uint8_t*>(p);
    for (int r = 0; r < kMaxRows; ++r)
        for (int b = 0; b < kMaxColsb; ++b)
            s.tile[t][r][b] = r < s.cfg.rows[t] && b < s.cfg.colsb[t] ? src[r * stride + b] : 0;
}

inline void model_store(int t, void* p, int64_t stride) {
    ModelState& s = model_checked(t);
    auto* dst = static_cast<uint8_t*>(p);
    for (int r = 0; r < s.cfg.rows[t]; ++r)
        for (int b = 0; b < s.cfg.colsb[t]; ++b) dst[r * stride + b] = s.tile[t][r][b];
}

inline void model_check_dp(const ModelState& s, int c, int a, int b) {
    const TileConfig& g = s.cfg;
    if (g.rows[a] != g.rows[c] || g.colsb[a] != 4 * g.rows[b] || g.colsb[b] != g.colsb[c] ||
        g.colsb[c] % 4 != 0 || g.colsb[a] % 4 != 0)
        model_fault("TDP*: tile shapes do not agree");
    if (c == a || c == b || a == b) model_fault("TDP*: operands must be distinct tiles");
}

// Row r of tile t, past rows/colsb zeroed (write_row_and_zero, zero_upper_rows).
inline void model_finish(ModelState& s, int t) {
    for (int r = 0; r < kMaxRows; ++r)
        for (int b = 0; b < kMaxColsb; ++b)
            if (r >= s.cfg.rows[t] || b >= s.cfg.colsb[t]) s.tile[t][r][b] = 0;
}

inline void model_dp_int8(int c, int a, int b, bool a_signed, bool b_signed) {
    ModelState& s = model_checked(c);
    model_checked(a);
    model_checked(b);
    model_check_dp(s, c, a, b);
    const int M = s.cfg.rows[c], K = s.cfg.colsb[a] / 4, N = s.cfg.colsb[c] / 4;
    for (int m = 0; m < M; ++m)
        for (int n = 0; n < N; ++n) {
            uint32_t acc;
            __builtin_memcpy(&acc, &s.tile[c][m][4 * n], 4);
            for (int k = 0; k < K; ++k)
                for (int i = 0; i < 4; ++i) {
                    const uint8_t x = s.tile[a][m][4 * k + i], y = s.tile[b][k][4 * n + i];
                    const int32_t xv = a_signed ? static_cast<int8_t>(x) : x;
                    const int32_t yv = b_signed ? static_cast<int8_t>(y) : y;
                    acc += static_cast<uint32_t>(xv * yv);  // wraps, as the hardware's adds do
                }
            __builtin_memcpy(&s.tile[c][m][4 * n], &acc, 4);
        }
    model_finish(s, c);
}

inline float model_bf16(const uint8_t* p) {
    uint16_t h;
    __builtin_memcpy(&h, p, 2);
    return bits_f32(static_cast<uint32_t>(h) << 16);
}

inline void model_dpbf16ps(int c, int a, int b) {
    ModelState& s = model_checked(c);
    model_checked(a);
    model_checked(b);
    model_check_dp(s, c, a, b);
    const int M = s.cfg.rows[c], K = s.cfg.colsb[a] / 4, N = s.cfg.colsb[c] / 4;
    for (int m = 0; m < M; ++m)
        for (int n = 0; n < N; ++n) {
            float even = 0.0f, odd = 0.0f;
            for (int k = 0; k < K; ++k) {
                even = fma_daz_ftz(model_bf16(&s.tile[a][m][4 * k]),
                                   model_bf16(&s.tile[b][k][4 * n]), even);
                odd = fma_daz_ftz(model_bf16(&s.tile[a][m][4 * k + 2]),
                                  model_bf16(&s.tile[b][k][4 * n + 2]), odd);
            }
            float acc;
            __builtin_memcpy(&acc, &s.tile[c][m][4 * n], 4);
            // x + y is fma(x, 1, y): one rounding, and the same input/output denormal rules.
            acc = fma_daz_ftz(fma_daz_ftz(even, 1.0f, odd), 1.0f, acc);
            __builtin_memcpy(&s.tile[c][m][4 * n], &acc, 4);
        }
    model_finish(s, c);
}

// The software backend: per-thread tile state, any tile numbers.
struct Model {
    static void config(const TileConfig& c) { model_config(c); }
    static void release() { model_release(); }
    template <int T>
    static void zero() {
        model_zero(T);
    }
    template <int T>
    static void load(const void* p, int64_t stride) {
        model_load(T, p, stride);
    }
    template <int T>
    static void store(void* p, int64_t stride) {
        model_store(T, p, stride);
    }
    template <int C, int A, int B>
    static void dpbssd() {
        model_dp_int8(C, A, B, true, true);
    }
    template <int C, int A, int B>
    static void dpbsud() {
        model_dp_int8(C, A, B, true, false);
    }
    template <int C, int A, int B>
    static void dpbusd() {
        model_dp_int8(C, A, B, false, true);
    }
    template <int C, int A, int B>
    static void dpbuud() {
        model_dp_int8(C, A, B, false, false);
    }
    template <int C, int A, int B>
    static void dpbf16ps() {
        model_dpbf16ps(C, A, B);
    }
};

#if WARDEN_AMX_NATIVE
// The instructions themselves. Tile numbers reach the intrinsics as literals (GCC pastes them
// into the assembly text), so each operation lists the combinations the kernels use: the
// accumulators C in tiles 0-3, A in tile 4 or 5, B in tile 6.
#define WARDEN_AMX_T8(F, ...)            \
    if constexpr (T == 0)                \
        F(0 __VA_OPT__(, ) __VA_ARGS__); \
    else if constexpr (T == 1)           \
        F(1 __VA_OPT__(, ) __VA_ARGS__); \
    else if constexpr (T == 2)           \
        F(2 __VA_OPT__(, ) __VA_ARGS__); \
    else if constexpr (T == 3)           \
        F(3 __VA_OPT__(, ) __VA_ARGS__); \
    else if constexpr (T == 4)           \
        F(4 __VA_OPT__(, ) __VA_ARGS__); \
    else if constexpr (T == 5)           \
        F(5 __VA_OPT__(, ) __VA_ARGS__); \
    else if constexpr (T == 6)           \
        F(6 __VA_OPT__(, ) __VA_ARGS__); \
    else                                 \
        F(7 __VA_OPT__(, ) __VA_ARGS__)
#define WARDEN_AMX_DP(F)                                                         \
    static_assert(C >= 0 && C <= 3 && (A == 4 || A == 5) && B == 6,              \
                  "native AMX: accumulators in tiles 0-3, A in 4 or 5, B in 6"); \
    if constexpr (A == 4) {                                                      \
        if constexpr (C == 0)                                                    \
            F(0, 4, 6);                                                          \
        else if constexpr (C == 1)                                               \
            F(1, 4, 6);                                                          \
        else if constexpr (C == 2)                                               \
            F(2, 4, 6);                                                          \
        else                                                                     \
            F(3, 4, 6);                                                          \
    } else {                                                                     \
        if constexpr (C == 0)                                                    \
            F(0, 5, 6);                                                          \
        else if constexpr (C == 1)                                               \
            F(1, 5, 6);                                                          \
        else if constexpr (C == 2)                                               \
            F(2, 5, 6);                                                          \
        else                                                                     \
            F(3, 5, 6);                                                          \
    }

// GCC's LDTILECFG and TILELOADD asm statements declare no memory read beyond the config's first 8
// bytes (GCC 12's amxtileintrin.h), so stores just made to the buffers they read (the config, an
// unpacked weight tile) could be sunk past them or dropped as dead. This barrier hands the
// address to the compiler as escaped and makes every store before it complete.
inline void memory_barrier(const void* p) {
    __asm__ volatile("" ::"r"(p) : "memory");
}

struct Native {
    static void config(const TileConfig& c) {
        memory_barrier(&c);
        _tile_loadconfig(&c);
    }
    static void release() { _tile_release(); }
    template <int T>
    static void zero() {
        WARDEN_AMX_T8(_tile_zero);
    }
    template <int T>
    static void load(const void* p, int64_t stride) {
        memory_barrier(p);
        WARDEN_AMX_T8(_tile_loadd, p, stride);
    }
    template <int T>
    static void store(void* p, int64_t stride) {
        WARDEN_AMX_T8(_tile_stored, p, stride);
        memory_barrier(p);
    }
    template <int C, int A, int B>
    static void dpbssd() {
        WARDEN_AMX_DP(_tile_dpbssd)
    }
    template <int C, int A, int B>
    static void dpbsud() {
        WARDEN_AMX_DP(_tile_dpbsud)
    }
    template <int C, int A, int B>
    static void dpbusd() {
        WARDEN_AMX_DP(_tile_dpbusd)
    }
    template <int C, int A, int B>
    static void dpbuud() {
        WARDEN_AMX_DP(_tile_dpbuud)
    }
    template <int C, int A, int B>
    static void dpbf16ps() {
        WARDEN_AMX_DP(_tile_dpbf16ps)
    }
};
#undef WARDEN_AMX_T8
#undef WARDEN_AMX_DP
#endif

// One tile operation on memory operands, for the tests that compare the model with the scalar
// reference and with the hardware: C (tile 0, c_rows x c_colsb, stride ldc) is loaded, op'd with
// A (tile 4, c_rows x a_colsb) and B (tile 6, a_colsb / 4 x c_colsb) and stored back.
// op: 0 TDPBSSD, 1 TDPBSUD, 2 TDPBUSD, 3 TDPBUUD, 4 TDPBF16PS.
template <class Backend>
void tile_op(int op, int c_rows, int c_colsb, int a_colsb, const void* a, int64_t lda,
             const void* b, int64_t ldb, void* c, int64_t ldc) {
    TileConfig cfg;
    cfg.rows[0] = static_cast<uint8_t>(c_rows);
    cfg.colsb[0] = static_cast<uint16_t>(c_colsb);
    cfg.rows[4] = static_cast<uint8_t>(c_rows);
    cfg.colsb[4] = static_cast<uint16_t>(a_colsb);
    cfg.rows[6] = static_cast<uint8_t>(a_colsb / 4);
    cfg.colsb[6] = static_cast<uint16_t>(c_colsb);
    Backend::config(cfg);
    Backend::template load<0>(c, ldc);
    Backend::template load<4>(a, lda);
    Backend::template load<6>(b, ldb);
    switch (op) {
        case 0:
            Backend::template dpbssd<0, 4, 6>();
            break;
        case 1:
            Backend::template dpbsud<0, 4, 6>();
            break;
        case 2:
            Backend::template dpbusd<0, 4, 6>();
            break;
        case 3:
            Backend::template dpbuud<0, 4, 6>();
            break;
        default:
            Backend::template dpbf16ps<0, 4, 6>();
            break;
    }
    Backend::template store<0>(c, ldc);
    Backend::release();
}

// f.template operator()<G>() for G = g (0..3), a tile number known at compile time: the tile
// instructions name their registers as immediates, so a loop over accumulator tiles dispatches.
template <class F>
inline void with_group(int g, F&& f) {
    switch (g) {
        case 0:
            f.template operator()<0>();
            break;
        case 1:
            f.template operator()<1>();
            break;
        case 2:
            f.template operator()<2>();
            break;
        default:
            f.template operator()<3>();
            break;
    }
}

// The backend a kernel file compiles against: the software model in its emulated build (the
// tests, on any CPU), the instructions otherwise.
#if defined(WARDEN_AMX_EMULATE)
using Tiles = Model;
#elif WARDEN_AMX_NATIVE
using Tiles = Native;
#endif

}  // namespace
}  // namespace warden::kernels::amx
