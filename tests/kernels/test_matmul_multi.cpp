// The decode fast paths of kernels/matmul_quant.h: the AVX2 activation quantizer gives the
// same bytes as the scalar definition (including ties, NaN/inf, zero and tiny blocks), and
// matmul_multi (shared input, one dispatch, dynamic panel split) gives bit-identical outputs
// to one matmul_rows(Isa::Scalar) call per matrix, for mixed weight types, 1-3 threads and
// batch sizes 1 and 5; matmul_grouped (one dispatch of several inputs' matmuls) the same.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernels/matmul.h"
#include "kernels/matmul_quant.h"
#include "kernels_test_util.h"
#include "quant/quantizer.h"
#include "tensor/weight_format.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace warden::kernels {
namespace {

using testing::random_floats;

TEST(QuantActs, Avx2BytesEqualScalar) {
    WARDEN_REQUIRE_ISA(Isa::AVX2);
    const int64_t cols = 32 * 12, n = 3;
    auto x = random_floats(static_cast<size_t>(n * cols), 21, -4.0f, 4.0f);
    // Block 0: exact .5 ties after scaling (max 127 -> id 1); block 1: zeros; block 2: NaN and
    // inf lanes; block 3: tiny values; block 4: one large outlier; block 5: negative max.
    for (int i = 0; i < 32; ++i)
        x[static_cast<size_t>(i)] = (i == 0) ? 127.0f : static_cast<float>(i) - 15.5f;
    for (int i = 32; i < 64; ++i) x[static_cast<size_t>(i)] = (i % 2) ? 0.0f : -0.0f;
    x[70] = std::numeric_limits<float>::quiet_NaN();
    x[75] = std::numeric_limits<float>::infinity();
    x[80] = -std::numeric_limits<float>::quiet_NaN();
    for (int i = 96; i < 128; ++i) x[static_cast<size_t>(i)] = 1e-38f * static_cast<float>(i - 110);
    x[140] = 3.0e4f;
    x[170] = -50.0f;
    x[cols + 33] = std::numeric_limits<float>::quiet_NaN();  // a NaN block without inf
    const int64_t nb = n * cols / 32;
    std::vector<int8_t> q0(static_cast<size_t>(n * cols)), q1(q0.size());
    std::vector<float> d0(static_cast<size_t>(nb)), d1(d0.size());
    std::vector<int32_t> s0(static_cast<size_t>(nb)), s1(s0.size()), z0(s0.size()), z1(s0.size());
    quantize_acts_isa(Isa::Scalar, x.data(), n, cols, q0.data(), d0.data(), s0.data(), z0.data());
    quantize_acts_isa(Isa::AVX2, x.data(), n, cols, q1.data(), d1.data(), s1.data(), z1.data());
    for (size_t i = 0; i < q0.size(); ++i) ASSERT_EQ(q0[i], q1[i]) << "code " << i;
    for (size_t b = 0; b < d0.size(); ++b) {
        ASSERT_EQ(std::bit_cast<uint32_t>(d0[b]), std::bit_cast<uint32_t>(d1[b])) << "scale " << b;
        ASSERT_EQ(s0[b], s1[b]) << "sum " << b;
        ASSERT_EQ(z0[b], z1[b]) << "zero-point pairs " << b;
        // The xz word, from the codes independently: two int16 halves that sum to -8 * xs.
        int32_t lo = 0, hi = 0;
        for (int64_t i = 0; i < 32; ++i)
            (i % 4 < 2 ? lo : hi) += q0[b * 32 + static_cast<size_t>(i)];
        ASSERT_EQ(static_cast<int16_t>(z0[b] & 0xffff), -8 * lo) << "low half " << b;
        ASSERT_EQ(static_cast<int16_t>(static_cast<uint32_t>(z0[b]) >> 16), -8 * hi)
            << "high half " << b;
        ASSERT_EQ(-8 * (lo + hi), -8 * s0[b]) << b;
    }
    // The hand-made blocks mean what they should (the scalar definition, independently).
    EXPECT_EQ(q0[1], -14);  // -14.5 ties to even
    EXPECT_EQ(q0[2], -14);  // -13.5 ties to even
    EXPECT_EQ(d0[1], 0.0f);
    EXPECT_EQ(s0[1], 0);
    EXPECT_EQ(q0[70], 0);  // NaN -> 0 (inf makes the scale inf, so every code of block 2 is 0)
}

std::vector<uint8_t> pack(const WeightMatrix& w, const std::vector<float>& vals) {
    std::vector<uint8_t> buf;
    if (w.type == WeightType::Q4 || w.type == WeightType::Q8 || w.type == WeightType::FP8) {
        buf.assign(static_cast<size_t>(quant_packed_bytes(w)), 0);
        for (int64_t r = 0; r < w.rows; ++r)
            pack_quant_row(
                w, r, quant::default_quantizer().quantize_row(w, vals.data() + r * w.cols, nullptr),
                buf.data());
    } else {
        const size_t el = w.type == WeightType::BF16 ? 2 : 4;
        buf.assign(static_cast<size_t>(packed_weight_elems(w.rows, w.cols)) * el, 0);
        for (int64_t r = 0; r < w.rows; ++r)
            pack_weight_row(w.type, w.cols, r, vals.data() + r * w.cols, buf.data());
    }
    return buf;
}

TEST(QuantMatmulMulti, BitIdenticalToSeparateScalarMatmuls) {
    const int64_t cols = 256;
    struct Spec {
        const char* fmt;  // tensor::parse_weight_format name, or "bf16" / "f32"
        int64_t rows;
    };
    const std::vector<std::vector<Spec>> groups = {
        {{"int4", 80}, {"int4", 16}, {"int4", 33}},           // q/k/v-like, uneven tail panel
        {{"int4-g128", 300}, {"int4-g128", 300}},             // gate/up-like
        {{"int8", 40}, {"int4-asym-a16", 17}, {"bf16", 50}},  // mixed types
        {{"f32", 5}},                                         // one small matrix (one panel)
        {{"fp8", 48}, {"int4-bf16s", 64}},
    };
    util::ThreadPool pools[] = {util::ThreadPool(1), util::ThreadPool(2), util::ThreadPool(3)};
    uint32_t seed = 300;
    for (const auto& g : groups) {
        std::vector<WeightMatrix> ws;
        std::vector<std::vector<uint8_t>> bufs;
        std::string what;
        for (const Spec& s : g) {
            WeightMatrix w;
            const std::string f = s.fmt;
            if (f == "bf16" || f == "f32") {
                w = WeightMatrix{f == "bf16" ? WeightType::BF16 : WeightType::F32, s.rows, cols,
                                 nullptr};
            } else {
                w = kernels::weight_layout(tensor::parse_weight_format(f), s.rows, cols);
            }
            bufs.push_back(pack(w, random_floats(static_cast<size_t>(s.rows * cols), seed++)));
            ws.push_back(w);
            what += f + "x" + std::to_string(s.rows) + " ";
        }
        for (size_t i = 0; i < ws.size(); ++i) ws[i].data = bufs[i].data();
        for (int64_t n : {1, 5}) {
            const auto x = random_floats(static_cast<size_t>(n * cols), seed++, -2.0f, 2.0f);
            std::vector<std::vector<float>> want;
            for (const WeightMatrix& w : ws) {
                want.emplace_back(static_cast<size_t>(n * w.rows));
                matmul_rows(Isa::Scalar, w, x.data(), n, want.back().data(), 0, w.rows);
            }
            // Every batch-1 grab size (DecodeTuning::grab_div: half, a quarter, a sixteenth of the
            // panels left on two threads) covers every row exactly once; the -7 fill shows a row
            // left unwritten.
            for (const int grab_div : {1, 2, 8})
                for (auto& pool : pools) {
                    DecodeTuning tune = decode_tuning();
                    tune.grab_div = grab_div;
                    testing::DecodeTuningGuard tg(tune);
                    std::vector<std::vector<float>> got;
                    std::vector<MatmulOut> outs;
                    for (const WeightMatrix& w : ws)
                        got.emplace_back(static_cast<size_t>(n * w.rows), -7.0f);
                    for (size_t i = 0; i < ws.size(); ++i) outs.push_back({&ws[i], got[i].data()});
                    matmul_multi(outs, x.data(), n, pool);
                    for (size_t i = 0; i < ws.size(); ++i)
                        for (size_t j = 0; j < got[i].size(); ++j)
                            ASSERT_EQ(std::bit_cast<uint32_t>(got[i][j]),
                                      std::bit_cast<uint32_t>(want[i][j]))
                                << what << "matrix " << i << " out " << j << " n=" << n
                                << " threads=" << pool.size() << " grab_div=" << grab_div;
                }
        }
    }
}

// matmul_grouped: groups with their own inputs (different token counts and widths, as a MoE
// layer's experts have) in one dispatch give every matrix the bits of a scalar matmul of its own
// group's x. Includes an empty group and a zero-token group, which must be skipped.
TEST(QuantMatmulGrouped, BitIdenticalToSeparateScalarMatmuls) {
    struct Spec {
        const char* fmt;
        int64_t rows;
    };
    struct GroupSpec {
        int64_t cols, n;
        std::vector<Spec> mats;
    };
    const std::vector<GroupSpec> specs = {
        {256, 1, {{"int4", 48}, {"int4", 48}, {"fp8", 32}, {"bf16", 20}}},  // batch-1 gate/up of
                                                                            // several experts
        {256, 3, {{"int4", 48}, {"int4", 48}}},  // an expert with gathered rows
        {128, 1, {{"int4-g128", 256}}},          // a down projection (other width)
        {128, 9, {{"int4", 40}, {"int8", 17}}},  // >= 8 tokens: W4A8 unpack path
        {64, 0, {{"f32", 16}}},                  // zero tokens: skipped
        {96, 2, {}},                             // no matrices: skipped
        {64, 2, {{"fp8", 33}, {"int4-asym-a16", 16}}},
    };
    util::ThreadPool pools[] = {util::ThreadPool(1), util::ThreadPool(2), util::ThreadPool(3)};
    uint32_t seed = 900;
    std::vector<WeightMatrix> ws;
    std::vector<std::vector<uint8_t>> bufs;
    std::vector<std::vector<float>> xs;
    std::vector<size_t> first;  // ws index of each group's first matrix
    for (const GroupSpec& g : specs) {
        first.push_back(ws.size());
        xs.push_back(random_floats(static_cast<size_t>(std::max<int64_t>(g.n, 1) * g.cols), seed++,
                                   -2.0f, 2.0f));
        for (const Spec& s : g.mats) {
            const std::string f = s.fmt;
            WeightMatrix w =
                (f == "bf16" || f == "f32")
                    ? WeightMatrix{f == "bf16" ? WeightType::BF16 : WeightType::F32, s.rows, g.cols,
                                   nullptr}
                    : kernels::weight_layout(tensor::parse_weight_format(f), s.rows, g.cols);
            bufs.push_back(pack(w, random_floats(static_cast<size_t>(s.rows * g.cols), seed++)));
            ws.push_back(w);
        }
    }
    for (size_t i = 0; i < ws.size(); ++i) ws[i].data = bufs[i].data();
    std::vector<std::vector<float>> want(ws.size());
    for (size_t gi = 0; gi < specs.size(); ++gi)
        for (size_t k = 0; k < specs[gi].mats.size(); ++k) {
            const WeightMatrix& w = ws[first[gi] + k];
            const int64_t n = specs[gi].n;
            want[first[gi] + k].assign(static_cast<size_t>(std::max<int64_t>(n, 1) * w.rows),
                                       -7.0f);
            if (n > 0)
                matmul_rows(Isa::Scalar, w, xs[gi].data(), n, want[first[gi] + k].data(), 0,
                            w.rows);
        }
    for (auto& pool : pools) {
        std::vector<std::vector<float>> got;
        for (size_t i = 0; i < ws.size(); ++i) got.emplace_back(want[i].size(), -7.0f);
        std::vector<MatmulOut> outs;
        for (size_t i = 0; i < ws.size(); ++i) outs.push_back({&ws[i], got[i].data()});
        std::vector<MatmulGroup> groups;
        for (size_t gi = 0; gi < specs.size(); ++gi)
            groups.push_back({std::span(outs.data() + first[gi], specs[gi].mats.size()),
                              xs[gi].data(), specs[gi].n});
        for (int rep = 0; rep < 2; ++rep) {  // the second call reuses the thread's scratch
            matmul_grouped(groups, pool);
            for (size_t i = 0; i < ws.size(); ++i)
                for (size_t j = 0; j < got[i].size(); ++j)
                    ASSERT_EQ(std::bit_cast<uint32_t>(got[i][j]),
                              std::bit_cast<uint32_t>(want[i][j]))
                        << "matrix " << i << " out " << j << " threads=" << pool.size() << " rep "
                        << rep;
        }
    }
}

TEST(QuantMatmulMulti, RejectsMismatchedInputs) {
    std::vector<float> a(static_cast<size_t>(packed_weight_elems(16, 64)), 0.0f), b(a.size(), 0.0f);
    const WeightMatrix w1{WeightType::F32, 16, 64, a.data()}, w2{WeightType::F32, 16, 32, b.data()};
    std::vector<float> x(64), y1(16), y2(16);
    util::ThreadPool pool(2);
    const MatmulOut outs[] = {{&w1, y1.data()}, {&w2, y2.data()}};
    EXPECT_THROW(matmul_multi(outs, x.data(), 1, pool), util::Error);
}

}  // namespace
}  // namespace warden::kernels
