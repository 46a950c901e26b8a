// matmul over the packed panel layout: every SIMD variant must equal the scalar reference BIT
// FOR BIT (matmul.h contract: one sequential fma chain per output), on shapes whose rows are
// not a multiple of the 16-row panel and whose cols hit every tail and cache-block boundary;
// batch invariance (a token's outputs do not depend on the batch), thread-count invariance,
// an independent double-precision check with a rigorous error bound, and the pack/unpack
// helpers.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "kernels/kernels_internal.h"
#include "kernels/matmul.h"
#include "kernels_test_util.h"
#include "tensor/float_convert.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace warden::kernels {
namespace detail {
const MatmulTable& matmul_avx512_emulated();  // tests/kernels/test_matmul_avx512_emulated.cpp
}
namespace {

using testing::random_floats;

constexpr Isa kAllIsas[] = {Isa::Scalar, Isa::AVX2, Isa::AVX512};

// A [rows, cols] matrix packed as f32 and as bf16 (from the same f32 values), stored one
// element past the start of the buffer: a deliberately misaligned weight pointer.
struct Mat {
    int64_t rows = 0, cols = 0;
    std::vector<float> f32;
    std::vector<uint16_t> bf16;
    WeightMatrix view(WeightType t) const {
        const void* p = t == WeightType::F32 ? static_cast<const void*>(f32.data() + 1)
                                             : static_cast<const void*>(bf16.data() + 1);
        return WeightMatrix{t, rows, cols, p};
    }
};

Mat make_mat(int64_t rows, int64_t cols, uint32_t seed) {
    Mat m{rows, cols, {}, {}};
    const int64_t elems = packed_weight_elems(rows, cols);
    m.f32.assign(elems + 1, 0.0f);  // zero: padding rows of the last panel stay 0
    m.bf16.assign(elems + 1, 0);
    const auto vals = random_floats(rows * cols, seed);
    for (int64_t r = 0; r < rows; ++r) {
        pack_weight_row(WeightType::F32, cols, r, vals.data() + r * cols, m.f32.data() + 1);
        pack_weight_row(WeightType::BF16, cols, r, vals.data() + r * cols, m.bf16.data() + 1);
    }
    return m;
}

float weight_at(const WeightMatrix& w, int64_t r, int64_t k) {
    const int64_t i = packed_index(r, k, w.cols);
    return w.type == WeightType::F32 ? static_cast<const float*>(w.data)[i]
                                     : tensor::bf16_to_f32(static_cast<const uint16_t*>(w.data)[i]);
}

const char* type_name(WeightType t) {
    return t == WeightType::F32 ? "f32" : "bf16";
}

std::vector<float> run(Isa isa, const WeightMatrix& w, const float* x, int64_t n) {
    std::vector<float> y(n * w.rows, -1.0f);
    matmul_rows(isa, w, x, n, y.data(), 0, w.rows);
    return y;
}

// Bit-pattern comparison (distinguishes -0.0f from 0.0f, and compares NaNs).
void expect_bits_equal(const std::vector<float>& got, const std::vector<float>& want,
                       const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t i = 0; i < got.size(); ++i)
        ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i]))
            << what << " i=" << i << " got=" << got[i] << " want=" << want[i];
}

std::string shape(const WeightMatrix& w, int64_t n) {
    return std::string(type_name(w.type)) + " rows=" + std::to_string(w.rows) +
           " cols=" + std::to_string(w.cols) + " n=" + std::to_string(n);
}

// Independent check of the reference itself: exact products (24x24 bits fit a double) summed
// in double. The f32 fma chain makes at most `cols` roundings, each of relative size <= u =
// 2^-24 on a partial sum bounded by sum_k |x_k w_k| = mag, so |chain - exact| <= gamma_cols *
// mag with gamma_m = m u / (1 - m u); the double sum adds <= cols * 2^-53 * mag; underflow can
// add <= 2^-150 per step. Rigorous (never flaky), yet far below one missing/doubled term.
void expect_near_exact(const WeightMatrix& w, const float* x, int64_t n,
                       const std::vector<float>& got) {
    const double u = std::ldexp(1.0, -24);
    const double m = static_cast<double>(w.cols);
    const double rel = m * u / (1.0 - m * u) + m * std::ldexp(1.0, -52);
    for (int64_t t = 0; t < n; ++t)
        for (int64_t r = 0; r < w.rows; ++r) {
            double s = 0.0, mag = 0.0;
            for (int64_t k = 0; k < w.cols; ++k) {
                const double p = static_cast<double>(x[t * w.cols + k]) * weight_at(w, r, k);
                s += p;
                mag += std::fabs(p);
            }
            ASSERT_LE(std::fabs(got[t * w.rows + r] - s), rel * mag + m * std::ldexp(1.0, -149))
                << shape(w, n) << " t=" << t << " r=" << r;
        }
}

class KernelsMatmul : public ::testing::TestWithParam<Isa> {
  protected:
    void SetUp() override { WARDEN_REQUIRE_ISA(GetParam()); }
};

// Every ISA == scalar bit for bit; batch invariance (row t of a batch == that token alone);
// the reference against the double-precision bound.
TEST_P(KernelsMatmul, BitExactVsScalarAndBatchInvariant) {
    const Isa isa = GetParam();
    const int64_t rows_list[] = {1, 3, 15, 16, 17, 33, 70, 131};
    const int64_t cols_list[] = {1, 3, 8, 31, 33, 257, 300, 1000};
    const int64_t n_list[] = {1, 2, 5, 6, 7, 17, 64};
    uint32_t seed = 100;
    for (int64_t rows : rows_list)
        for (int64_t cols : cols_list) {
            const Mat m = make_mat(rows, cols, seed++);
            for (int64_t n : n_list) {
                auto xbuf = random_floats(n * cols + 1, seed++);
                const float* x = xbuf.data() + 1;  // misaligned activations
                for (WeightType type : {WeightType::F32, WeightType::BF16}) {
                    const WeightMatrix w = m.view(type);
                    const auto ref = run(Isa::Scalar, w, x, n);
                    const auto got = run(isa, w, x, n);
                    expect_bits_equal(got, ref, "vs scalar " + shape(w, n));
                    if (HasFatalFailure()) return;
                    for (int64_t t = 0; t < n; ++t) {  // batch invariance
                        const auto one = run(isa, w, x + t * cols, 1);
                        const std::vector<float> row(got.begin() + t * rows,
                                                     got.begin() + (t + 1) * rows);
                        expect_bits_equal(
                            row, one,
                            "batch invariance t=" + std::to_string(t) + " " + shape(w, n));
                        if (HasFatalFailure()) return;
                    }
                    // The double check is independent of the ISA: do it once (scalar run).
                    if (isa == Isa::AVX2 && (n <= 7 || rows * cols <= 4096)) {
                        expect_near_exact(w, x, n, ref);
                        if (HasFatalFailure()) return;
                    }
                }
            }
        }
}

// A sub-range of rows writes exactly those output columns (bit-equal to the full run) and
// nothing else, also when the range cuts panels.
TEST_P(KernelsMatmul, RowRangeWritesOnlyItsColumns) {
    const Isa isa = GetParam();
    const int64_t rows = 50, cols = 300;
    const Mat m = make_mat(rows, cols, 9);
    const int64_t ranges[][2] = {{5, 38}, {16, 32}, {0, 17}, {33, 50}, {48, 50}, {7, 8}};
    for (int64_t n : {1, 3, 7}) {
        auto x = random_floats(n * cols, 10 + static_cast<uint32_t>(n));
        for (WeightType type : {WeightType::F32, WeightType::BF16}) {
            const WeightMatrix w = m.view(type);
            const auto full = run(isa, w, x.data(), n);
            for (const auto& rg : ranges) {
                std::vector<float> part(n * rows, 12345.0f);
                matmul_rows(isa, w, x.data(), n, part.data(), rg[0], rg[1]);
                for (int64_t t = 0; t < n; ++t)
                    for (int64_t r = 0; r < rows; ++r) {
                        const float e = (r >= rg[0] && r < rg[1]) ? full[t * rows + r] : 12345.0f;
                        ASSERT_EQ(std::bit_cast<uint32_t>(part[t * rows + r]),
                                  std::bit_cast<uint32_t>(e))
                            << type_name(type) << " n=" << n << " range=[" << rg[0] << "," << rg[1]
                            << ") t=" << t << " r=" << r;
                    }
            }
        }
    }
}

TEST_P(KernelsMatmul, EmptyReductionGivesZero) {
    const Isa isa = GetParam();
    const float dummy_w[1] = {0.0f};
    const float x[2] = {1.0f, 2.0f};
    WeightMatrix w{WeightType::F32, 5, 0, dummy_w};
    for (int64_t n : {1, 2}) {
        std::vector<float> y(n * 5, 7.0f);
        matmul_rows(isa, w, x, n, y.data(), 0, 5);
        for (float v : y) EXPECT_EQ(std::bit_cast<uint32_t>(v), 0u);  // +0.0f
    }
}

// Chains start from +0.0f: an all-negative-zero product sequence gives +0.0f (0 + -0 = +0),
// not -0.0f; and inf/NaN propagate as in the scalar chain.
TEST_P(KernelsMatmul, SpecialValuesMatchScalar) {
    const Isa isa = GetParam();
    const int64_t rows = 20, cols = 300, n = 7;
    Mat m = make_mat(rows, cols, 21);
    std::vector<float> row(cols, -0.0f);
    for (WeightType type : {WeightType::F32, WeightType::BF16}) {
        void* data = type == WeightType::F32 ? static_cast<void*>(m.f32.data() + 1)
                                             : static_cast<void*>(m.bf16.data() + 1);
        pack_weight_row(type, cols, 3, row.data(), data);  // row 3: -0 everywhere
        row[5] = std::numeric_limits<float>::infinity();
        pack_weight_row(type, cols, 4, row.data(), data);  // row 4: one +inf
        row[5] = -0.0f;
    }
    auto x = random_floats(n * cols, 22, 0.5f, 1.0f);
    x[2 * cols + 5] = std::numeric_limits<float>::quiet_NaN();
    for (WeightType type : {WeightType::F32, WeightType::BF16}) {
        const WeightMatrix w = m.view(type);
        for (int64_t nn : {int64_t{1}, n}) {
            const auto ref = run(Isa::Scalar, w, x.data(), nn);
            const auto got = run(isa, w, x.data(), nn);
            expect_bits_equal(got, ref, "special " + shape(w, nn));
            EXPECT_EQ(std::bit_cast<uint32_t>(got[3]), 0u);
            EXPECT_TRUE(std::isinf(got[4]));
        }
    }
}

INSTANTIATE_TEST_SUITE_P(KernelsSimd, KernelsMatmul, ::testing::Values(Isa::AVX2, Isa::AVX512),
                         testing::isa_param_name);

// The AVX-512 f32/bf16 kernels (kernels/matmul_avx512.cpp: 12-token x 2-panel register tiles,
// 256-column cache blocks) on SIMDe equal the scalar reference bit for bit on any CPU: token
// counts that leave every tile remainder (1, 2, 13, 25), single panels beside pairs (70 rows: two
// pairs and a partial fifth panel), column tails and several cache blocks, and row ranges that cut
// a pair. On AVX-512 machines the same source runs natively in KernelsSimd/KernelsMatmul.
TEST(KernelsMatmulAvx512Emulated, BitExactVsScalar) {
    const detail::MatmulTable& t = detail::matmul_avx512_emulated();
    uint32_t seed = 500;
    for (int64_t rows : {17, 33, 70})
        for (int64_t cols : {3, 257, 300}) {
            const Mat m = make_mat(rows, cols, seed++);
            for (int64_t n : {1, 2, 13, 25}) {
                auto xbuf = random_floats(n * cols + 1, seed++);
                const float* x = xbuf.data() + 1;
                for (WeightType type : {WeightType::F32, WeightType::BF16}) {
                    const WeightMatrix w = m.view(type);
                    const auto ref = run(Isa::Scalar, w, x, n);
                    for (const auto& [r0, r1] :
                         {std::pair<int64_t, int64_t>{0, rows}, {5, 38}, {16, rows}}) {
                        if (r1 > rows) continue;
                        std::vector<float> y(n * rows, 12345.0f);
                        if (type == WeightType::F32) {
                            t.f32(static_cast<const float*>(w.data), cols, x, n, y.data(), rows, r0,
                                  r1);
                        } else {
                            t.bf16(static_cast<const uint16_t*>(w.data), cols, x, n, y.data(), rows,
                                   r0, r1);
                        }
                        for (int64_t tk = 0; tk < n; ++tk)
                            for (int64_t r = 0; r < rows; ++r) {
                                const float e = (r >= r0 && r < r1) ? ref[tk * rows + r] : 12345.0f;
                                ASSERT_EQ(std::bit_cast<uint32_t>(y[tk * rows + r]),
                                          std::bit_cast<uint32_t>(e))
                                    << shape(w, n) << " range=[" << r0 << "," << r1 << ") t=" << tk
                                    << " r=" << r;
                            }
                    }
                }
            }
        }
}

// The pool splits rows in whole panels; by the contract the result cannot depend on the split
// anyway: 1, 2, 3 threads and the single-threaded entry point are bit-identical, per ISA, and
// equal to the scalar reference.
TEST(KernelsMatmulThreads, ThreadCountInvariantBitExact) {
    util::ThreadPool pools[] = {util::ThreadPool(1), util::ThreadPool(2), util::ThreadPool(3)};
    for (int64_t rows : {203, 16, 48, 100}) {
        const int64_t cols = 300;
        const Mat m = make_mat(rows, cols, 11 + static_cast<uint32_t>(rows));
        for (int64_t n : {1, 5, 17}) {
            auto x = random_floats(n * cols, 12 + static_cast<uint32_t>(n));
            for (WeightType type : {WeightType::F32, WeightType::BF16}) {
                const WeightMatrix w = m.view(type);
                const auto ref = run(Isa::Scalar, w, x.data(), n);
                for (Isa isa : kAllIsas) {
                    if (!isa_supported(isa)) continue;
                    testing::ActiveIsaGuard guard(isa);
                    for (auto& pool : pools) {
                        std::vector<float> y(n * rows, -1.0f);
                        matmul(w, x.data(), n, y.data(), pool);
                        expect_bits_equal(y, ref,
                                          std::string(isa_name(isa)) + " threads=" +
                                              std::to_string(pool.size()) + " " + shape(w, n));
                        if (HasFatalFailure()) return;
                    }
                }
            }
        }
    }
}

TEST(KernelsMatmulPack, LayoutAndRoundTrip) {
    for (int64_t rows : {1, 15, 16, 17, 40}) {
        for (int64_t cols : {1, 3, 33}) {
            const auto vals =
                random_floats(rows * cols, 30 + static_cast<uint32_t>(rows * cols), -3.0f, 3.0f);
            const int64_t elems = packed_weight_elems(rows, cols);
            EXPECT_EQ(elems, (rows + 15) / 16 * 16 * cols);
            std::vector<float> pf(elems, 0.0f);
            std::vector<uint16_t> pb(elems, 0);
            for (int64_t r = 0; r < rows; ++r) {
                pack_weight_row(WeightType::F32, cols, r, vals.data() + r * cols, pf.data());
                pack_weight_row(WeightType::BF16, cols, r, vals.data() + r * cols, pb.data());
            }
            // Layout spelled out: (r / 16) * cols * 16 + k * 16 + r % 16.
            for (int64_t r = 0; r < rows; ++r)
                for (int64_t k = 0; k < cols; ++k) {
                    const int64_t i = (r / 16) * cols * 16 + k * 16 + r % 16;
                    ASSERT_EQ(packed_index(r, k, cols), i);
                    ASSERT_EQ(std::bit_cast<uint32_t>(pf[i]),
                              std::bit_cast<uint32_t>(vals[r * cols + k]));
                    ASSERT_EQ(pb[i], tensor::f32_to_bf16(vals[r * cols + k]));
                }
            // Padding rows of the last panel untouched (zero).
            for (int64_t r = rows; r < (rows + 15) / 16 * 16; ++r)
                for (int64_t k = 0; k < cols; ++k) {
                    ASSERT_EQ(std::bit_cast<uint32_t>(pf[packed_index(r, k, cols)]), 0u);
                    ASSERT_EQ(pb[packed_index(r, k, cols)], 0u);
                }
            const WeightMatrix wf{WeightType::F32, rows, cols, pf.data()};
            const WeightMatrix wb{WeightType::BF16, rows, cols, pb.data()};
            std::vector<float> out(cols);
            for (int64_t r = 0; r < rows; ++r) {
                unpack_weight_row(wf, r, out.data());
                for (int64_t k = 0; k < cols; ++k)
                    ASSERT_EQ(std::bit_cast<uint32_t>(out[k]),
                              std::bit_cast<uint32_t>(vals[r * cols + k]))
                        << "f32 r=" << r << " k=" << k;
                unpack_weight_row(wb, r, out.data());
                for (int64_t k = 0; k < cols; ++k)
                    ASSERT_EQ(std::bit_cast<uint32_t>(out[k]),
                              std::bit_cast<uint32_t>(
                                  tensor::bf16_to_f32(tensor::f32_to_bf16(vals[r * cols + k]))))
                        << "bf16 r=" << r << " k=" << k;
            }
        }
    }
}

// A bf16 source copied into panels (the loader's path for BF16 checkpoints) is byte for byte what
// packing its f32 values gives, for any row range (ranges that start or end inside a panel) and
// for special values (a signalling NaN comes out quieted, as f32_to_bf16 does).
TEST(Matmul, PackBf16RowsMatchesPackingF32) {
    const int64_t rows = 37, cols = 19;  // 37: two whole panels and a part
    std::vector<uint16_t> src(static_cast<size_t>(rows * cols));
    const auto vals = random_floats(src.size(), 7);
    for (size_t i = 0; i < src.size(); ++i) src[i] = tensor::f32_to_bf16(vals[i]);
    src[5] = 0x7f81;   // signalling NaN
    src[40] = 0xffc1;  // quiet NaN, negative
    src[41] = 0x7f80;  // +inf
    src[42] = 0x8000;  // -0
    src[36] = 0x7f81;  // signalling NaN in the columns past the last 8 (row 1, column 17)
    src[20 * cols + 9] = 0xff81;  // in the second whole panel
    const int64_t n = packed_weight_elems(rows, cols);
    std::vector<uint16_t> want(static_cast<size_t>(n), 0);
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t k = 0; k < cols; ++k)
            row[static_cast<size_t>(k)] =
                tensor::bf16_to_f32(src[static_cast<size_t>(r * cols + k)]);
        pack_weight_row(WeightType::BF16, cols, r, row.data(), want.data());
    }
    for (const auto& [a, b] : std::vector<std::pair<int64_t, int64_t>>{
             {0, rows}, {0, 5}, {5, 16}, {16, 30}, {30, rows}}) {
        std::vector<uint16_t> got(static_cast<size_t>(n), 0);
        // Split at a and b: three calls cover every row.
        const auto* bytes = reinterpret_cast<const uint8_t*>(src.data());
        pack_bf16_rows(cols, 0, a, bytes, got.data());
        pack_bf16_rows(cols, a, b, bytes + a * cols * 2, got.data());
        pack_bf16_rows(cols, b, rows, bytes + b * cols * 2, got.data());
        EXPECT_EQ(got, want) << "split at " << a << ", " << b;
    }
    EXPECT_EQ(want[static_cast<size_t>(packed_index(0, 5, cols))], 0x7fc1);  // quieted
    EXPECT_EQ(want[static_cast<size_t>(packed_index(1, 17, cols))], 0x7fc1);
    EXPECT_EQ(want[static_cast<size_t>(packed_index(20, 9, cols))], 0xffc1);
}

// A row-major lookup table (an embedding table read where the file maps it): rows come back as
// stored (bf16 widened exactly, f32 copied), and every matmul entry refuses it.
TEST(Matmul, RowMajorLookupTableRowsAndNoMatmul) {
    const int64_t rows = 3, cols = 5;
    const auto vals = random_floats(static_cast<size_t>(rows * cols), 91, -2.0f, 2.0f);
    std::vector<uint16_t> bits(vals.size());
    for (size_t i = 0; i < vals.size(); ++i) bits[i] = tensor::f32_to_bf16(vals[i]);
    for (const WeightType t : {WeightType::F32, WeightType::BF16}) {
        WeightMatrix w;
        w.type = t;
        w.rows = rows;
        w.cols = cols;
        w.row_major = true;
        w.data = t == WeightType::F32 ? static_cast<const void*>(vals.data()) : bits.data();
        std::vector<float> out(static_cast<size_t>(cols));
        for (int64_t r = 0; r < rows; ++r) {
            unpack_weight_row(w, r, out.data());
            for (int64_t k = 0; k < cols; ++k) {
                const auto i = static_cast<size_t>(r * cols + k);
                EXPECT_EQ(out[static_cast<size_t>(k)],
                          t == WeightType::F32 ? vals[i] : tensor::bf16_to_f32(bits[i]));
            }
        }
        util::ThreadPool pool(1);
        std::vector<float> x(static_cast<size_t>(cols), 1.0f), y(static_cast<size_t>(rows));
        EXPECT_THROW(matmul(w, x.data(), 1, y.data(), pool), util::Error);
        EXPECT_THROW(matmul_rows(Isa::Scalar, w, x.data(), 1, y.data(), 0, rows), util::Error);
    }
}

}  // namespace
}  // namespace warden::kernels
