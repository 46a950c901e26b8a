// The software model of the AMX tile instructions (kernels/amx_tile.h) against independent
// references: int8 dot products as plain int64 sums, TDPBF16PS as the SDM's two chains computed in
// double (exact here) with its denormal rules checked on hand-made cases; TILELOADD/TILESTORED
// shapes and zeroing. On AMX hosts the model is compared with the hardware bit for bit; elsewhere
// that test skips and says so.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/amx_tile.h"
#include "kernels/cpu_features.h"
#include "kernels/kernels_internal.h"
#include "tensor/float_convert.h"

namespace warden::kernels {
namespace {

using amx::Model;

struct Case {
    int op, rows, c_colsb, a_colsb;
};

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<uint8_t> v(n);
    for (auto& b : v) b = static_cast<uint8_t>(rng());
    return v;
}

// C[m][n] + sum_k A[m][k] * B[k/4][4n + k%4] in int64, wrapped to int32 at the end (the same
// value as int32 wrapping adds).
int32_t ref_int8(int op, const uint8_t* a, const uint8_t* b, int64_t ldb, int32_t c, int K) {
    const bool as = op == 0 || op == 1, bs = op == 0 || op == 2;
    int64_t s = c;
    for (int k = 0; k < 4 * K; ++k) {
        const int64_t x = as ? static_cast<int8_t>(a[k]) : a[k];
        const int64_t y =
            bs ? static_cast<int8_t>(b[(k / 4) * ldb + k % 4]) : b[(k / 4) * ldb + k % 4];
        s += x * y;
    }
    return static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint64_t>(s)));
}

TEST(AmxTileModel, Int8DotProductsMatchPlainSums) {
    uint32_t seed = 7;
    for (const Case& cs :
         {Case{0, 16, 64, 64}, Case{1, 16, 64, 64}, Case{2, 16, 64, 64}, Case{3, 16, 64, 64},
          Case{0, 5, 24, 12}, Case{1, 1, 4, 32}, Case{2, 13, 64, 32}, Case{3, 16, 8, 4}}) {
        const int K = cs.a_colsb / 4, N = cs.c_colsb / 4;
        // Strided operands (lda 80, ldb 72, ldc 68 bytes) filled with sentinel bytes around them.
        auto a = random_bytes(16 * 80, seed++), b = random_bytes(16 * 72, seed++);
        auto c = random_bytes(16 * 68, seed++);
        // Extreme values too: every -128 and 255 byte product, where sign handling matters.
        a[0] = 0x80;
        b[0] = 0x80;
        a[1] = 0xff;
        b[1] = 0xff;
        const auto c0 = c;
        amx::tile_op<Model>(cs.op, cs.rows, cs.c_colsb, cs.a_colsb, a.data(), 80, b.data(), 72,
                            c.data(), 68);
        for (int m = 0; m < 16; ++m)
            for (int n = 0; n < 17; ++n) {
                const size_t at = static_cast<size_t>(m * 68 + 4 * n);
                if (at + 4 > c.size()) continue;
                int32_t got, was;
                std::memcpy(&got, &c[at], 4);
                std::memcpy(&was, &c0[at], 4);
                if (m < cs.rows && n < N) {
                    ASSERT_EQ(got, ref_int8(cs.op, &a[static_cast<size_t>(m * 80)], &b[4 * n], 72,
                                            was, K))
                        << "op " << cs.op << " m " << m << " n " << n;
                } else {
                    ASSERT_EQ(got, was) << "stored outside rows/colsb: m " << m << " n " << n;
                }
            }
    }
}

TEST(AmxTileModel, LoadZeroesPastShapeAndStoreWritesOnlyShape) {
    amx::TileConfig cfg;
    cfg.rows[0] = 3;
    cfg.colsb[0] = 8;
    cfg.rows[1] = 16;
    cfg.colsb[1] = 64;
    Model::config(cfg);
    std::vector<uint8_t> src(16 * 64, 0xab), dst(16 * 64, 0x11);
    Model::load<0>(src.data(), 64);
    // Tile 0 widened to the full shape through a second config would lose state (LDTILECFG zeroes
    // the tiles), so read it back through its own shape and check nothing else was written.
    Model::store<0>(dst.data(), 64);
    for (int r = 0; r < 16; ++r)
        for (int b = 0; b < 64; ++b)
            ASSERT_EQ(dst[static_cast<size_t>(r * 64 + b)], (r < 3 && b < 8) ? 0xab : 0x11);
    // The model's state itself: bytes past colsb and rows past rows[] are zero after a load.
    const auto& st = amx::model_state();
    for (int r = 0; r < 16; ++r)
        for (int b = 0; b < 64; ++b)
            ASSERT_EQ(st.tile[0][r][b], (r < 3 && b < 8) ? 0xab : 0) << r << " " << b;
    Model::zero<1>();
    Model::store<1>(dst.data(), 64);
    for (uint8_t v : dst) ASSERT_EQ(v, 0);
    Model::release();
}

uint16_t bf(float f) {
    return static_cast<uint16_t>(std::bit_cast<uint32_t>(f) >> 16);  // exact for the values used
}

// One TDPBF16PS output over K pairs: a holds the row's K pairs, b the column's.
float model_bf16_dot(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b, float c) {
    const int K = static_cast<int>(a.size() / 2);
    amx::tile_op<Model>(4, 1, 4, 4 * K, a.data(), 4 * K, b.data(), 4, &c, 4);
    return c;
}

TEST(AmxTileModel, Bf16RandomMatchesDoubleReference) {
    // Values in +-[2^-4, 4] with bf16's 8 bits: every product is exact in f32 and every partial
    // sum exact in double, so rounding the double result of each step to f32 is that step's
    // correctly rounded f32 result, computed without the model's fmaf. No result is tiny.
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> d(0.0625f, 4.0f);
    const auto val = [&] {
        const float f = d(rng) * ((rng() & 1) ? -1.0f : 1.0f);
        return static_cast<uint16_t>(std::bit_cast<uint32_t>(f) >> 16);
    };
    const int M = 16, K = 16, N = 16;
    std::vector<uint16_t> a(M * 2 * K), b(K * 2 * N);
    for (auto& v : a) v = val();
    for (auto& v : b) v = val();
    std::vector<float> c(M * N);
    for (auto& v : c) v = d(rng);
    const auto c0 = c;
    amx::tile_op<Model>(4, M, 4 * N, 4 * K, a.data(), 4 * K, b.data(), 4 * N, c.data(), 4 * N);
    const auto f = [](uint16_t h) { return static_cast<double>(tensor::bf16_to_f32(h)); };
    for (int m = 0; m < M; ++m)
        for (int n = 0; n < N; ++n) {
            float even = 0.0f, odd = 0.0f;
            for (int k = 0; k < K; ++k) {
                even = static_cast<float>(f(a[m * 2 * K + 2 * k]) * f(b[k * 2 * N + 2 * n]) +
                                          static_cast<double>(even));
                odd = static_cast<float>(f(a[m * 2 * K + 2 * k + 1]) * f(b[k * 2 * N + 2 * n + 1]) +
                                         static_cast<double>(odd));
            }
            const float pair = static_cast<float>(static_cast<double>(even) + odd);
            const float want = static_cast<float>(static_cast<double>(c0[m * N + n]) + pair);
            ASSERT_EQ(std::bit_cast<uint32_t>(c[m * N + n]), std::bit_cast<uint32_t>(want))
                << m << " " << n;
        }
}

TEST(AmxTileModel, Bf16EvenAndOddChainsAddAtTheEnd) {
    // Pairs (1e8, 1), (-1e8, 1): the even chain cancels to 0, the odd one is 2: result 2. One
    // chain in element order (1e8 + 1 - 1e8 + 1 in f32) would give 1.
    const float big = std::ldexp(1.0f, 27);
    EXPECT_EQ(model_bf16_dot({bf(big), bf(1.0f), bf(-big), bf(1.0f)},
                             {bf(1.0f), bf(1.0f), bf(1.0f), bf(1.0f)}, 0.0f),
              2.0f);
    // The pair sum is rounded before it meets C: C = 1, pair sum 2^24 + 1 (even 2^24, odd 1)
    // rounds to 2^24, then 2^24 + 1 rounds to 2^24 (ties to even). Adding the three in one
    // rounding would give 2^24 + 2.
    EXPECT_EQ(model_bf16_dot({bf(std::ldexp(1.0f, 24)), bf(1.0f)}, {bf(1.0f), bf(1.0f)}, 1.0f),
              std::ldexp(1.0f, 24));
}

TEST(AmxTileModel, Bf16DenormalsAreZeroInAndOut) {
    const float tiny_bf16 = std::ldexp(1.0f, -130);  // a bf16 denormal (below 2^-126)
    // Denormal input times a huge one: 2^-130 * 2^100 = 2^-30 without DAZ; with it, 0.
    EXPECT_EQ(model_bf16_dot({bf(tiny_bf16), 0}, {bf(std::ldexp(1.0f, 100)), 0}, 0.0f), 0.0f);
    // A denormal C is read as zero: C = 2^-140 plus 0 stays 0 (not 2^-140).
    EXPECT_EQ(std::bit_cast<uint32_t>(model_bf16_dot({0, 0}, {0, 0}, std::ldexp(1.0f, -140))), 0u);
    // A tiny product is flushed: 2^-70 * 2^-70 = 2^-140 -> +0. Flushing keeps the sign: with both
    // chains' products negative and C = -0, every sum is -0 + -0 = -0. (One negative chain would
    // meet the other's +0 and give +0, as IEEE addition does.)
    const uint16_t t70 = bf(std::ldexp(1.0f, -70)), m70 = bf(-std::ldexp(1.0f, -70));
    EXPECT_EQ(std::bit_cast<uint32_t>(model_bf16_dot({t70, 0}, {t70, 0}, 0.0f)), 0u);
    EXPECT_EQ(std::bit_cast<uint32_t>(model_bf16_dot({m70, m70}, {t70, t70}, -0.0f)), 0x80000000u);
    EXPECT_EQ(std::bit_cast<uint32_t>(model_bf16_dot({m70, 0}, {t70, 0}, 0.0f)), 0u);
    // 2^-63 * 2^-63 = 2^-126, the smallest normal: kept.
    EXPECT_EQ(model_bf16_dot({bf(std::ldexp(1.0f, -63)), 0}, {bf(std::ldexp(1.0f, -63)), 0}, 0.0f),
              std::ldexp(1.0f, -126));
    // Tininess after rounding: the even chain is 2^-63 * 2^-63 = 2^-126, then 2^-126 - 2^-75 *
    // 2^-75 = 2^-126 - 2^-150 exactly, which f32 with an unbounded exponent holds: tiny, flushed
    // to +0. Rounded to the denormal grid first (fmaf alone) it would tie up to 2^-126 and stay.
    EXPECT_EQ(std::bit_cast<uint32_t>(model_bf16_dot(
                  {bf(std::ldexp(1.0f, -63)), 0, bf(-std::ldexp(1.0f, -75)), 0},
                  {bf(std::ldexp(1.0f, -63)), 0, bf(std::ldexp(1.0f, -75)), 0}, 0.0f)),
              0u);
}

// Finite bf16 bits over exponents 2^-70..2^60 plus zeros and denormals (1 in 8): products and
// sums of 32 never overflow (no NaN, whose payload the model does not fix), and tiny products
// and denormal inputs are common.
uint16_t spread_bf16(std::mt19937& rng) {
    const uint32_t r = rng();
    const uint32_t e = (r & 7) == 0 ? 0 : 57 + (r >> 3) % 131;
    return static_cast<uint16_t>(((r >> 16) & 0x8000) | (e << 7) | ((r >> 20) & 0x7f));
}

TEST(AmxTileModel, NativeMatchesModelBitForBit) {
    if (!isa_supported(Isa::AMX))
        GTEST_SKIP() << "no native AMX here (" << amx_status()
                     << "): the model is checked against references only";
    uint32_t seed = 99;
    for (int op = 0; op < 5; ++op) {
        if (op == 4 && !amx_bf16_supported()) continue;
        for (const Case& cs : {Case{op, 16, 64, 64}, Case{op, 7, 20, 36}}) {
            auto a = random_bytes(16 * 64, seed++), b = random_bytes(16 * 64, seed++);
            auto c = random_bytes(16 * 64, seed++);
            if (op == 4) {
                std::mt19937 rng(seed++);
                for (auto* v : {&a, &b})
                    for (size_t i = 0; i < v->size(); i += 2) {
                        const uint16_t h = spread_bf16(rng);
                        std::memcpy(&(*v)[i], &h, 2);
                    }
                for (size_t i = 0; i < c.size(); i += 4) {  // f32: a bf16 and 16 random bits
                    const uint32_t f =
                        static_cast<uint32_t>(spread_bf16(rng)) << 16 | (rng() & 0xffff);
                    std::memcpy(&c[i], &f, 4);
                }
            }
            auto cm = c;
            amx::tile_op<Model>(op, cs.rows, cs.c_colsb, cs.a_colsb, a.data(), 64, b.data(), 64,
                                cm.data(), 64);
            detail::amx_tile_op_native(op, cs.rows, cs.c_colsb, cs.a_colsb, a.data(), 64, b.data(),
                                       64, c.data(), 64);
            ASSERT_EQ(c, cm) << "op " << op << " rows " << cs.rows;
        }
    }
}

}  // namespace
}  // namespace warden::kernels
