// Quantized matmul kernels (kernels/matmul_quant.h): AVX2 == scalar bit for bit for every
// format (int4 W4A8 / W4A16 sym/asym f16/bf16 scales, group 32/128; int8 W8A8; fp8), batch
// invariance and thread-count invariance, plus independent references: W4A16 equals the f32
// kernel on the dequantized matrix bit for bit, W4A8/W8A8 are within a derived bound of a
// double-precision sum over dequantized weights x dequantized activations, fp8 in-register
// decode equals tensor::fp8_e4m3_to_f32 for every finite code.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "kernels/kernels_internal.h"
#include "kernels/matmul.h"
#include "kernels/matmul_quant.h"
#include "kernels_test_util.h"
#include "quant/quantizer.h"
#include "quant_test_util.h"
#include "tensor/fp8.h"
#include "tensor/weight_format.h"
#include "util/thread_pool.h"

namespace warden::kernels {
namespace detail {
// tests/kernels/test_matmul_quant_avx512_emulated.cpp: the AVX-512 VNNI kernels on SIMDe.
void mm_quant_avx512_emulated(const QuantArgs& a, int64_t row_begin, int64_t row_end);
}  // namespace detail
namespace {

using testing::expect_bits;
using testing::make_qmat;
using testing::QMat;
using testing::random_floats;
using testing::run_isa;

const char* kFormats[] = {"int4",           "int4-asym",
                          "int4-g128",      "int4-g128-asym-bf16s",
                          "int4-a16",       "int4-g128-asym-a16",
                          "int4-bf16s-a16", "int8",
                          "int8-bf16s",     "int8-g32",
                          "int8-g32-bf16s", "fp8",
                          "fp8-b128",       "fp8-b32"};
// Per channel, and block-scaled with a block that divides the kernels' 256-column widening
// blocks (128, 32) and one that does not (100: widened 200 columns at a time).
const char* kFp8Formats[] = {"fp8", "fp8-b128", "fp8-b100", "fp8-b32"};

TEST(QuantMatmul, Avx2BitExactVsScalarBatchAndThreadInvariant) {
    WARDEN_REQUIRE_ISA(Isa::AVX2);
    util::ThreadPool pool3(3);
    uint32_t seed = 7;
    for (const char* fmt : kFormats)
        for (int64_t rows : {1, 17, 40, 80})  // 80: five full panels
            for (int64_t cols : {128, 384}) {
                const QMat m = make_qmat(fmt, rows, cols, seed++);
                for (int64_t n :
                     {1, 3, 6, 7, 9,
                      14}) {  // token tiles 1, 3, 4+2, 4+3; unpacked panels: 4+4+1, 4+4+4+2
                    auto xb = random_floats(static_cast<size_t>(n * cols + 1), seed++, -2.0f, 2.0f);
                    const float* x = xb.data() + 1;
                    const std::string what = std::string(fmt) + " rows=" + std::to_string(rows) +
                                             " cols=" + std::to_string(cols) +
                                             " n=" + std::to_string(n);
                    const auto ref = run_isa(Isa::Scalar, m.w, x, n);
                    expect_bits(run_isa(Isa::AVX2, m.w, x, n), ref, "avx2 vs scalar " + what);
                    if (isa_supported(Isa::AVX512))  // the VNNI kernels, natively, read every way
                        for (const DecodeTuning& tune : testing::decode_tunings_to_test()) {
                            testing::DecodeTuningGuard tg(tune);
                            expect_bits(
                                run_isa(Isa::AVX512, m.w, x, n), ref,
                                "avx512 (" + decode_tuning_summary() + ") vs scalar " + what);
                        }
                    if (HasFatalFailure()) return;
                    std::vector<float> yt(ref.size());
                    {
                        testing::ActiveIsaGuard g(Isa::AVX2);
                        matmul(m.w, x, n, yt.data(), pool3);
                    }
                    expect_bits(yt, ref, "3 threads " + what);
                    for (int64_t t = 0; t < n; ++t) {
                        const auto one = run_isa(Isa::AVX2, m.w, x + t * cols, 1);
                        expect_bits(one,
                                    std::vector<float>(ref.begin() + t * rows,
                                                       ref.begin() + (t + 1) * rows),
                                    "batch invariance t=" + std::to_string(t) + " " + what);
                        if (HasFatalFailure()) return;
                    }
                    // Partial row ranges write only their rows and match (20..rows: starts
                    // mid-panel; ends mid-panel at 40 rows, after full panels at 80).
                    for (const auto& [r0, r1] : {std::pair<int64_t, int64_t>{3, 9}, {20, rows}}) {
                        if (rows <= 9 || r0 >= rows) continue;  // 17 rows: 3..9 only
                        std::vector<float> y(static_cast<size_t>(n * rows), 123.0f);
                        matmul_rows(Isa::AVX2, m.w, x, n, y.data(), r0, r1);
                        for (int64_t t = 0; t < n; ++t)
                            for (int64_t r = 0; r < rows; ++r) {
                                const float want = (r >= r0 && r < r1)
                                                       ? ref[static_cast<size_t>(t * rows + r)]
                                                       : 123.0f;
                                ASSERT_EQ(
                                    std::bit_cast<uint32_t>(y[static_cast<size_t>(t * rows + r)]),
                                    std::bit_cast<uint32_t>(want))
                                    << "row range " << r0 << ".." << r1 << " " << what;
                            }
                    }
                }
            }
}

// FP8 with several tokens widens each 256-column block of a panel once per tile of tokens (AVX2:
// up to 64, one at a time; AVX-512: up to 60, in register tiles of 6) and carries every token's
// four chains across blocks (fp8_panel_multi): still bit-exact with the scalar contract when cols
// is not a multiple of 4 or of the block (tails), when the tokens span several tiles (65, 130) or
// leave a register-tile remainder (5, 7), and for a row range that starts and ends mid-panel.
TEST(QuantMatmul, Fp8MultiTokenBitExactAcrossBlocksAndTokenTiles) {
    WARDEN_REQUIRE_ISA(Isa::AVX2);
    uint32_t seed = 91;
    for (const char* fmt : kFp8Formats)
        for (int64_t cols : {5, 259, 517})
            for (int64_t rows : {16, 37}) {
                const QMat m = make_qmat(fmt, rows, cols, seed++);
                for (int64_t n : {2, 5, 7, 65, 130}) {
                    auto xb = random_floats(static_cast<size_t>(n * cols + 1), seed++, -3.0f, 3.0f);
                    const float* x = xb.data() + 1;
                    const auto ref = run_isa(Isa::Scalar, m.w, x, n);
                    for (Isa isa : {Isa::AVX2, Isa::AVX512}) {
                        if (!isa_supported(isa)) continue;
                        const std::string what = std::string(isa_name(isa)) + " " + fmt +
                                                 " cols=" + std::to_string(cols) +
                                                 " rows=" + std::to_string(rows) +
                                                 " n=" + std::to_string(n);
                        expect_bits(run_isa(isa, m.w, x, n), ref, "vs scalar " + what);
                        if (HasFatalFailure()) return;
                        std::vector<float> y(static_cast<size_t>(n * rows), 7.0f);
                        matmul_rows(isa, m.w, x, n, y.data(), 3, rows - 2);
                        for (int64_t t = 0; t < n; ++t)
                            for (int64_t r = 0; r < rows; ++r) {
                                const float want = (r >= 3 && r < rows - 2)
                                                       ? ref[static_cast<size_t>(t * rows + r)]
                                                       : 7.0f;
                                ASSERT_EQ(
                                    std::bit_cast<uint32_t>(y[static_cast<size_t>(t * rows + r)]),
                                    std::bit_cast<uint32_t>(want))
                                    << "rows 3.." << rows - 2 << " t=" << t << " " << what;
                            }
                    }
                }
            }
}

// The AVX-512 VNNI entry (kernels/matmul_quant_avx512.cpp) on SIMDe, called as matmul.cpp's
// run_rows calls a kernel table: activations quantized per token, rows [r0, r1) of y written,
// unpack scratch (zero-filled 16 x cols bytes, deliberately not 64-byte aligned) when `unpack`.
// x_e4m3: FP8 at one token, x * 2^120 (QuantArgs::x_e4m3) or null (the kernel widens with its
// multiply).
std::vector<float> run_vnni_emulated(const WeightMatrix& w, const float* x, int64_t n, int64_t r0,
                                     int64_t r1, bool unpack, float fill = -1.0f,
                                     const float* x_e4m3 = nullptr) {
    const int64_t cols = w.cols, nb = cols / 32;
    std::vector<int8_t> xq(static_cast<size_t>(n * cols));
    std::vector<float> xd(static_cast<size_t>(n * nb));
    std::vector<int32_t> xs(static_cast<size_t>(n * nb)), xz(static_cast<size_t>(n * nb));
    if (w.type != WeightType::FP8)
        quantize_acts(x, n, cols, xq.data(), xd.data(), xs.data(), xz.data());  // FP8 reads x
    std::vector<float> y(static_cast<size_t>(n * w.rows), fill);
    std::vector<uint8_t> scratch(static_cast<size_t>(16 * cols + 64), 0);
    detail::QuantArgs a{};
    a.kind = w.type == WeightType::Q4 ? 0 : (w.type == WeightType::Q8 ? 1 : 2);
    a.rows = w.rows;
    a.cols = cols;
    a.data = static_cast<const uint8_t*>(w.data);
    a.group = w.group;
    a.asym = w.asym;
    a.bf16_scales = w.bf16_scales;
    a.act_f32 = w.act_f32;
    a.x = x;
    a.xq = xq.data();
    a.xd = xd.data();
    a.xs = xs.data();
    a.xz = xz.data();
    a.n = n;
    a.y = y.data();
    a.ldy = w.rows;
    a.unpack = unpack ? scratch.data() + 32 : nullptr;
    a.x_e4m3 = x_e4m3;
    detail::mm_quant_avx512_emulated(a, r0, r1);
    return y;
}

// The AVX-512 kernels (VNNI: int4 W4A8 sym/asym, f16/bf16 scales, groups 32/128; int8 W8A8 per
// channel and per block; int4 W4A16 one token and several; FP8 with one token and with several)
// equal the scalar kernels bit for bit: every token blocking (4s and the 1-3 remainder), reading
// the nibbles or the unpacked scratch, full and partial panels, row ranges that cut panels. They
// run under SIMDe here, so this holds on any CPU; on AVX-512 machines the same source runs natively
// and Avx2BitExactVsScalarBatchAndThreadInvariant also compares Isa::AVX512.
TEST(QuantMatmul, Avx512VnniEmulatedBitExactVsScalar) {
    uint32_t seed = 101;
    // Every way the kernels can read a panel (kernels/decode_tuning.h); results must not change.
    for (const DecodeTuning& tune : testing::decode_tunings_to_test()) {
        testing::DecodeTuningGuard tg(tune);
        SCOPED_TRACE(decode_tuning_summary());
        for (const char* fmt :
             {"int4", "int4-asym", "int4-bf16s", "int4-g128", "int4-g128-asym-bf16s", "int8",
              "int8-bf16s", "int8-g32", "int8-g32-bf16s", "int4-a16", "int4-g128-asym-a16",
              "int4-bf16s-a16"})
            for (int64_t rows :
                 {1, 17, 40, 80})  // 80: pairs (W4A16 with tokens), fours (W4A16 alone)
                for (int64_t cols : {128, 384}) {
                    const QMat m = make_qmat(fmt, rows, cols, seed++);
                    for (int64_t n : {1, 2, 3, 4, 7, 9, 14}) {
                        auto xb =
                            random_floats(static_cast<size_t>(n * cols + 1), seed++, -2.0f, 2.0f);
                        const float* x = xb.data() + 1;
                        const auto ref = run_isa(Isa::Scalar, m.w, x, n);
                        for (bool unpack : {false, true}) {
                            if (unpack && (n < 8 || m.w.type != WeightType::Q4)) continue;
                            const std::string what =
                                std::string(fmt) + " rows=" + std::to_string(rows) +
                                " cols=" + std::to_string(cols) + " n=" + std::to_string(n) +
                                (unpack ? " unpacked" : "");
                            expect_bits(run_vnni_emulated(m.w, x, n, 0, rows, unpack), ref,
                                        "vnni vs scalar " + what);
                            if (HasFatalFailure()) return;
                            for (const auto& [r0, r1] :
                                 {std::pair<int64_t, int64_t>{3, 9}, {20, rows}}) {
                                if (rows <= 9 || r0 >= rows) continue;
                                const auto y = run_vnni_emulated(m.w, x, n, r0, r1, unpack, 123.0f);
                                for (int64_t t = 0; t < n; ++t)
                                    for (int64_t r = 0; r < rows; ++r) {
                                        const size_t i = static_cast<size_t>(t * rows + r);
                                        const float want = (r >= r0 && r < r1) ? ref[i] : 123.0f;
                                        ASSERT_EQ(std::bit_cast<uint32_t>(y[i]),
                                                  std::bit_cast<uint32_t>(want))
                                            << "row range " << r0 << ".." << r1 << " " << what;
                                    }
                            }
                        }
                    }
                }
        // FP8 at batch 1 has an AVX-512 kernel too (e4m3 widened 16 codes at a time, the four fma
        // chains of the contract): any cols (tails of 1-3 columns: 5, 259, 517), pairs of whole
        // panels and a single (80 rows), partial panels and row ranges.
        for (const char* fmt : kFp8Formats)
            for (int64_t cols : {5, 128, 259, 517})
                for (int64_t rows : {17, 80}) {
                    const QMat m = make_qmat(fmt, rows, cols, seed++);
                    const auto xb =
                        random_floats(static_cast<size_t>(cols + 1), seed++, -2.0f, 2.0f);
                    const float* x = xb.data() + 1;
                    const auto ref = run_isa(Isa::Scalar, m.w, x, 1);
                    const std::string what = std::string(fmt) + " rows=" + std::to_string(rows) +
                                             " cols=" + std::to_string(cols);
                    expect_bits(run_vnni_emulated(m.w, x, 1, 0, rows, false), ref, what);
                    for (const auto& [r0, r1] :
                         {std::pair<int64_t, int64_t>{3, 9}, {16, rows}, {20, rows}}) {
                        const auto y = run_vnni_emulated(m.w, x, 1, r0, r1, false, 123.0f);
                        for (int64_t r = 0; r < rows; ++r)
                            ASSERT_EQ(std::bit_cast<uint32_t>(y[static_cast<size_t>(r)]),
                                      std::bit_cast<uint32_t>(
                                          r >= r0 && r < r1 ? ref[static_cast<size_t>(r)] : 123.0f))
                                << "row range " << r0 << ".." << r1 << " " << what;
                    }
                    if (HasFatalFailure()) return;
                }
    }
    // FP8 with several tokens (fp8_panel_multi): column tails and several 256-column blocks, token
    // counts that leave register-tile remainders (7 = 6 + 1) and span two scratch tiles (65 = 60 +
    // 5), partial panels and a row range that cuts one.
    for (const char* fmt : kFp8Formats)
        for (int64_t cols : {5, 259})
            for (int64_t n : {2, 7, 65}) {
                const QMat m = make_qmat(fmt, 17, cols, seed++);
                const auto xb =
                    random_floats(static_cast<size_t>(n * cols + 1), seed++, -2.0f, 2.0f);
                const float* x = xb.data() + 1;
                const auto ref = run_isa(Isa::Scalar, m.w, x, n);
                const std::string what =
                    std::string(fmt) + " cols=" + std::to_string(cols) + " n=" + std::to_string(n);
                expect_bits(run_vnni_emulated(m.w, x, n, 0, 17, false), ref, what);
                const auto y = run_vnni_emulated(m.w, x, n, 3, 9, false, 123.0f);
                for (int64_t t = 0; t < n; ++t)
                    for (int64_t r = 0; r < 17; ++r) {
                        const size_t i = static_cast<size_t>(t * 17 + r);
                        ASSERT_EQ(std::bit_cast<uint32_t>(y[i]),
                                  std::bit_cast<uint32_t>(r >= 3 && r < 9 ? ref[i] : 123.0f))
                            << "row range 3..9 t=" << t << " " << what;
                    }
                if (HasFatalFailure()) return;
            }
}

// Multi-row steps (speculative verification, small-batch decode) run the W4A8 / W8A8 kernels
// with every token count 1..17, which the AVX-512 kernels split into passes over each panel
// (W8A8: up to 8 tokens a pass, 17 = 6 + 6 + 5; W4A8: 5-7 in one pass, else 4s and the rest). Every
// count, on every ISA (AVX-512 natively where the CPU has it, and under SIMDe always), equals the
// scalar kernel bit for bit, and each token equals that token run alone (batch invariance): a
// change of the float epilogue's order, or of which token's activations a pass reads, changes
// result bits. 48 rows: three panels, the last a whole one; 40: the last panel cut; 384 columns:
// g128 groups of three blocks.
TEST(QuantMatmul, MultiRowEveryTokenCountBitExactOnEveryIsa) {
    uint32_t seed = 211;
    for (const char* fmt :
         {"int4-asym", "int4", "int4-g128-asym-bf16s", "int8-g32", "int8", "int8-g32-bf16s"})
        for (int64_t rows : {40, 48}) {
            const int64_t cols = 384;
            const QMat m = make_qmat(fmt, rows, cols, seed++);
            auto xb = random_floats(static_cast<size_t>(17 * cols + 1), seed++, -2.0f, 2.0f);
            const float* x = xb.data() + 1;
            // Each token alone, on the scalar kernel: the reference for every token count.
            std::vector<float> alone;
            for (int64_t t = 0; t < 17; ++t) {
                const auto y = run_isa(Isa::Scalar, m.w, x + t * cols, 1);
                alone.insert(alone.end(), y.begin(), y.end());
            }
            for (int64_t n = 1; n <= 17; ++n) {
                const std::string what =
                    std::string(fmt) + " rows=" + std::to_string(rows) + " n=" + std::to_string(n);
                const std::vector<float> ref(alone.begin(), alone.begin() + n * rows);
                expect_bits(run_isa(Isa::Scalar, m.w, x, n), ref, "scalar batch vs alone " + what);
                if (isa_supported(Isa::AVX2))
                    expect_bits(run_isa(Isa::AVX2, m.w, x, n), ref, "avx2 vs scalar " + what);
                if (isa_supported(Isa::AVX512))
                    expect_bits(run_isa(Isa::AVX512, m.w, x, n), ref, "avx512 vs scalar " + what);
                expect_bits(run_vnni_emulated(m.w, x, n, 0, rows, false), ref,
                            "emulated avx512 vs scalar " + what);
                if (HasFatalFailure()) return;
            }
        }
}

// The AVX2 W4A8 kernel starts each block's int16 pair sums at the activations' zero-point
// correction (xz) instead of subtracting 8 * xs after widening. Blocks built so that one int16
// half of every row meets its largest products (q = 15 against +127) while the other half's
// activations are all -127: the sums the kernel forms reach the int16 limits only if the two
// correction halves were exchanged or mis-signed. The expected value is exact in f32:
// per block 16 * (15 - 8) * 127 + 16 * (0 - 8) * (-127) = 30480, with d = xd = 1.
TEST(QuantMatmul, W4A8ExtremeBlocksMatchExactValue) {
    const int64_t rows = 16, cols = 128, n = 9;
    WeightMatrix w = kernels::weight_layout(tensor::parse_weight_format("int4"), rows, cols);
    std::vector<uint8_t> buf(static_cast<size_t>(quant_packed_bytes(w)), 0);
    QuantRow row;
    row.q.resize(static_cast<size_t>(cols));
    for (int64_t k = 0; k < cols; ++k) row.q[static_cast<size_t>(k)] = k % 4 < 2 ? 15 : 0;
    row.d.assign(static_cast<size_t>(cols / w.group), 0x3c00);  // f16 1.0
    for (int64_t r = 0; r < rows; ++r) pack_quant_row(w, r, row, buf.data());
    w.data = buf.data();
    std::vector<float> x(static_cast<size_t>(n * cols));
    for (int64_t i = 0; i < n * cols; ++i) x[static_cast<size_t>(i)] = i % 4 < 2 ? 127.0f : -127.0f;
    const float want = 30480.0f * static_cast<float>(cols / 32);
    for (Isa isa : {Isa::Scalar, Isa::AVX2, Isa::AVX512}) {
        if (!isa_supported(isa)) continue;
        // 5 tokens: passes of 4 + 1 over the nibbles; 9: the first pass also unpacks, the passes
        // of 4 + 1 after it read the unpacked codes.
        for (int64_t nt : {int64_t{5}, n}) {
            const auto y = run_isa(isa, w, x.data(), nt);
            for (size_t i = 0; i < y.size(); ++i)
                ASSERT_EQ(y[i], want) << isa_name(isa) << " n=" << nt << " output " << i;
        }
    }
    for (int64_t nt : {int64_t{5}, n}) {
        const auto y = run_vnni_emulated(w, x.data(), nt, 0, rows, nt >= 8);
        for (size_t i = 0; i < y.size(); ++i)
            ASSERT_EQ(y[i], want) << "vnni emulated n=" << nt << " output " << i;
    }
}

// int8 codes span -128..127: warden's quantizer writes -127..127, but a Q8_0 or compressed-tensors
// file may hold -128, and it is imported as it is. The AVX2 kernel multiplies |q| (128 as an
// unsigned byte) by the activation with q's sign, so its int16 pair sums are largest for q = -128
// against xq = -127: 2 * 128 * 127 = 32512, which must not saturate. Every row meets that
// extreme (rows alternate all -128 and a mix with +127), with d = xd = 1, so each output is an
// exact integer in f32 and every ISA must give it. A saturating or sign-swapped kernel, or one
// that reads -128 as +128, gives another number.
TEST(QuantMatmul, W8A8MinusOneTwentyEightCodesMatchExactValue) {
    const int64_t rows = 20, cols = 128;
    for (const char* fmt : {"int8", "int8-g32"}) {
        WeightMatrix w = kernels::weight_layout(tensor::parse_weight_format(fmt), rows, cols);
        std::vector<uint8_t> buf(static_cast<size_t>(quant_packed_bytes(w)), 0);
        std::vector<std::vector<int>> codes(static_cast<size_t>(rows));
        for (int64_t r = 0; r < rows; ++r) {
            QuantRow row;
            row.q.resize(static_cast<size_t>(cols));
            row.d.assign(w.group == 0 ? 1 : static_cast<size_t>(cols / 32), 0x3c00);  // f16 1.0
            for (int64_t k = 0; k < cols; ++k) {
                const int q = r % 2 == 0
                                  ? -128
                                  : (k % 3 == 0 ? 127 : (k % 3 == 1 ? -128 : static_cast<int>(r)));
                codes[static_cast<size_t>(r)].push_back(q);
                row.q[static_cast<size_t>(k)] = static_cast<uint8_t>(static_cast<int8_t>(q));
            }
            pack_quant_row(w, r, row, buf.data());
        }
        w.data = buf.data();
        for (int64_t n : {int64_t{1}, int64_t{3}}) {
            // Token t: all -127 (t = 0), alternating pairs of +-127, all +127; block maxima are
            // 127, so xd = 1 and xq = x exactly.
            std::vector<float> x(static_cast<size_t>(n * cols));
            for (int64_t t = 0; t < n; ++t)
                for (int64_t k = 0; k < cols; ++k)
                    x[static_cast<size_t>(t * cols + k)] =
                        t == 0 ? -127.0f : (t == 1 ? (k % 4 < 2 ? 127.0f : -127.0f) : 127.0f);
            std::vector<float> want(static_cast<size_t>(n * rows));
            for (int64_t t = 0; t < n; ++t)
                for (int64_t r = 0; r < rows; ++r) {
                    int64_t s = 0;
                    for (int64_t k = 0; k < cols; ++k)
                        s += codes[static_cast<size_t>(r)][static_cast<size_t>(k)] *
                             static_cast<int64_t>(x[static_cast<size_t>(t * cols + k)]);
                    want[static_cast<size_t>(t * rows + r)] =
                        static_cast<float>(s);  // |s| < 2^24: exact
                }
            const std::string what = std::string(fmt) + " n=" + std::to_string(n);
            for (Isa isa : {Isa::Scalar, Isa::AVX2, Isa::AVX512}) {
                if (!isa_supported(isa)) continue;
                expect_bits(run_isa(isa, w, x.data(), n), want,
                            std::string(isa_name(isa)) + " " + what);
            }
            expect_bits(run_vnni_emulated(w, x.data(), n, 0, rows, false), want,
                        "vnni emulated " + what);
        }
    }
}

// W4A16 is exactly the f32 kernel run on the dequantized matrix (same chain, exact dequant).
TEST(QuantMatmul, W4A16EqualsF32KernelOnDequantizedWeights) {
    for (const char* fmt :
         {"int4-a16", "int4-asym-a16", "int4-g128-a16", "int4-g128-asym-bf16s-a16"}) {
        const int64_t rows = 33, cols = 256, n = 3;
        const QMat m = make_qmat(fmt, rows, cols, 99);
        std::vector<float> f32(static_cast<size_t>(packed_weight_elems(rows, cols)), 0.0f);
        std::vector<float> row(static_cast<size_t>(cols));
        for (int64_t r = 0; r < rows; ++r) {
            dequant_row(m.w, r, row.data());
            pack_weight_row(WeightType::F32, cols, r, row.data(), f32.data());
        }
        const WeightMatrix wf{WeightType::F32, rows, cols, f32.data()};
        const auto x = random_floats(static_cast<size_t>(n * cols), 5);
        for (Isa isa : {Isa::Scalar, Isa::AVX2}) {
            if (!isa_supported(isa)) continue;
            expect_bits(run_isa(isa, m.w, x.data(), n), run_isa(Isa::Scalar, wf, x.data(), n), fmt);
        }
    }
}

// W4A8 / W8A8 against an independent double-precision evaluation of the contract's math:
// sum over blocks of (dequantized weights) x (xq * xd), using the activation quantizer's
// output. The only differences are f32 roundings of the per-block products and the chain:
// bounded by (2 * blocks + 4) ulps of the magnitude sum.
TEST(QuantMatmul, IntActivationPathsMatchDoubleReference) {
    for (const char* fmt : {"int4", "int4-asym", "int4-g128", "int8", "int8-g32"}) {
        const int64_t rows = 20, cols = 256, n = 2, nb = cols / 32;
        const QMat m = make_qmat(fmt, rows, cols, 11);
        const auto x = random_floats(static_cast<size_t>(n * cols), 12, -3.0f, 3.0f);
        std::vector<int8_t> xq(static_cast<size_t>(n * cols));
        std::vector<float> xd(static_cast<size_t>(n * nb));
        std::vector<int32_t> xs(static_cast<size_t>(n * nb));
        quantize_acts(x.data(), n, cols, xq.data(), xd.data(), xs.data());
        const auto got = run_isa(Isa::Scalar, m.w, x.data(), n);
        std::vector<float> wr(static_cast<size_t>(cols));
        double max_rel_to_x = 0.0;
        for (int64_t t = 0; t < n; ++t)
            for (int64_t r = 0; r < rows; ++r) {
                dequant_row(m.w, r, wr.data());
                double s = 0.0, mag = 0.0, exact = 0.0;
                for (int64_t k = 0; k < cols; ++k) {
                    const double xa = static_cast<double>(xq[static_cast<size_t>(t * cols + k)]) *
                                      xd[static_cast<size_t>(t * nb + k / 32)];
                    s += wr[static_cast<size_t>(k)] * xa;
                    mag += std::fabs(wr[static_cast<size_t>(k)] * xa);
                    exact += static_cast<double>(wr[static_cast<size_t>(k)]) *
                             x[static_cast<size_t>(t * cols + k)];
                }
                const double tol = (2.0 * nb + 4.0) * std::ldexp(1.0, -23) * mag + 1e-30;
                ASSERT_LE(std::fabs(got[static_cast<size_t>(t * rows + r)] - s), tol)
                    << fmt << " t=" << t << " r=" << r;
                max_rel_to_x = std::max(max_rel_to_x, std::fabs(s - exact) / (mag + 1e-30));
            }
        // Activation quantization error is small relative to the magnitude (int8 per 32 block).
        EXPECT_LT(max_rel_to_x, 0.02) << fmt;
    }
}

// A chain whose products all underflow to -0 stays -0 (the contract's fma chain from +0), and so
// does the row's sum (per channel): the several-token kernels must leave the chains of a last
// partial quad's missing columns as they are rather than add a zero product (-0 + +0 is +0). Every
// code -2^-9, every x the smallest subnormal; 5 and 9 columns leave one column in the last quad.
TEST(QuantMatmul, Fp8MultiTokenKeepsNegativeZeroChains) {
    for (const char* fmt : kFp8Formats)
        for (int64_t cols : {5, 9}) {
            const int64_t rows = 16;
            WeightMatrix w = kernels::weight_layout(tensor::parse_weight_format(fmt), rows, cols);
            std::vector<uint8_t> buf(static_cast<size_t>(quant_packed_bytes(w)), 0);
            for (int64_t r = 0; r < rows; ++r) {
                QuantRow q;
                q.q.assign(static_cast<size_t>(cols), 0x81);
                q.scale = 1.0f;
                if (w.group) q.s.assign(static_cast<size_t>(kernels::fp8_blocks(w)), 1.0f);
                pack_quant_row(w, r, q, buf.data());
            }
            w.data = buf.data();
            const int64_t n = 3;
            const std::vector<float> x(static_cast<size_t>(n * cols), 1e-45f);
            const auto ref = run_isa(Isa::Scalar, w, x.data(), n);
            // -0 per channel; block-scaled sums are folded into a total from +0, which is +0.
            ASSERT_EQ(std::bit_cast<uint32_t>(ref[0]), w.group ? 0u : 0x80000000u) << fmt;
            for (Isa isa : {Isa::AVX2, Isa::AVX512}) {
                if (!isa_supported(isa)) continue;
                expect_bits(
                    run_isa(isa, w, x.data(), n), ref,
                    std::string(isa_name(isa)) + " " + fmt + " cols=" + std::to_string(cols));
            }
        }
}

// FP8 codes packed from row-major rows (the loader's path for FP8 checkpoints: 16x16 byte
// transposes for whole panels, a byte loop for column tails and partial panels) and scales per
// row give the same bytes as pack_quant_row, per channel and block-scaled, for row ranges that
// start and end mid-panel.
TEST(QuantMatmul, Fp8PanelPackingEqualsRowPacking) {
    uint32_t seed = 2024;
    for (const char* fmt : kFp8Formats)
        for (int64_t cols : {5, 16, 45, 259})
            for (const auto& [r0, r1] : {std::pair<int64_t, int64_t>{0, 40}, {3, 37}}) {
                const int64_t rows = 40;
                WeightMatrix w =
                    kernels::weight_layout(tensor::parse_weight_format(fmt), rows, cols);
                const auto x = random_floats(static_cast<size_t>(rows * cols), seed++, -3.0f, 3.0f);
                std::vector<uint8_t> want(static_cast<size_t>(quant_packed_bytes(w)), 0);
                std::vector<uint8_t> got = want, codes;
                std::vector<std::vector<float>> scales;
                for (int64_t r = r0; r < r1; ++r) {
                    const QuantRow q =
                        quant::default_quantizer().quantize_row(w, x.data() + r * cols, nullptr);
                    pack_quant_row(w, r, q, want.data());
                    codes.insert(codes.end(), q.q.begin(), q.q.end());
                    scales.push_back(w.group ? q.s : std::vector<float>{q.scale});
                }
                // Rows 0..40 at once (two whole panels, one partial); 3..37 in pieces that cut
                // panels.
                for (int64_t p0 = r0; p0 < r1;) {
                    const int64_t p1 = r0 == 0 ? r1 : std::min(r1, p0 + 13);
                    pack_fp8_codes(w, p0, p1, codes.data() + (p0 - r0) * cols, got.data());
                    p0 = p1;
                }
                for (int64_t r = r0; r < r1; ++r)
                    pack_fp8_scales(w, r, scales[static_cast<size_t>(r - r0)].data(), got.data());
                ASSERT_EQ(got, want) << fmt << " cols=" << cols << " rows " << r0 << ".." << r1;
            }
}

// int4 codes packed from row-major 4-bit source rows (the loader's path for GGUF Q4_0/Q4_1 and
// compressed-tensors int4: SSE2 transposes for whole panels, a per-row loop for partial ones) and
// scales per row give the same bytes as pack_quant_row, in both source nibble orders, for groups
// of 32 and 128, symmetric and asymmetric, with padded source chunks and row ranges that start
// and end mid-panel.
TEST(QuantMatmul, Q4PanelPackingEqualsRowPacking) {
    uint32_t seed = 77;
    for (const char* fmt : {"int4", "int4-asym", "int4-g128", "int4-g128-asym"})
        for (const bool split : {false, true})
            for (const auto& [r0, r1] : {std::pair<int64_t, int64_t>{0, 40}, {3, 37}}) {
                const int64_t rows = 40, cols = 256, chunks = cols / 32;
                const int64_t chunk_stride = split ? 18 : 16,
                              row_stride = chunks * chunk_stride + 3;
                WeightMatrix w =
                    kernels::weight_layout(tensor::parse_weight_format(fmt), rows, cols);
                std::vector<uint8_t> want(static_cast<size_t>(quant_packed_bytes(w)), 0);
                std::vector<uint8_t> got = want;
                std::vector<uint8_t> src(static_cast<size_t>((r1 - r0) * row_stride), 0xee);
                std::vector<QuantRow> qrows;
                for (int64_t r = r0; r < r1; ++r) {
                    QuantRow q;
                    const auto v = random_floats(static_cast<size_t>(cols), seed++, 0.0f, 16.0f);
                    for (float f : v) q.q.push_back(static_cast<uint8_t>(std::min(15.0f, f)));
                    for (int64_t g = 0; g < cols / w.group; ++g) {
                        q.d.push_back(static_cast<uint16_t>(seed * 31 + g));
                        if (w.asym) q.m.push_back(static_cast<uint16_t>(seed * 17 + g));
                    }
                    pack_quant_row(w, r, q, want.data());
                    // The row's codes as source chunks: byte i of a chunk holds codes (2i, 2i + 1)
                    // or, split, (i, i + 16), low nibble first.
                    for (int64_t c = 0; c < chunks; ++c)
                        for (int64_t i = 0; i < 16; ++i) {
                            const int64_t lo = split ? i : 2 * i, hi = split ? i + 16 : 2 * i + 1;
                            src[static_cast<size_t>((r - r0) * row_stride + c * chunk_stride + i)] =
                                static_cast<uint8_t>(q.q[static_cast<size_t>(32 * c + lo)] |
                                                     (q.q[static_cast<size_t>(32 * c + hi)] << 4));
                        }
                    qrows.push_back(std::move(q));
                }
                for (int64_t p0 = r0; p0 < r1;) {
                    const int64_t p1 = r0 == 0 ? r1 : std::min(r1, p0 + 13);
                    Q4CodeRows part;
                    part.data = src.data() + (p0 - r0) * row_stride;
                    part.row_stride = row_stride;
                    part.chunk_stride = chunk_stride;
                    part.split_halves = split;
                    pack_q4_codes(w, p0, p1, part, got.data());
                    p0 = p1;
                }
                for (int64_t r = r0; r < r1; ++r) {
                    const QuantRow& q = qrows[static_cast<size_t>(r - r0)];
                    pack_q4_scales(w, r, q.d.data(), w.asym ? q.m.data() : nullptr, got.data());
                }
                ASSERT_EQ(got, want)
                    << fmt << (split ? " split" : "") << " rows " << r0 << ".." << r1;
            }
}

// Every finite e4m3 code decodes in registers exactly as tensor::fp8_e4m3_to_f32 (one-hot x).
TEST(QuantMatmul, Fp8DecodeEveryCode) {
    const int64_t rows = 16, cols = 16;  // 256 codes
    WeightMatrix w = kernels::weight_layout(tensor::parse_weight_format("fp8"), rows, cols);
    std::vector<uint8_t> buf(static_cast<size_t>(quant_packed_bytes(w)), 0);
    for (int64_t r = 0; r < rows; ++r) {
        QuantRow qr;
        qr.scale = 1.0f;
        for (int64_t k = 0; k < cols; ++k) {
            uint8_t c = static_cast<uint8_t>(r * 16 + k);
            if ((c & 0x7f) == 0x7f) c = 0x7e;  // NaN codes are never stored (quantizer saturates)
            qr.q.push_back(c);
        }
        pack_quant_row(w, r, qr, buf.data());
    }
    w.data = buf.data();
    for (int64_t k = 0; k < cols; ++k) {
        std::vector<float> x(static_cast<size_t>(cols), 0.0f);
        x[static_cast<size_t>(k)] = 1.0f;
        for (Isa isa : {Isa::Scalar, Isa::AVX2}) {
            if (!isa_supported(isa)) continue;
            const auto y = run_isa(isa, w, x.data(), 1);
            for (int64_t r = 0; r < rows; ++r) {
                uint8_t c = static_cast<uint8_t>(r * 16 + k);
                if ((c & 0x7f) == 0x7f) c = 0x7e;
                ASSERT_EQ(y[static_cast<size_t>(r)], tensor::fp8_e4m3_to_f32(c))
                    << "code " << int(c);
            }
        }
    }
}

// FP8 at one token: where every |x| < 2^8 the kernels widen codes without their * 2^120 and
// multiply by x * 2^120 (QuantArgs::x_e4m3), otherwise they widen as before; both are the
// contract's products exactly. Every non-NaN code (subnormal codes included) against activations
// with subnormal and signed-zero elements, the largest float below 2^8 (the scaled path), and
// 256 and 1e30 (the widening path), column tails, AVX2 and AVX-512 natively (every decode tuning)
// and on SIMDe with and without the scaled activations: all equal the scalar kernel bit for bit.
TEST(QuantMatmul, Fp8OneTokenScaledActivationsBitExact) {
    uint32_t seed = 404;
    constexpr float kPow120 = 1.329227995784916e36f;
    for (int64_t cols : {5, 128, 259}) {
        const int64_t rows = 40;
        QMat m = make_qmat("fp8", rows, cols, seed++);
        const int64_t pb = 64 + cols * 16;
        for (int64_t p = 0; p * 16 < rows; ++p)
            for (int64_t i = 0; i < cols * 16; ++i) {
                auto c = static_cast<uint8_t>((p * 7919 + i * 37 + 11) & 0xff);
                if ((c & 0x7f) == 0x7f) c = 0x7e;  // NaN codes are never stored
                m.buf[static_cast<size_t>(1 + p * pb + 64 + i)] = c;
            }
        for (const float special : {0.0f, 255.99998f, 256.0f, 1e30f}) {
            auto xb = random_floats(static_cast<size_t>(cols + 1), seed++, -2.0f, 2.0f);
            float* x = xb.data() + 1;
            x[0] = special == 0.0f ? x[0] : special;
            if (cols > 4) {
                x[1] = 1e-40f;  // subnormal
                x[2] = -3e-39f;
                x[3] = -0.0f;
                x[4] = 0.0f;
            }
            const bool scaled = std::fabs(special) < 256.0f;
            const std::string what =
                "fp8 cols=" + std::to_string(cols) + " x0=" + std::to_string(x[0]);
            const auto ref = run_isa(Isa::Scalar, m.w, x, 1);
            if (isa_supported(Isa::AVX2))
                expect_bits(run_isa(Isa::AVX2, m.w, x, 1), ref, "avx2 " + what);
            if (isa_supported(Isa::AVX512))
                for (const DecodeTuning& tune : testing::decode_tunings_to_test()) {
                    testing::DecodeTuningGuard tg(tune);
                    expect_bits(run_isa(Isa::AVX512, m.w, x, 1), ref,
                                "avx512 (" + decode_tuning_summary() + ") " + what);
                }
            std::vector<float> xs(static_cast<size_t>(cols));
            for (int64_t k = 0; k < cols; ++k) xs[static_cast<size_t>(k)] = x[k] * kPow120;
            expect_bits(run_vnni_emulated(m.w, x, 1, 0, rows, false), ref,
                        "emulated, widened " + what);
            if (scaled)
                expect_bits(run_vnni_emulated(m.w, x, 1, 0, rows, false, -1.0f, xs.data()), ref,
                            "emulated, scaled activations " + what);
            if (HasFatalFailure()) return;
        }
    }
}

TEST(QuantMatmul, PackUnpackRoundTrip) {
    for (const char* fmt : kFormats) {
        const int64_t rows = 19, cols = 256;
        const WeightMatrix lay =
            kernels::weight_layout(tensor::parse_weight_format(fmt), rows, cols);
        std::vector<uint8_t> buf(static_cast<size_t>(quant_packed_bytes(lay)), 0);
        const auto vals = random_floats(static_cast<size_t>(rows * cols), 3);
        std::vector<QuantRow> rowsq;
        for (int64_t r = 0; r < rows; ++r) {
            rowsq.push_back(
                quant::default_quantizer().quantize_row(lay, vals.data() + r * cols, nullptr));
            pack_quant_row(lay, r, rowsq.back(), buf.data());
        }
        WeightMatrix w = lay;
        w.data = buf.data();
        for (int64_t r = 0; r < rows; ++r) {
            const QuantRow back = unpack_quant_row(w, r);
            const QuantRow& want = rowsq[static_cast<size_t>(r)];
            ASSERT_EQ(back.q, want.q) << fmt;
            ASSERT_EQ(back.d, want.d) << fmt;
            ASSERT_EQ(back.m, want.m) << fmt;
            ASSERT_EQ(back.scale, want.scale) << fmt;
        }
    }
}

}  // namespace
}  // namespace warden::kernels
