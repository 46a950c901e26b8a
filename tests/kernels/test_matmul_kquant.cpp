// GGUF block matmul kernels (kernels/matmul_kquant.h: K-quants, Q4_0/Q4_1/Q5_0/Q5_1/Q8_0,
// IQ4_NL/IQ4_XS):
// every ISA variant bit-exact against the scalar kernel for any batch size, thread split and row
// range, on random valid blocks with extreme scales; the scalar kernel against an independent
// double-precision sum of the dequantized weights (tensor::dequantize_row, itself checked against
// gguf-py in tests/python/test_gguf_kquant.py) times the dequantized int8 activations.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "kernels/kernels_internal.h"
#include "kernels/kernels_test_util.h"
#include "kernels/matmul.h"
#include "kernels/matmul_kquant.h"
#include "kernels/matmul_quant.h"
#include "quant/quantizer.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace warden::kernels::detail {
void mm_kquant_avx512_emulated(const QuantArgs& a, int64_t r0,
                               int64_t r1);  // *_avx512_emulated.cpp
}

namespace warden::kernels {
namespace {

using testing::random_floats;

uint16_t f16_bits(float f) {
    return tensor::f32_to_f16(f);
}

// Offset of a block's f16 scales (d, then dmin or m where the type has one) and their count.
std::pair<int64_t, int> scale_slots(WeightType t) {
    switch (t) {
        case WeightType::Q6K:
            return {208, 1};
        case WeightType::Q3K:
            return {108, 1};
        case WeightType::Q2K:
            return {80, 2};
        case WeightType::Q4K:
        case WeightType::Q5K:
        case WeightType::Q5_1:
        case WeightType::Q4_1:
            return {0, 2};
        default:
            return {0, 1};
    }
}

// Random valid blocks of `t`; scale `kind` 0: ordinary, 1: extreme (largest f16, smallest
// subnormal, zero, negative).
std::vector<uint8_t> random_row(WeightType t, int64_t cols, std::mt19937& rng, int kind) {
    const int64_t bb = kquant_block_bytes(t), nsb = cols / kquant_block_elems(t);
    std::vector<uint8_t> row(static_cast<size_t>(nsb * bb));
    for (auto& b : row) b = static_cast<uint8_t>(rng() & 0xff);
    const float extremes[] = {65504.0f, -65504.0f, 5.96e-8f, 0.0f, -3.0f, 1e-3f};
    for (int64_t s = 0; s < nsb; ++s) {
        uint8_t* blk = row.data() + s * bb;
        auto scale = [&] {
            if (kind == 1) return f16_bits(extremes[rng() % 6]);
            return f16_bits(std::ldexp(static_cast<float>(rng() % 1000 + 1) / 1000.0f,
                                       -static_cast<int>(rng() % 10)));
        };
        auto put = [](uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); };
        const auto [at, n] = scale_slots(t);
        for (int i = 0; i < n; ++i) put(blk + at + 2 * i, scale());
    }
    return row;
}

struct KCase {
    WeightMatrix w;
    std::vector<uint8_t> packed;
};

KCase make_case(WeightType t, int64_t rows, int64_t cols, uint32_t seed, int kind) {
    KCase c;
    c.w.type = t;
    c.w.rows = rows;
    c.w.cols = cols;
    c.packed.assign(static_cast<size_t>(quant_packed_bytes(c.w)), 0);
    std::mt19937 rng(seed);
    for (int64_t r = 0; r < rows; ++r) {
        QuantRow q;
        q.q = random_row(t, cols, rng, kind);
        pack_quant_row(c.w, r, q, c.packed.data());
    }
    c.w.data = c.packed.data();
    return c;
}

std::vector<float> acts(int64_t n, int64_t cols, uint32_t seed) {
    std::vector<float> x = random_floats(static_cast<size_t>(n * cols), seed, -2.0f, 2.0f);
    for (int64_t i = 0; i < n * cols; i += 97) x[static_cast<size_t>(i)] *= 1000.0f;  // outliers
    if (n > 1)
        for (int64_t k = 0; k < 32; ++k)
            x[static_cast<size_t>(cols + k)] = 0.0f;  // an all-zero block
    return x;
}

std::vector<float> run(Isa isa, const WeightMatrix& w, const std::vector<float>& x, int64_t n,
                       int64_t r0 = 0, int64_t r1 = -1) {
    std::vector<float> y(static_cast<size_t>(n * w.rows), -7.0f);
    matmul_rows(isa, w, x.data(), n, y.data(), r0, r1 < 0 ? w.rows : r1);
    return y;
}

void expect_same_bits(const std::vector<float>& a, const std::vector<float>& b, const char* what) {
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
        uint32_t ua, ub;
        std::memcpy(&ua, &a[i], 4);
        std::memcpy(&ub, &b[i], 4);
        ASSERT_EQ(ua, ub) << what << " at " << i << ": " << a[i] << " vs " << b[i];
    }
}

class KQuantMatmul : public ::testing::TestWithParam<WeightType> {
  protected:
    // A row length that is not whole groups of eight blocks where the type allows one (32-weight
    // blocks: the kernels' scalar tail), else `cols`.
    int64_t odd_cols(int64_t cols) const {
        return kquant_block_elems(GetParam()) == 32 ? cols + 3 * 32 : cols;
    }
};

TEST_P(KQuantMatmul, ScalarMatchesDequantizedSum) {
    const int64_t rows = 19, cols = odd_cols(512), n = 3;
    const KCase c = make_case(GetParam(), rows, cols, 11, 0);
    const std::vector<float> x = acts(n, cols, 5);
    const std::vector<float> y = run(Isa::Scalar, c.w, x, n);
    // Independent: dequantized weights (llama.cpp's formula) times the dequantized activations.
    std::vector<int8_t> xq(static_cast<size_t>(n * cols));
    std::vector<float> xd(static_cast<size_t>(n * cols / 32));
    std::vector<int32_t> xs(xd.size());
    quantize_acts(x.data(), n, cols, xq.data(), xd.data(), xs.data());
    std::vector<float> wr(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
        dequant_row(c.w, r, wr.data());
        for (int64_t t = 0; t < n; ++t) {
            double ref = 0.0, mag = 0.0;
            for (int64_t k = 0; k < cols; ++k) {
                const double xv = static_cast<double>(xq[static_cast<size_t>(t * cols + k)]) *
                                  xd[static_cast<size_t>((t * cols + k) / 32)];
                ref += wr[static_cast<size_t>(k)] * xv;
                mag += std::fabs(wr[static_cast<size_t>(k)] * xv);
            }
            EXPECT_NEAR(y[static_cast<size_t>(t * rows + r)], ref, 1e-5 * mag + 1e-30)
                << "row " << r << " token " << t;
        }
    }
}

TEST_P(KQuantMatmul, SimdBitExactVsScalarAnyBatchAndRows) {
    for (int kind = 0; kind < 2; ++kind) {
        const int64_t rows = 37, cols = odd_cols(768), n = 5;
        const KCase c = make_case(GetParam(), rows, cols, 100 + static_cast<uint32_t>(kind), kind);
        const std::vector<float> x = acts(n, cols, 7);
        const std::vector<float> ref = run(Isa::Scalar, c.w, x, n);
        for (Isa isa : {Isa::AVX2, Isa::AVX512}) {
            if (!isa_supported(isa)) continue;
            expect_same_bits(run(isa, c.w, x, n), ref, isa_name(isa));
            // Batch invariance: token 3 alone gives the bits it got in the batch of 5.
            const std::vector<float> x3(x.begin() + 3 * cols, x.begin() + 4 * cols);
            const std::vector<float> y3 = run(isa, c.w, x3, 1);
            expect_same_bits(y3, std::vector<float>(ref.begin() + 3 * rows, ref.begin() + 4 * rows),
                             "batch 1");
            // A row range writes only its rows, with the same bits.
            const std::vector<float> part = run(isa, c.w, x, n, 5, 21);
            for (int64_t t = 0; t < n; ++t)
                for (int64_t r = 0; r < rows; ++r) {
                    const float got = part[static_cast<size_t>(t * rows + r)];
                    if (r >= 5 && r < 21)
                        ASSERT_EQ(got, ref[static_cast<size_t>(t * rows + r)]);
                    else
                        ASSERT_EQ(got, -7.0f);
                }
        }
    }
}

// One matrix's kernel arguments over n tokens of activations x, quantized by the scalar path
// (kept as f32 in a.x for kinds that read them so, FP8 rows), for calling a kernel directly (y and
// unpack left to the test).
struct DirectCall {
    std::vector<int8_t> xq;
    std::vector<float> xd;
    std::vector<int32_t> xs;
    detail::QuantArgs a{};
    DirectCall(int kind, const uint8_t* data, int64_t rows, int64_t cols,
               const std::vector<float>& x, int64_t n)
        : xq(static_cast<size_t>(n * cols)), xd(static_cast<size_t>(n * cols / 32)), xs(xd.size()) {
        if (kind == detail::kQuantKindFp8Rows) {
            a.x = x.data();
        } else {
            quantize_acts_isa(Isa::Scalar, x.data(), n, cols, xq.data(), xd.data(), xs.data());
            a.xq = xq.data();
            a.xd = xd.data();
            a.xs = xs.data();
        }
        a.kind = kind;
        a.rows = rows;
        a.cols = cols;
        a.data = data;
        a.n = n;
        a.ldy = rows;
    }
    DirectCall(WeightType type, const KCase& c, int64_t rows, int64_t cols,
               const std::vector<float>& x, int64_t n)
        : DirectCall(kquant_kind(type), c.packed.data(), rows, cols, x, n) {}
    DirectCall(const DirectCall&) = delete;  // a points into the vectors
    DirectCall& operator=(const DirectCall&) = delete;

    // y over every row from the SIMDe-emulated AVX-512 kernel.
    std::vector<float> emulated_avx512() {
        std::vector<float> y(static_cast<size_t>(a.n * a.rows), -7.0f);
        a.y = y.data();
        detail::mm_kquant_avx512_emulated(a, 0, a.rows);
        a.y = nullptr;
        return y;
    }
};

TEST_P(KQuantMatmul, EmulatedAvx512BitExactVsScalar) {
    // Ten tokens: one group of eight for the multi-token Q5 kernel and two token by token.
    const int64_t rows = 21, cols = odd_cols(512), n = 10;
    for (int kind = 0; kind < 2; ++kind) {
        const KCase c = make_case(GetParam(), rows, cols, 200 + static_cast<uint32_t>(kind), kind);
        const std::vector<float> x = acts(n, cols, 9);
        const std::vector<float> ref = run(Isa::Scalar, c.w, x, n);
        DirectCall call(GetParam(), c, rows, cols, x, n);
        detail::QuantArgs& a = call.a;
        std::vector<float> y(static_cast<size_t>(n * rows));
        a.y = y.data();
        detail::mm_kquant_avx512_emulated(a, 0, rows);
        expect_same_bits(y, ref, "emulated AVX-512");
        // With the unpack scratch matmul.cpp hands over (Q5_0 / Q5_1 unpack each row into it).
        std::vector<uint8_t> scratch(static_cast<size_t>(
            40 * (cols / 32 + 8) + detail::kQ5UnpackTokens * (cols + cols / 4) + 32));
        const auto addr = reinterpret_cast<uintptr_t>(scratch.data());
        a.unpack = scratch.data() + (32 - addr % 32) % 32;
        std::fill(y.begin(), y.end(), -7.0f);
        detail::mm_kquant_avx512_emulated(a, 0, rows);
        expect_same_bits(y, ref, "emulated AVX-512, unpack scratch");
    }
}

// Every token's outputs are the bits it gets alone, whatever the batch around it: token counts
// 1..12 (the multi-token kernels' groups and their remainders) against the scalar kernel on all
// tokens, on row lengths with and without a partial last group of eight 32-blocks.
TEST_P(KQuantMatmul, BatchInvariantAcrossTokenCounts) {
    const int64_t rows = 33, n = 12;
    for (const int64_t cols : {int64_t{256}, odd_cols(512)}) {
        const KCase c = make_case(GetParam(), rows, cols, 500, 0);
        const std::vector<float> x = acts(n, cols, 13);
        const std::vector<float> ref = run(Isa::Scalar, c.w, x, n);
        for (Isa isa : {Isa::Scalar, Isa::AVX2, Isa::AVX512}) {
            if (!isa_supported(isa)) continue;
            for (int64_t m = 1; m <= n; ++m) {
                const int64_t t0 = (m * 5) % (n - m + 1);  // tokens [t0, t0 + m)
                const std::vector<float> xm(x.begin() + t0 * cols, x.begin() + (t0 + m) * cols);
                expect_same_bits(
                    run(isa, c.w, xm, m),
                    std::vector<float>(ref.begin() + t0 * rows, ref.begin() + (t0 + m) * rows),
                    isa_name(isa));
            }
        }
    }
}

// One token (decode): the SIMD kernels take four rows per pass and the rest one by one, and
// (32-weight blocks) two blocks per vector with a shorter last group of blocks; every row count
// of a range 1..7 and every shape of that last group (none, pairs only, a lone block), natively
// and on SIMDe, bit-exact against the scalar kernel.
TEST_P(KQuantMatmul, OneTokenRowGroupsAndTails) {
    const bool b32 = kquant_block_elems(GetParam()) == 32;
    const std::vector<int64_t> widths =
        b32 ? std::vector<int64_t>{224, 256, 544, 576, 608} : std::vector<int64_t>{256, 1536};
    const int64_t rows = 7;
    const std::pair<int64_t, int64_t> ranges[] = {{0, 7}, {1, 7}, {2, 5}, {3, 4}, {0, 6}};
    const auto bits = [](float f) {
        uint32_t u;
        std::memcpy(&u, &f, 4);
        return u;
    };
    for (const int64_t cols : widths)
        for (int kind = 0; kind < 2; ++kind) {
            const KCase c =
                make_case(GetParam(), rows, cols, 600 + static_cast<uint32_t>(cols + kind), kind);
            const std::vector<float> x = acts(1, cols, 17);
            const std::vector<float> ref = run(Isa::Scalar, c.w, x, 1);
            for (Isa isa : {Isa::AVX2, Isa::AVX512}) {
                if (!isa_supported(isa)) continue;
                for (const auto& [r0, r1] : ranges) {
                    const std::vector<float> y = run(isa, c.w, x, 1, r0, r1);
                    for (int64_t r = 0; r < rows; ++r)
                        ASSERT_EQ(bits(y[static_cast<size_t>(r)]),
                                  bits(r >= r0 && r < r1 ? ref[static_cast<size_t>(r)] : -7.0f))
                            << isa_name(isa) << " cols " << cols << " rows " << r0 << ".." << r1
                            << " row " << r;
                }
            }
            std::vector<uint8_t> scratch(static_cast<size_t>(40 * (cols / 32 + 8) + 32));
            const auto addr = reinterpret_cast<uintptr_t>(scratch.data());
            DirectCall call(GetParam(), c, rows, cols, x, 1);
            detail::QuantArgs& a = call.a;
            a.unpack = scratch.data() + (32 - addr % 32) % 32;
            for (const auto& [r0, r1] : ranges) {
                std::vector<float> y(static_cast<size_t>(rows), -7.0f);
                a.y = y.data();
                detail::mm_kquant_avx512_emulated(a, r0, r1);
                for (int64_t r = 0; r < rows; ++r)
                    ASSERT_EQ(bits(y[static_cast<size_t>(r)]),
                              bits(r >= r0 && r < r1 ? ref[static_cast<size_t>(r)] : -7.0f))
                        << "emulated AVX-512 cols " << cols << " rows " << r0 << ".." << r1
                        << " row " << r;
            }
        }
}

TEST_P(KQuantMatmul, ThreadCountInvariant) {
    const int64_t rows = 70, cols = 256, n = 2;
    const KCase c = make_case(GetParam(), rows, cols, 300, 0);
    const std::vector<float> x = acts(n, cols, 3);
    const std::vector<float> ref = run(Isa::Scalar, c.w, x, n);
    for (int threads : {1, 2, 3}) {
        util::ThreadPool pool(threads);
        std::vector<float> y(static_cast<size_t>(n * rows));
        matmul(c.w, x.data(), n, y.data(), pool);
        expect_same_bits(y, ref, "pool");
    }
}

TEST_P(KQuantMatmul, LayoutRoundTripAndShapeCheck) {
    const KCase c = make_case(GetParam(), 17, 256, 400, 0);
    EXPECT_EQ(quant_packed_bytes(c.w),
              32 * 256 / kquant_block_elems(GetParam()) * kquant_block_bytes(GetParam()));
    std::mt19937 rng(400);
    for (int64_t r = 0; r < 17; ++r)
        EXPECT_EQ(unpack_quant_row(c.w, r).q, random_row(GetParam(), 256, rng, 0));
    WeightMatrix bad = c.w;
    bad.cols = 256 + 16;
    EXPECT_THROW(check_quant_shape(bad), util::Error);
}

// Q8_0 read in place computes what the same blocks imported into int8-g32 panels do, bit for bit
// (matmul_kquant.h: int8-g32's arithmetic): one token (the row kernel, eight rows per pass, rows
// not a multiple of eight) and several (panels formed per call, handed to the int8-g32 kernel),
// with -128 codes and extreme scales, on every ISA here; and the panels formed per call are the
// bytes the loader's import writes.
// The in-place layouts' shared checks. Every panel that form(p, out) forms from the in-place
// bytes equals the panel the synchronous import wrote into `panels` (pw's layout).
template <class Form>
void expect_formed_panels(const WeightMatrix& pw, const std::vector<uint8_t>& panels, Form form) {
    std::vector<uint8_t> formed(static_cast<size_t>(quant_panel_bytes(pw)));
    for (int64_t p = 0; p * kPanelRows < pw.rows; ++p) {
        std::fill(formed.begin(), formed.end(), 0xee);
        form(p, formed.data());
        ASSERT_TRUE(
            std::equal(formed.begin(), formed.end(), panels.begin() + p * quant_panel_bytes(pw)))
            << "panel " << p;
    }
}

// The in-place matrix computes the panels' outputs over n tokens, bit for bit, on every ISA the
// CPU has (AMX included) and on the emulated AVX-512 kernel (`call`: the in-place kernel's
// arguments).
void expect_in_place_equals_panels(const WeightMatrix& in_place, const WeightMatrix& pw,
                                   const std::vector<float>& x, int64_t n, DirectCall& call) {
    const std::vector<float> ref = run(Isa::Scalar, pw, x, n);
    for (Isa isa : {Isa::Scalar, Isa::AVX2, Isa::AVX512, Isa::AMX}) {
        if (!isa_supported(isa)) continue;
        expect_same_bits(run(isa, in_place, x, n), ref, isa_name(isa));
        expect_same_bits(run(isa, pw, x, n), ref, "panels");
    }
    expect_same_bits(call.emulated_avx512(), ref, "emulated AVX-512");
}

TEST(KQuantQ8_0, InPlaceEqualsInt8G32PanelsBitForBit) {
    for (const int64_t rows : {1, 7, 13, 40}) {
        const int64_t cols = 32 * 11;
        const KCase c =
            make_case(WeightType::Q8_0, rows, cols, 300 + static_cast<uint32_t>(rows), rows % 2);
        WeightMatrix g32;
        g32.type = WeightType::Q8;
        g32.group = 32;
        g32.rows = rows;
        g32.cols = cols;
        std::vector<uint8_t> panels(static_cast<size_t>(quant_packed_bytes(g32)), 0);
        const int64_t row_bytes = cols / 32 * 34;
        for (int64_t r = 0; r < rows; ++r) {
            const auto q = quant::import_ggml_row(tensor::GgmlType::Q8_0,
                                                  c.packed.data() + r * row_bytes, g32);
            ASSERT_TRUE(q.has_value());
            pack_quant_row(g32, r, *q, panels.data());
        }
        g32.data = panels.data();
        expect_formed_panels(g32, panels, [&](int64_t p, uint8_t* out) {
            pack_q8_0_panel(c.packed.data() + p * kPanelRows * row_bytes, row_bytes,
                            std::min<int64_t>(kPanelRows, rows - p * kPanelRows), cols, out);
        });
        for (const int64_t n : {1, 2, 5, 9}) {
            const std::vector<float> x = acts(n, cols, 17 + static_cast<uint32_t>(n));
            DirectCall call(WeightType::Q8_0, c, rows, cols, x, n);
            expect_in_place_equals_panels(c.w, g32, x, n, call);
        }
    }
}

// Q4_0 / Q4_1 read in place compute what the same blocks imported into int4-g32 /
// int4-g32-asym panels do, bit for bit (matmul_kquant.h: the panels' arithmetic), as Q8_0 above:
// one token (eight rows per pass), several (panels formed per call, with the int4 kernels'
// unpack scratch from eight tokens), natively and on SIMDe; and the panels formed per call are
// the bytes the loader's synchronous import writes.
class KQuantQ4Blocks : public ::testing::TestWithParam<bool> {};

TEST_P(KQuantQ4Blocks, InPlaceEqualsInt4G32PanelsBitForBit) {
    const bool asym = GetParam();
    const WeightType type = asym ? WeightType::Q4_1 : WeightType::Q4_0;
    const tensor::GgmlType gtype = asym ? tensor::GgmlType::Q4_1 : tensor::GgmlType::Q4_0;
    for (const int64_t rows : {1, 7, 13, 40}) {
        const int64_t cols = 32 * 11;
        const KCase c = make_case(type, rows, cols, 700 + static_cast<uint32_t>(rows), rows % 2);
        WeightMatrix g32;
        g32.type = WeightType::Q4;
        g32.group = 32;
        g32.asym = asym;
        g32.rows = rows;
        g32.cols = cols;
        std::vector<uint8_t> panels(static_cast<size_t>(quant_packed_bytes(g32)), 0);
        const int64_t row_bytes = cols / 32 * (asym ? 20 : 18);
        for (int64_t r = 0; r < rows; ++r) {
            const auto q = quant::import_ggml_row(gtype, c.packed.data() + r * row_bytes, g32);
            ASSERT_TRUE(q.has_value());
            pack_quant_row(g32, r, *q, panels.data());
        }
        g32.data = panels.data();
        expect_formed_panels(g32, panels, [&](int64_t p, uint8_t* out) {
            pack_q4_block_panel(c.packed.data() + p * kPanelRows * row_bytes, row_bytes,
                                std::min<int64_t>(kPanelRows, rows - p * kPanelRows), cols, asym,
                                out);
        });
        for (const int64_t n : {1, 2, 5, 9}) {
            const std::vector<float> x = acts(n, cols, 17 + static_cast<uint32_t>(n));
            DirectCall call(type, c, rows, cols, x, n);
            expect_in_place_equals_panels(c.w, g32, x, n, call);
        }
    }
}

// Row-major int4 (kernels/matmul_quant.h: compressed-tensors' packed codes, scales in their own
// array) read in place computes what the same rows in int4 panels do, bit for bit: one token
// (eight rows per pass), several (panels formed per call), natively and on SIMDe, groups 32 and
// 128, f16 and bf16 scales, the scales at an odd byte offset; and the panels formed per call are
// the bytes pack_quant_row writes for the rows' codes and scales.
TEST(RowMajorInt4, InPlaceEqualsPanelsBitForBit) {
    for (const int group : {32, 128})
        for (const bool bf16 : {false, true})
            for (const int64_t rows : {1, 7, 13, 40}) {
                SCOPED_TRACE("group " + std::to_string(group) + (bf16 ? " bf16" : " f16") +
                             " rows " + std::to_string(rows));
                const int64_t cols = 128 * 3, ng = cols / group;
                std::mt19937 rng(900 + static_cast<uint32_t>(rows + group + bf16));
                std::vector<uint8_t> codes(static_cast<size_t>(rows * cols / 2));
                for (auto& c : codes) c = static_cast<uint8_t>(rng() & 0xff);
                // One spare byte first: the scales at an odd address.
                std::vector<uint8_t> scale_buf(static_cast<size_t>(1 + rows * ng * 2));
                const float extremes[] = {65504.0f, -3.0f, 5.96e-8f, 0.0f, 1e-3f, -0.25f};
                for (int64_t i = 0; i < rows * ng; ++i) {
                    const float v = rows % 2
                                        ? extremes[rng() % 6]
                                        : std::ldexp(static_cast<float>(rng() % 1000 + 1) / 1000.0f,
                                                     -static_cast<int>(rng() % 10));
                    const uint16_t h = bf16 ? tensor::f32_to_bf16(v) : tensor::f32_to_f16(v);
                    std::memcpy(scale_buf.data() + 1 + 2 * i, &h, 2);
                }
                WeightMatrix rm;
                rm.type = WeightType::Q4;
                rm.rows = rows;
                rm.cols = cols;
                rm.group = group;
                rm.bf16_scales = bf16;
                rm.row_major = true;
                rm.data = codes.data();
                rm.scales = scale_buf.data() + 1;
                WeightMatrix pw = rm;  // the panel layout, built through QuantRow
                pw.row_major = false;
                pw.scales = nullptr;
                std::vector<uint8_t> panels(static_cast<size_t>(quant_packed_bytes(pw)), 0);
                for (int64_t r = 0; r < rows; ++r) {
                    const QuantRow q = unpack_quant_row(rm, r);
                    for (int64_t k = 0; k < cols; ++k)  // independent of the kernels' unpacking
                        ASSERT_EQ(
                            q.q[static_cast<size_t>(k)],
                            (codes[static_cast<size_t>(r * cols / 2 + k / 2)] >> (k % 2 ? 4 : 0)) &
                                0x0f);
                    pack_quant_row(pw, r, q, panels.data());
                }
                pw.data = panels.data();
                expect_formed_panels(
                    pw, panels, [&](int64_t p, uint8_t* out) { pack_q4_rows_panel(rm, p, out); });
                for (const int64_t n : {1, 2, 5, 9}) {
                    const std::vector<float> x = acts(n, cols, 31 + static_cast<uint32_t>(n));
                    DirectCall call(detail::kQuantKindQ4Rows, codes.data(), rows, cols, x, n);
                    call.a.scales = scale_buf.data() + 1;
                    call.a.group = group;
                    call.a.bf16_scales = bf16;
                    expect_in_place_equals_panels(rm, pw, x, n, call);
                }
            }
}

// Row-major FP8 (kernels/matmul_quant.h: an FP8 checkpoint's codes and f32 scale grid) read in
// place computes what the same rows in fp8-bG panels do, bit for bit: one token (eight rows per
// pass, a gather per four columns) and several (panels formed per call), natively and on SIMDe;
// blocks of 128 and 64 columns, a partial last block, scale blocks of 128 and of 8 rows (so a
// pass spans two), subnormal and extreme codes; the panels formed per call are pack_quant_row's.
TEST(RowMajorFp8, InPlaceEqualsPanelsBitForBit) {
    struct Shape {
        int64_t cols, group, block_rows;
    };
    for (const Shape sh : {Shape{384, 128, 128}, Shape{200, 64, 8}, Shape{260, 128, 128}})
        for (const int64_t rows : {1, 7, 13, 40}) {
            SCOPED_TRACE("cols " + std::to_string(sh.cols) + " group " + std::to_string(sh.group) +
                         " rows " + std::to_string(rows));
            const int64_t nb = (sh.cols + sh.group - 1) / sh.group;
            std::mt19937 rng(1300 + static_cast<uint32_t>(rows + sh.cols));
            std::vector<uint8_t> codes(static_cast<size_t>(rows * sh.cols));
            for (auto& c : codes) {
                c = static_cast<uint8_t>(rng() & 0xff);
                if ((c & 0x7f) == 0x7f) c ^= 0x01;  // no NaN (refused at load)
            }
            const int64_t grid_rows = (rows + sh.block_rows - 1) / sh.block_rows;
            std::vector<float> grid(static_cast<size_t>(grid_rows * nb));
            for (auto& g : grid)
                g = std::ldexp(static_cast<float>(rng() % 1000 + 1) / 1000.0f,
                               static_cast<int>(rng() % 20) - 10) *
                    (rng() % 2 ? 1.0f : -1.0f);
            WeightMatrix rm;
            rm.type = WeightType::FP8;
            rm.rows = rows;
            rm.cols = sh.cols;
            rm.group = static_cast<int32_t>(sh.group);
            rm.row_major = true;
            rm.data = codes.data();
            rm.scales = grid.data();
            rm.scale_block_rows = sh.block_rows;
            // What it reads in place: its codes and its whole scale grid.
            EXPECT_EQ(rows_bytes(rm), rows * sh.cols + static_cast<int64_t>(grid.size()) * 4);
            WeightMatrix pw = rm;
            pw.row_major = false;
            pw.scales = nullptr;
            pw.scale_block_rows = 0;
            std::vector<uint8_t> panels(static_cast<size_t>(quant_packed_bytes(pw)), 0);
            for (int64_t r = 0; r < rows; ++r) {
                const QuantRow q = unpack_quant_row(rm, r);
                ASSERT_EQ(q.s.size(), static_cast<size_t>(nb));
                EXPECT_EQ(q.s[0], grid[static_cast<size_t>(r / sh.block_rows * nb)]);
                pack_quant_row(pw, r, q, panels.data());
            }
            pw.data = panels.data();
            expect_formed_panels(pw, panels,
                                 [&](int64_t p, uint8_t* out) { pack_fp8_rows_panel(rm, p, out); });
            for (const int64_t n : {1, 2, 5}) {
                const std::vector<float> x = acts(n, sh.cols, 41 + static_cast<uint32_t>(n));
                DirectCall call(detail::kQuantKindFp8Rows, codes.data(), rows, sh.cols, x, n);
                call.a.scales = reinterpret_cast<const uint8_t*>(grid.data());
                call.a.scale_block_rows = sh.block_rows;
                call.a.group = sh.group;
                expect_in_place_equals_panels(rm, pw, x, n, call);
            }
        }
}

INSTANTIATE_TEST_SUITE_P(Mapping, KQuantQ4Blocks, ::testing::Values(false, true),
                         [](const auto& p) { return p.param ? "Q4_1" : "Q4_0"; });

INSTANTIATE_TEST_SUITE_P(Types, KQuantMatmul,
                         ::testing::Values(WeightType::Q4K, WeightType::Q5K, WeightType::Q6K,
                                           WeightType::Q5_0, WeightType::Q5_1, WeightType::Q2K,
                                           WeightType::Q3K, WeightType::IQ4NL, WeightType::IQ4XS,
                                           WeightType::Q8_0, WeightType::Q4_0, WeightType::Q4_1),
                         [](const auto& p) {
                             std::string s = kquant_type_name(p.param);  // Q4_K -> Q4K
                             s.erase(s.find('_'), 1);
                             return s;
                         });

}  // namespace
}  // namespace warden::kernels
