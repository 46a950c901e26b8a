// The int4 and int8 scale searches (quant/quantizer.cpp over quant/int4_candidates.h) and the
// K-quant block search (quant/ggml_block_quantizer.cpp over quant/kquant_candidates.h) write the
// same codes and scales on every instruction set, and symmetric int4 the same as a plain
// sequential statement of its search (each candidate rounded to f16, its codes and weighted error,
// the first smallest kept), so files written on different machines are identical.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/kernels_test_util.h"
#include "kernels/matmul.h"
#include "quant/ggml_block_quantizer.h"
#include "quant/int4_candidates.h"
#include "quant/quantizer.h"
#include "tensor/float_convert.h"
#include "tensor/ggml_types.h"
#include "tensor/weight_format.h"
#include "util/error.h"

namespace warden::quant {
namespace {

using kernels::Isa;

std::vector<float> rows_of(int64_t rows, int64_t cols, uint32_t seed) {
    std::mt19937 rng(seed);
    std::student_t_distribution<float> heavy(3.0f);  // weights with outliers, as real layers have
    std::vector<float> v(static_cast<size_t>(rows * cols));
    for (auto& x : v) x = 0.02f * heavy(rng);
    // Some groups all zero, some constant, some with one large value; in every row a group of
    // tiny values (f16 scales below the normal range) and one of large values (scales near the
    // top of f16's), at places that move from row to row, and one whose scales round to even.
    std::fill(v.begin(), v.begin() + 32, 0.0f);
    std::fill(v.begin() + 32, v.begin() + 64, 0.5f);
    v[70] = 3.0f;
    for (int64_t r = 0; r < rows && cols >= 512; ++r) {
        float* row = v.data() + r * cols;
        for (int64_t i = 0; i < 32; ++i) {
            row[32 * (2 + r % 7) + i] *= 1e-4f;
            row[32 * (9 + r % 5) + i] = std::clamp(row[32 * (9 + r % 5) + i] * 5e4f, -6e5f, 6e5f);
            // The Q4_0 rule's scale and the fits' exactly halfway between two bf16 values
            // (1 + 2^-8: round to even gives 1).
            row[32 * 14 + i] = static_cast<float>(i % 16 - 8) * 1.00390625f;
        }
    }
    return v;
}

// The symmetric int4 search of one group stated sequentially, one candidate at a time (scalar
// code, f16 scales, no importance): the reference the batched SIMD search must equal. Each grid
// step's codes give the error bound of its two scales; the Q4_0 rule and the three smallest bounds
// are then scored exactly, and the first smallest exact error wins.
uint16_t reference_sym_group(const float* x, int G, uint8_t* q) {
    float amax = 0, vmax = 0;
    for (int i = 0; i < G; ++i)
        if (std::fabs(x[i]) > amax) {
            amax = std::fabs(x[i]);
            vmax = x[i];
        }
    if (amax == 0) {
        std::memset(q, 8, static_cast<size_t>(G));
        return 0;
    }
    // The group's sums in four running sums, lane k taking elements k, k + 4, ...
    double s2[4] = {}, sx[4] = {};
    for (int i = 0; i < G; ++i) s2[i % 4] += static_cast<double>(x[i]) * x[i];
    const auto sigma2 = static_cast<float>(((s2[0] + s2[1]) + (s2[2] + s2[3])) / G);
    std::vector<float> w(static_cast<size_t>(G));
    for (int i = 0; i < G; ++i) {
        w[i] = 1.0f * std::sqrt(sigma2 + x[i] * x[i]);
        sx[i % 4] += static_cast<double>(w[i]) * x[i] * x[i];
    }
    const double sxx = (sx[0] + sx[1]) + (sx[2] + sx[3]);
    const auto rc = [](float v, float lo, float hi) {
        return (std::min(hi, std::max(lo, v)) + 12582912.0f) - 12582912.0f;
    };
    const auto exact = [&](float d) {
        float acc[8] = {};
        for (int i = 0; i < G; i += 8)
            for (int k = 0; k < 8; ++k) {
                const float e = x[i + k] - rc(x[i + k] * (1.0f / d), -8, 7) * d;
                acc[k] += w[i + k] * e * e;
            }
        return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    };
    struct Cand {
        int order;
        uint16_t h;
        float d;
        double bound;
    };
    std::vector<Cand> rule, grid;
    int order = 0;
    const auto add = [&](float scale, double a, double b, bool is_rule) {
        const uint16_t h = tensor::f32_to_f16(scale);
        const float d = tensor::f16_to_f32(h);
        const int o = order++;
        if (!(d != 0) || !std::isfinite(d) || !std::isfinite(1 / d)) return;
        (is_rule ? rule : grid).push_back({o, h, d, sxx - 2.0 * d * a + double(d) * d * b});
    };
    add(vmax / -8.0f, 0, 0, true);
    for (int s = -9; s <= 9; ++s) {
        const float is = -(8.0f + 0.1f * static_cast<float>(s)) / vmax;
        float sxl[8] = {}, sll[8] = {};
        for (int i = 0; i < G; i += 8)
            for (int k = 0; k < 8; ++k) {
                const float r = rc(x[i + k] * is, -8, 7);
                sxl[k] += w[i + k] * x[i + k] * r;
                sll[k] += w[i + k] * r * r;
            }
        float a = 0, b = 0;
        for (int k = 0; k < 8; ++k) {
            a += sxl[k];
            b += sll[k];
        }
        add(1.0f / is, a, b, false);
        if (b > 0 && a / b != 0) add(a / b, a, b, false);
    }
    std::stable_sort(grid.begin(), grid.end(),
                     [](const Cand& p, const Cand& r) { return p.bound < r.bound; });
    if (grid.size() > 3) grid.resize(3);
    std::vector<Cand> scored = rule;
    scored.insert(scored.end(), grid.begin(), grid.end());
    std::sort(scored.begin(), scored.end(),
              [](const Cand& p, const Cand& r) { return p.order < r.order; });
    float best = std::numeric_limits<float>::infinity();
    uint16_t best_h = 0;
    for (const Cand& c : scored) {
        const float err = exact(c.d);
        if (err < best) {
            best = err;
            best_h = c.h;
        }
    }
    const float d = tensor::f16_to_f32(best_h);
    for (int i = 0; i < G; ++i)
        q[i] = static_cast<uint8_t>(static_cast<int>(rc(x[i] / d, -8, 7)) + 8);
    return best_h;
}

// Rows of 34 groups: two batches of sixteen side by side (quant/int4_search_batch.h, where the CPU
// has AVX-512) and two groups on their own.
TEST(QuantSearchIsa, SymmetricInt4EqualsTheSequentialSearch) {
    const int64_t rows = 12, cols = 34 * 32;
    const std::vector<float> v = rows_of(rows, cols, 7);
    const kernels::WeightMatrix lay =
        kernels::weight_layout(tensor::parse_weight_format("int4"), rows, cols);
    for (int64_t r = 0; r < rows; ++r) {
        const kernels::QuantRow got =
            default_quantizer().quantize_row(lay, v.data() + r * cols, nullptr);
        for (int64_t g = 0; g < cols / 32; ++g) {
            uint8_t q[32];
            const uint16_t h = reference_sym_group(v.data() + r * cols + g * 32, 32, q);
            ASSERT_EQ(got.d[static_cast<size_t>(g)], h) << "row " << r << " group " << g;
            ASSERT_EQ(0, std::memcmp(got.q.data() + g * 32, q, 32))
                << "row " << r << " group " << g;
        }
    }
}

// 72 groups of 32 (four batches of sixteen and eight alone) and 18 of 128 (one batch and two).
TEST(QuantSearchIsa, Int4AndInt8RowsAreTheSameOnEveryInstructionSet) {
    const int64_t rows = 8, cols = 2304;
    const std::vector<float> v = rows_of(rows, cols, 11);
    std::vector<float> imp(static_cast<size_t>(cols));
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> u(0.0f, 4.0f);
    for (auto& x : imp) x = u(rng);
    for (const char* fmt : {"int4", "int4-g128", "int4-asym", "int4-g128-asym", "int4-bf16s",
                            "int4-asym-bf16s", "int8", "int8-g32", "int8-bf16s"}) {
        tensor::WeightFormat f;
        try {
            f = tensor::parse_weight_format(fmt);
        } catch (const std::exception&) {
            continue;  // a spelling this build does not have
        }
        const kernels::WeightMatrix lay = kernels::weight_layout(f, rows, cols);
        for (const float* im : std::vector<const float*>{nullptr, imp.data()}) {
            std::vector<kernels::QuantRow> ref;
            {
                kernels::testing::ActiveIsaGuard g(Isa::Scalar);
                for (int64_t r = 0; r < rows; ++r)
                    ref.push_back(default_quantizer().quantize_row(lay, v.data() + r * cols, im));
            }
            for (const Isa isa : {Isa::AVX2, Isa::AVX512}) {
                if (!kernels::isa_supported(isa)) continue;
                kernels::testing::ActiveIsaGuard g(isa);
                for (int64_t r = 0; r < rows; ++r) {
                    const kernels::QuantRow got =
                        default_quantizer().quantize_row(lay, v.data() + r * cols, im);
                    EXPECT_EQ(got.q, ref[static_cast<size_t>(r)].q)
                        << fmt << " " << kernels::isa_name(isa);
                    EXPECT_EQ(got.d, ref[static_cast<size_t>(r)].d)
                        << fmt << " " << kernels::isa_name(isa);
                    EXPECT_EQ(got.m, ref[static_cast<size_t>(r)].m)
                        << fmt << " " << kernels::isa_name(isa);
                }
            }
        }
    }
}

// A group no scale of the dtype can hold (its values too large for f16, or too small for any
// nonzero scale) is refused with the same error whichever path searches it, inside a batch of
// sixteen or on its own.
TEST(QuantSearchIsa, Int4GroupWithoutAStorableScaleIsRefusedOnEveryInstructionSet) {
    const int64_t cols = 17 * 32;
    for (const int64_t bad : {int64_t{5}, int64_t{16}})
        for (const float value : {3e6f, 1e-12f}) {
            std::vector<float> v = rows_of(1, cols, 21);
            for (int64_t i = 0; i < 32; ++i)
                v[static_cast<size_t>(bad * 32 + i)] = value * static_cast<float>(i % 5 - 2);
            const kernels::WeightMatrix lay =
                kernels::weight_layout(tensor::parse_weight_format("int4"), 1, cols);
            for (const Isa isa : {Isa::Scalar, Isa::AVX2, Isa::AVX512}) {
                if (!kernels::isa_supported(isa)) continue;
                kernels::testing::ActiveIsaGuard g(isa);
                try {
                    (void)default_quantizer().quantize_row(lay, v.data(), nullptr);
                    ADD_FAILURE() << "group " << bad << " value " << value << " "
                                  << kernels::isa_name(isa) << ": not refused";
                } catch (const util::Error& e) {
                    EXPECT_STREQ(e.what(),
                                 "int4 quantization: group scale out of range of the scale dtype");
                }
            }
        }
}

// The int8 clip search's errors themselves (not only the candidate they pick) are the scalar
// lanes' to the bit on every instruction set, with and without importance, for 1 to 8 candidates
// (spare lanes repeat the last) and for values that clip and round to ties.
TEST(QuantSearchIsa, Int8ClipErrorsAreTheScalarOnesBitForBit) {
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> u(-3.0f, 3.0f), w(0.0f, 4.0f);
    for (const int64_t n : {int64_t{1}, int64_t{32}, int64_t{577}}) {
        std::vector<float> x(static_cast<size_t>(n)), imp(static_cast<size_t>(n));
        for (auto& v : x) v = u(rng);
        for (auto& v : imp) v = w(rng);
        x[0] = 2.5f * 0.02f;  // a tie at the smallest scale below
        const float d[8] = {0.02f, 0.021f, 0.0235f, 0.019f, 0.03f, 0.05f, 0.0125f, 0.1f};
        for (const float* im : std::vector<const float*>{nullptr, imp.data()})
            for (int nc = 1; nc <= 8; ++nc) {
                double ref[8], got[8];
                {
                    kernels::testing::ActiveIsaGuard g(Isa::Scalar);
                    int8_clip_errors(x.data(), im, n, d, nc, ref);
                }
                for (const Isa isa : {Isa::AVX2, Isa::AVX512}) {
                    if (!kernels::isa_supported(isa)) continue;
                    kernels::testing::ActiveIsaGuard g(isa);
                    int8_clip_errors(x.data(), im, n, d, nc, got);
                    for (int c = 0; c < nc; ++c)
                        EXPECT_EQ(std::memcmp(&got[c], &ref[c], sizeof(double)), 0)
                            << kernels::isa_name(isa) << " n " << n << " candidate " << c << ": "
                            << got[c] << " vs " << ref[c];
                }
            }
    }
}

// The GGUF block types quantize_ggml_row writes, and an importance vector for them.
constexpr tensor::GgmlType kGgmlWritten[] = {tensor::GgmlType::Q4_K, tensor::GgmlType::Q5_K,
                                             tensor::GgmlType::Q6_K, tensor::GgmlType::Q5_0,
                                             tensor::GgmlType::Q5_1, tensor::GgmlType::Q8_0};

std::vector<float> importance_of(int64_t cols, uint32_t seed) {
    std::vector<float> imp(static_cast<size_t>(cols));
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(0.0f, 4.0f);
    for (auto& x : imp) x = u(rng);
    return imp;
}

// The rows of v quantized one at a time.
std::vector<uint8_t> row_by_row(tensor::GgmlType t, const std::vector<float>& v, int64_t rows,
                                int64_t cols, const float* imp) {
    const int64_t rb = tensor::ggml_row_bytes(t, cols);
    std::vector<uint8_t> out(static_cast<size_t>(rows * rb));
    for (int64_t r = 0; r < rows; ++r)
        quantize_ggml_row(t, v.data() + r * cols, cols, imp, out.data() + r * rb);
    return out;
}

TEST(QuantSearchIsa, KquantBlocksAreTheSameOnEveryInstructionSet) {
    const int64_t rows = 8, cols = 512;
    const std::vector<float> v = rows_of(rows, cols, 5);
    const std::vector<float> imp = importance_of(cols, 9);
    for (const tensor::GgmlType t : kGgmlWritten) {
        for (const float* im : std::vector<const float*>{nullptr, imp.data()}) {
            std::vector<uint8_t> ref;
            {
                kernels::testing::ActiveIsaGuard g(Isa::Scalar);
                ref = row_by_row(t, v, rows, cols, im);
            }
            for (const Isa isa : {Isa::AVX2, Isa::AVX512}) {
                if (!kernels::isa_supported(isa)) continue;
                kernels::testing::ActiveIsaGuard g(isa);
                EXPECT_EQ(row_by_row(t, v, rows, cols, im), ref)
                    << tensor::ggml_type_name(t) << " " << kernels::isa_name(isa);
            }
        }
    }
}

// quantize_ggml_rows computes the rows' statistics side by side: the same bytes as one row at a
// time, for every type, with and without importance, and a count of rows that is not a multiple
// of the four it batches.
TEST(QuantSearchIsa, KquantRowsAtOnceMatchRowByRow) {
    const int64_t rows = 7, cols = 768;
    const std::vector<float> v = rows_of(rows, cols, 11);
    const std::vector<float> imp = importance_of(cols, 3);
    for (const tensor::GgmlType t : kGgmlWritten) {
        for (const float* im : std::vector<const float*>{nullptr, imp.data()}) {
            std::vector<uint8_t> all(static_cast<size_t>(rows * tensor::ggml_row_bytes(t, cols)));
            quantize_ggml_rows(t, v.data(), rows, cols, im, all.data());
            EXPECT_EQ(all, row_by_row(t, v, rows, cols, im))
                << tensor::ggml_type_name(t) << (im ? " imatrix" : "");
        }
    }
}

TEST(QuantSearchIsa, KquantRowsRejectANonFiniteValueWithItsColumn) {
    std::vector<float> v = rows_of(3, 256, 4);
    v[2 * 256 + 17] = std::numeric_limits<float>::infinity();
    std::vector<uint8_t> out(
        static_cast<size_t>(3 * tensor::ggml_row_bytes(tensor::GgmlType::Q6_K, 256)));
    try {
        quantize_ggml_rows(tensor::GgmlType::Q6_K, v.data(), 3, 256, nullptr, out.data());
        FAIL() << "no error";
    } catch (const std::exception& e) {
        EXPECT_NE(std::string(e.what()).find("column 17"), std::string::npos) << e.what();
    }
}

// The non-finite check ahead of every quantized row finds the first infinite or NaN value at any
// position (inside a register's worth and in the tail), on every instruction set, and passes the
// largest finite values.
TEST(QuantSearchIsa, FirstNonFiniteFindsTheFirstBadValueOnEveryIsa) {
    const float inf = std::numeric_limits<float>::infinity();
    const float bad_values[] = {inf, -inf, std::numeric_limits<float>::quiet_NaN(),
                                -std::numeric_limits<float>::quiet_NaN()};
    for (const Isa isa : {Isa::Scalar, Isa::AVX2, Isa::AVX512}) {
        if (!kernels::isa_supported(isa)) continue;
        kernels::testing::ActiveIsaGuard g(isa);
        for (const int64_t n : {int64_t{1}, int64_t{15}, int64_t{16}, int64_t{67}, int64_t{2048}}) {
            std::vector<float> x(static_cast<size_t>(n), std::numeric_limits<float>::max());
            for (int64_t i = 0; i < n; i += 2)
                x[static_cast<size_t>(i)] = -x[static_cast<size_t>(i)];
            EXPECT_EQ(first_non_finite(x.data(), n), -1) << kernels::isa_name(isa) << " n " << n;
            for (const int64_t at : {int64_t{0}, n / 2, n - 1})
                for (const float b : bad_values) {
                    std::vector<float> y = x;
                    y[static_cast<size_t>(at)] = b;
                    if (at + 1 < n) y[static_cast<size_t>(n - 1)] = inf;  // a later one too
                    EXPECT_EQ(first_non_finite(y.data(), n), at)
                        << kernels::isa_name(isa) << " n " << n << " at " << at << " " << b;
                }
        }
    }
}

}  // namespace
}  // namespace warden::quant
