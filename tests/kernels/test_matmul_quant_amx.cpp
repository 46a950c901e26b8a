// The AMX-INT8 W4A8/W8A8 kernels (kernels/matmul_quant_amx.cpp) equal the scalar kernels bit for
// bit, run through the tile model on any CPU: int4 symmetric/asymmetric, f16/bf16 scales, groups
// 32/128; int8 per channel and per 32-block; token counts that fill no tile, one, several and a
// ragged last one (1, 5, 16, 17, 33, 70: a second 64-token chunk); row counts and row ranges that
// cut panels. The scalar reference computes each token row alone, so equality is also batch
// invariance. On AMX hosts the native kernel is compared with the model and the ISA dispatch with
// the scalar kernels; elsewhere those tests skip and say why.
#include <gtest/gtest.h>

#include <bit>
#include <string>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/kernels_internal.h"
#include "kernels/matmul.h"
#include "kernels/matmul_quant.h"
#include "kernels_test_util.h"
#include "quant/quantizer.h"
#include "quant_test_util.h"
#include "tensor/weight_format.h"

namespace warden::kernels {
namespace detail {
// tests/kernels/test_matmul_quant_amx_emulated.cpp: the AMX kernels on SIMDe and the tile model.
void mm_quant_amx_tiles_emulated(const QuantArgs& a, int64_t row_begin, int64_t row_end);
}  // namespace detail
namespace {

using testing::expect_bits;
using testing::make_qmat;
using testing::QMat;
using testing::random_floats;

using Kernel = void (*)(const detail::QuantArgs&, int64_t, int64_t);

// A tile kernel called as matmul.cpp's run_rows calls one: activations quantized per token, rows
// [r0, r1) of y written, the rest left at `fill`.
std::vector<float> run_tiles(Kernel k, const WeightMatrix& w, const float* x, int64_t n, int64_t r0,
                             int64_t r1, float fill = -1.0f) {
    const int64_t cols = w.cols, nb = cols / 32;
    std::vector<int8_t> xq(static_cast<size_t>(n * cols));
    std::vector<float> xd(static_cast<size_t>(n * nb));
    std::vector<int32_t> xs(static_cast<size_t>(n * nb));
    quantize_acts(x, n, cols, xq.data(), xd.data(), xs.data());
    std::vector<float> y(static_cast<size_t>(n * w.rows), fill);
    detail::QuantArgs a{};
    a.kind = w.type == WeightType::Q4 ? 0 : 1;
    a.rows = w.rows;
    a.cols = cols;
    a.data = static_cast<const uint8_t*>(w.data);
    a.group = w.group;
    a.asym = w.asym;
    a.bf16_scales = w.bf16_scales;
    a.xq = xq.data();
    a.xd = xd.data();
    a.xs = xs.data();
    a.n = n;
    a.y = y.data();
    a.ldy = w.rows;
    k(a, r0, r1);
    return y;
}

std::vector<float> run_scalar(const WeightMatrix& w, const float* x, int64_t n) {
    return testing::run_isa(Isa::Scalar, w, x, n);
}

struct Shape {
    const char* fmt;
    int64_t rows, cols;
};
// Every format at one small shape, and the group-128 and per-channel layouts wider. Modest on
// purpose: the model multiplies byte by byte and this file also runs under the sanitizers.
const Shape kShapes[] = {{"int4", 17, 128},
                         {"int4-asym", 40, 128},
                         {"int4-bf16s", 17, 64},
                         {"int4-g128", 40, 256},
                         {"int4-g128-asym-bf16s", 17, 128},
                         {"int8", 40, 128},
                         {"int8-bf16s", 17, 64},
                         {"int8-g32", 17, 128},
                         {"int8-g32-bf16s", 40, 64}};

TEST(AmxQuantMatmul, ModelBitExactVsScalar) {
    uint32_t seed = 501;
    for (const Shape& s : kShapes)
        for (int64_t n : {1, 5, 16, 17, 33, 70}) {
            const QMat m = make_qmat(s.fmt, s.rows, s.cols, seed++);
            auto xb = random_floats(static_cast<size_t>(n * s.cols + 1), seed++, -2.0f, 2.0f);
            const float* x = xb.data() + 1;
            const auto ref = run_scalar(m.w, x, n);
            const std::string what = std::string(s.fmt) + " rows=" + std::to_string(s.rows) +
                                     " cols=" + std::to_string(s.cols) + " n=" + std::to_string(n);
            expect_bits(run_tiles(detail::mm_quant_amx_tiles_emulated, m.w, x, n, 0, s.rows), ref,
                        "amx model vs scalar " + what);
            if (HasFatalFailure()) return;
            if (n != 17) continue;
            // Row ranges that start and end inside panels: only those rows are written.
            const int64_t r0 = 3, r1 = s.rows - 2;
            const auto y =
                run_tiles(detail::mm_quant_amx_tiles_emulated, m.w, x, n, r0, r1, 123.0f);
            for (int64_t t = 0; t < n; ++t)
                for (int64_t r = 0; r < s.rows; ++r) {
                    const size_t i = static_cast<size_t>(t * s.rows + r);
                    const float want = (r >= r0 && r < r1) ? ref[i] : 123.0f;
                    ASSERT_EQ(std::bit_cast<uint32_t>(y[i]), std::bit_cast<uint32_t>(want))
                        << "rows " << r0 << ".." << r1 << " " << what;
                }
        }
}

TEST(AmxQuantMatmul, NativeMatchesModelAndDispatchMatchesScalar) {
    if (!isa_supported(Isa::AMX))
        GTEST_SKIP() << "no native AMX here (" << amx_status()
                     << "): the AMX kernels are checked through the tile model only";
    uint32_t seed = 901;
    for (const Shape& s : kShapes)
        for (int64_t n : {1, 8, 33, 70}) {
            const QMat m = make_qmat(s.fmt, s.rows, s.cols, seed++);
            auto xb = random_floats(static_cast<size_t>(n * s.cols), seed++, -2.0f, 2.0f);
            const std::string what = std::string(s.fmt) + " n=" + std::to_string(n);
            const auto model =
                run_tiles(detail::mm_quant_amx_tiles_emulated, m.w, xb.data(), n, 0, s.rows);
            expect_bits(run_tiles(detail::mm_quant_amx_tiles, m.w, xb.data(), n, 0, s.rows), model,
                        "native vs model " + what);
            std::vector<float> y(static_cast<size_t>(n * s.rows));
            matmul_rows(Isa::AMX, m.w, xb.data(), n, y.data(), 0, s.rows);
            expect_bits(y, run_scalar(m.w, xb.data(), n), "Isa::AMX vs scalar " + what);
            if (HasFatalFailure()) return;
        }
}

}  // namespace
}  // namespace warden::kernels
