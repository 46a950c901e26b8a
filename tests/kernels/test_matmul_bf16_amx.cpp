// The AMX-BF16 path for bf16 weights (kernels/matmul_bf16_tiles.h, matmul_bf16_amx.cpp), run
// through the tile model on any CPU:
// - the tile copy puts every weight where the layout says and zeroes the padding;
// - the activation split: hi is bf16(x), |x - hi - lo| <= 2^-16 |x|, specials stay finite/NaN;
// - the kernel equals, bit for bit, a plain per-output evaluation of the arithmetic contract
//   (32-column blocks in order, hi then lo, each the SDM's even/odd chains), for token counts that
//   fill no tile, one, several and a second 64-token chunk, and row ranges that cut panels; that
//   evaluation takes each token alone, so equality is also batch invariance (checked directly too);
// - it is within a derived bound of the exact (double) product of the bf16 weights and the f32
//   activations;
// - a matrix with a tile copy on an ISA without the kernel runs the panel kernels, bit for bit;
//   a tile-only matrix (no panels) runs the tile kernel on the model there, bit for bit.
// On AMX hosts the native kernel and Isa::AMX's dispatch are compared with the model; elsewhere
// those tests skip and say why.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/amx_tile.h"
#include "kernels/cpu_features.h"
#include "kernels/kernels_internal.h"
#include "kernels/matmul.h"
#include "kernels/matmul_bf16_tiles.h"
#include "kernels_test_util.h"
#include "quant_test_util.h"
#include "tensor/float_convert.h"
#include "util/thread_pool.h"

namespace warden::kernels {
namespace {

using testing::expect_bits;
using testing::random_floats;

// A bf16 matrix in panels, with its tile copy.
struct Bf16Mat {
    WeightMatrix w;
    std::vector<uint16_t> panels;
    std::vector<uint8_t> tiles;
    std::vector<float> vals;  // the weights, exactly (bf16 values as f32), row-major
};

Bf16Mat make_bf16(int64_t rows, int64_t cols, uint32_t seed) {
    Bf16Mat m;
    m.w.type = WeightType::BF16;
    m.w.rows = rows;
    m.w.cols = cols;
    m.panels.assign(static_cast<size_t>(packed_weight_elems(rows, cols)), 0);
    m.vals = random_floats(static_cast<size_t>(rows * cols), seed);
    for (float& v : m.vals) v = tensor::bf16_to_f32(tensor::f32_to_bf16(v));
    for (int64_t r = 0; r < rows; ++r)
        pack_weight_row(WeightType::BF16, cols, r, m.vals.data() + r * cols, m.panels.data());
    m.w.data = m.panels.data();
    m.tiles.assign(static_cast<size_t>(bf16_tile_bytes(rows, cols)), 0xAB);
    pack_bf16_tiles(m.w, m.tiles.data());
    m.w.tiles = m.tiles.data();
    return m;
}

using Kernel = void (*)(const detail::Bf16TileArgs&, int64_t, int64_t);

// A tile kernel called as matmul.cpp calls one: activations split once, rows [r0, r1) of y
// written, the rest left at `fill`.
std::vector<float> run_tiles(Kernel k, const Bf16Mat& m, const float* x, int64_t n, int64_t r0,
                             int64_t r1, float fill = -1.0f) {
    const size_t half = static_cast<size_t>(bf16_tile_tokens(n) * bf16_tile_cols(m.w.cols));
    std::vector<uint16_t> hi(half), lo(half);
    split_bf16_acts(x, n, m.w.cols, hi.data(), lo.data());
    std::vector<float> y(static_cast<size_t>(n * m.w.rows), fill);
    const detail::Bf16TileArgs a{m.tiles.data(), m.w.rows, m.w.cols, hi.data(),
                                 lo.data(),      n,        y.data(), m.w.rows};
    k(a, r0, r1);
    return y;
}

// The contract, one output at a time: c = 0; per 32-column block, for hi then lo:
// c = c + (even + odd), even and odd each an fma chain over the block's 16 pairs (padding zero).
float contract_output(const Bf16Mat& m, const float* x, int64_t r) {
    const int64_t cols = m.w.cols;
    float c = 0.0f;
    for (int64_t b = 0; b < (cols + 31) / 32; ++b)
        for (int half = 0; half < 2; ++half) {
            float chain[2] = {0.0f, 0.0f};
            for (int64_t i = 0; i < 32; ++i) {
                const int64_t k = 32 * b + i;
                float w = 0.0f, a = 0.0f;
                if (k < cols) {
                    w = m.vals[static_cast<size_t>(r * cols + k)];
                    const float hi = tensor::bf16_to_f32(tensor::f32_to_bf16(x[k]));
                    a = half == 0 ? hi : tensor::bf16_to_f32(tensor::f32_to_bf16(x[k] - hi));
                }
                chain[i % 2] = amx::fma_daz_ftz(a, w, chain[i % 2]);
            }
            c = amx::fma_daz_ftz(amx::fma_daz_ftz(chain[0], 1.0f, chain[1]), 1.0f, c);
        }
    return c;
}

struct Shape {
    int64_t rows, cols;
};
// One and several panels, a ragged last panel; one block, several, a ragged last block.
const Shape kShapes[] = {{16, 32}, {17, 100}, {40, 256}, {33, 70}};

TEST(AmxBf16Matmul, TileCopyLayout) {
    for (const Shape& s : {Shape{17, 33}, Shape{40, 100}}) {
        const Bf16Mat m = make_bf16(s.rows, s.cols, 3);
        const int64_t kb = (s.cols + 31) / 32, panels = (s.rows + 15) / 16;
        ASSERT_EQ(static_cast<int64_t>(m.tiles.size()), panels * kb * 1024);
        std::vector<uint16_t> want(m.tiles.size() / 2, 0);
        for (int64_t r = 0; r < s.rows; ++r)
            for (int64_t k = 0; k < s.cols; ++k)
                want[static_cast<size_t>(((r / 16 * kb + k / 32) * 1024 + (k % 32 / 2) * 64 +
                                          (r % 16) * 4 + (k % 2) * 2) /
                                         2)] =
                    tensor::f32_to_bf16(m.vals[static_cast<size_t>(r * s.cols + k)]);
        for (size_t i = 0; i < want.size(); ++i) {
            uint16_t got;
            std::memcpy(&got, m.tiles.data() + 2 * i, 2);
            ASSERT_EQ(got, want[i]) << "rows=" << s.rows << " cols=" << s.cols << " element " << i;
        }
    }
}

TEST(AmxBf16Matmul, ActivationSplit) {
    const int64_t n = 3, cols = 40, kp = bf16_tile_cols(cols), np = bf16_tile_tokens(n);
    ASSERT_EQ(kp, 64);
    ASSERT_EQ(np, 16);
    auto x = random_floats(static_cast<size_t>(n * cols), 11, -100.0f, 100.0f);
    const float inf = std::numeric_limits<float>::infinity();
    x[0] = std::numeric_limits<float>::quiet_NaN();
    x[1] = inf;
    x[2] = -inf;
    x[3] = std::numeric_limits<float>::max();  // rounds to infinity in bf16: truncated instead
    x[4] = -std::numeric_limits<float>::max();
    x[5] = 0.0f;
    x[6] = 1e-30f;
    std::vector<uint16_t> hi(static_cast<size_t>(np * kp), 0xFFFF), lo(hi);
    split_bf16_acts(x.data(), n, cols, hi.data(), lo.data());
    for (int64_t t = 0; t < np; ++t)
        for (int64_t k = 0; k < kp; ++k) {
            const size_t i = static_cast<size_t>(t * kp + k);
            if (t >= n || k >= cols) {
                ASSERT_EQ(hi[i], 0) << t << "," << k;
                ASSERT_EQ(lo[i], 0) << t << "," << k;
                continue;
            }
            const float v = x[static_cast<size_t>(t * cols + k)];
            const float h = tensor::bf16_to_f32(hi[i]), l = tensor::bf16_to_f32(lo[i]);
            if (std::isnan(v)) {
                EXPECT_TRUE(std::isnan(h));
                EXPECT_EQ(lo[i], 0);
            } else if (std::isinf(v)) {
                EXPECT_EQ(h, v);
                EXPECT_EQ(lo[i], 0);
            } else {
                EXPECT_TRUE(std::isfinite(h) && std::isfinite(l)) << v;
                if (std::fabs(v) < 1e38f) {
                    EXPECT_EQ(hi[i], tensor::f32_to_bf16(v)) << v;
                }
                const double e = static_cast<double>(v) - h - l;
                EXPECT_LE(std::fabs(e), std::ldexp(std::fabs(static_cast<double>(v)), -16)) << v;
            }
        }
}

TEST(AmxBf16Matmul, ModelEqualsContractAndIsBatchInvariant) {
    uint32_t seed = 601;
    for (const Shape& s : kShapes)
        for (int64_t n : {1, 5, 16, 17, 33, 70}) {
            const Bf16Mat m = make_bf16(s.rows, s.cols, seed++);
            auto xb = random_floats(static_cast<size_t>(n * s.cols + 1), seed++, -2.0f, 2.0f);
            const float* x = xb.data() + 1;
            const std::string what = "rows=" + std::to_string(s.rows) +
                                     " cols=" + std::to_string(s.cols) + " n=" + std::to_string(n);
            std::vector<float> want(static_cast<size_t>(n * s.rows));
            for (int64_t t = 0; t < n; ++t)
                for (int64_t r = 0; r < s.rows; ++r)
                    want[static_cast<size_t>(t * s.rows + r)] =
                        contract_output(m, x + t * s.cols, r);
            const auto got = run_tiles(detail::mm_bf16_amx_tiles_emulated, m, x, n, 0, s.rows);
            expect_bits(got, want, "model vs contract " + what);
            if (HasFatalFailure()) return;
            // Batch invariance: a token alone gives its row of the batch, bit for bit.
            for (int64_t t : {int64_t{0}, n - 1}) {
                const auto one =
                    run_tiles(detail::mm_bf16_amx_tiles_emulated, m, x + t * s.cols, 1, 0, s.rows);
                expect_bits(
                    one,
                    std::vector<float>(got.begin() + t * s.rows, got.begin() + (t + 1) * s.rows),
                    "token " + std::to_string(t) + " alone, " + what);
                if (HasFatalFailure()) return;
            }
            if (n != 17 || s.rows < 17) continue;
            // Row ranges that start and end inside panels: only those rows are written.
            const int64_t r0 = 3, r1 = s.rows - 2;
            const auto y = run_tiles(detail::mm_bf16_amx_tiles_emulated, m, x, n, r0, r1, 123.0f);
            for (int64_t t = 0; t < n; ++t)
                for (int64_t r = 0; r < s.rows; ++r) {
                    const size_t i = static_cast<size_t>(t * s.rows + r);
                    const float w = (r >= r0 && r < r1) ? want[i] : 123.0f;
                    ASSERT_EQ(std::bit_cast<uint32_t>(y[i]), std::bit_cast<uint32_t>(w))
                        << "rows " << r0 << ".." << r1 << " " << what;
                }
        }
}

// Against the exact product (double; the bf16 weights are exact). With S = sum |w_k x_k|:
// the split leaves |x - hi - lo| <= 2^-16 |x| (an error <= 2^-16 S); the products w * hi and
// w * lo are exact and sum in magnitude to at most (1 + 2^-7) S; each passes through at most
// 16 (its chain) + 1 (even + odd) + 1 (into c) + 2 kb - 1 (the later blocks' additions) roundings
// of u = 2^-24, so the accumulation adds at most gamma(2 kb + 17) (1 + 2^-7) S, gamma(j) =
// j u / (1 - j u). The scalar kernel's one fma chain is within gamma(cols) S of the same value.
TEST(AmxBf16Matmul, ModelWithinDerivedBoundOfExactProduct) {
    uint32_t seed = 801;
    for (const Shape& s : {Shape{40, 256}, Shape{17, 1000}, Shape{16, 4096}}) {
        const int64_t n = 3, kb = (s.cols + 31) / 32;
        const Bf16Mat m = make_bf16(s.rows, s.cols, seed++);
        const auto x = random_floats(static_cast<size_t>(n * s.cols), seed++, -4.0f, 4.0f);
        const auto y = run_tiles(detail::mm_bf16_amx_tiles_emulated, m, x.data(), n, 0, s.rows);
        const double u = std::ldexp(1.0, -24), j = static_cast<double>(2 * kb + 17);
        const double gamma = j * u / (1 - j * u);
        double worst = 0.0;
        for (int64_t t = 0; t < n; ++t)
            for (int64_t r = 0; r < s.rows; ++r) {
                double exact = 0.0, S = 0.0;
                for (int64_t k = 0; k < s.cols; ++k) {
                    const double p =
                        static_cast<double>(m.vals[static_cast<size_t>(r * s.cols + k)]) *
                        x[static_cast<size_t>(t * s.cols + k)];
                    exact += p;
                    S += std::fabs(p);
                }
                const double bound = (std::ldexp(1.0, -16) + gamma * (1 + std::ldexp(1.0, -7))) * S;
                const double err = std::fabs(y[static_cast<size_t>(t * s.rows + r)] - exact);
                ASSERT_LE(err, bound) << "cols=" << s.cols << " t=" << t << " r=" << r;
                worst = std::max(worst, err / S);
            }
        // Informative: the largest error relative to S, against the bound's 2^-16 + gamma.
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.3g", worst);
        RecordProperty("worst_rel_cols_" + std::to_string(s.cols), buf);
    }
}

// Where the table has no tile kernel (every ISA here but AMX with AMX-BF16), a matrix with a
// tile copy runs the panel kernels: the same bits as without the copy.
TEST(AmxBf16Matmul, TileCopyIgnoredWithoutTheKernel) {
    const Bf16Mat m = make_bf16(40, 100, 5);
    WeightMatrix plain = m.w;
    plain.tiles = nullptr;
    const auto x = random_floats(static_cast<size_t>(9 * 100), 6);
    for (Isa isa : {Isa::Scalar, Isa::AVX2, Isa::AVX512}) {
        if (!isa_supported(isa)) continue;
        for (int64_t n : {1, 9})
            expect_bits(testing::run_isa(isa, m.w, x.data(), n),
                        testing::run_isa(isa, plain, x.data(), n),
                        std::string(isa_name(isa)) + " n=" + std::to_string(n));
    }
}

// A tile-only matrix (no panels: the loader's layout on AMX-BF16 hosts) takes the tile kernel on
// every ISA, natively where the table has it, else on the tile model: the same bits everywhere,
// at every token count, through matmul_rows and the grouped path; its rows unpack exactly.
TEST(AmxBf16Matmul, TileOnlyMatrixRunsTheTileKernelOnEveryIsa) {
    uint32_t seed = 1001;
    for (const Shape& s : kShapes) {
        const Bf16Mat m = make_bf16(s.rows, s.cols, seed++);
        WeightMatrix tile_only = m.w;
        tile_only.data = nullptr;
        std::vector<float> row(static_cast<size_t>(s.cols));
        for (int64_t r = 0; r < s.rows; ++r) {
            unpack_weight_row(tile_only, r, row.data());
            for (int64_t k = 0; k < s.cols; ++k)
                ASSERT_EQ(row[static_cast<size_t>(k)], m.vals[static_cast<size_t>(r * s.cols + k)])
                    << "rows=" << s.rows << " r=" << r << " k=" << k;
        }
        for (int64_t n : {1, 5, 17}) {
            const auto x = random_floats(static_cast<size_t>(n * s.cols), seed++, -2.0f, 2.0f);
            const auto model =
                run_tiles(detail::mm_bf16_amx_tiles_emulated, m, x.data(), n, 0, s.rows);
            for (Isa isa : {Isa::Scalar, Isa::AVX2, Isa::AVX512, Isa::AMX}) {
                if (!isa_supported(isa)) continue;
                const std::string what = std::string(isa_name(isa)) +
                                         " rows=" + std::to_string(s.rows) +
                                         " n=" + std::to_string(n);
                expect_bits(testing::run_isa(isa, tile_only, x.data(), n), model, what);
                if (HasFatalFailure()) return;
            }
            std::vector<float> y(static_cast<size_t>(n * s.rows), -1.0f);
            util::ThreadPool pool(2);
            const MatmulOut out{&tile_only, y.data()};
            const MatmulGroup g{std::span<const MatmulOut>(&out, 1), x.data(), n};
            matmul_grouped(std::span<const MatmulGroup>(&g, 1), pool);
            expect_bits(y, model, "grouped n=" + std::to_string(n));
        }
    }
}

TEST(AmxBf16Matmul, NativeMatchesModelAndDispatchTakesTiles) {
    if (!isa_supported(Isa::AMX) || !amx_bf16_supported())
        GTEST_SKIP() << "no native AMX-BF16 here (" << amx_status()
                     << "): the AMX-BF16 kernel is checked through the tile model only";
    uint32_t seed = 901;
    for (const Shape& s : kShapes)
        for (int64_t n : {1, 8, 33, 70}) {
            const Bf16Mat m = make_bf16(s.rows, s.cols, seed++);
            auto x = random_floats(static_cast<size_t>(n * s.cols), seed++, -2.0f, 2.0f);
            const std::string what = "rows=" + std::to_string(s.rows) + " n=" + std::to_string(n);
            const auto model =
                run_tiles(detail::mm_bf16_amx_tiles_emulated, m, x.data(), n, 0, s.rows);
            expect_bits(run_tiles(detail::mm_bf16_amx_tiles, m, x.data(), n, 0, s.rows), model,
                        "native vs model " + what);
            expect_bits(testing::run_isa(Isa::AMX, m.w, x.data(), n), model,
                        "Isa::AMX vs model " + what);
            if (HasFatalFailure()) return;
        }
}

}  // namespace
}  // namespace warden::kernels
