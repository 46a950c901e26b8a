// Every SIMD variant of ops.h against the scalar reference, on awkward lengths (empty, below
// one vector, one past a vector, odd multiples, large) so bodies and tails are all exercised.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <random>

#include "kernels/kernels_internal.h"
#include "kernels/ops.h"
#include "kernels_test_util.h"

namespace warden::kernels {
namespace {

using testing::random_bf16;
using testing::random_floats;

constexpr int64_t kSizes[] = {0, 1, 3, 7, 8, 9, 15, 16, 17, 31, 33, 64, 100, 257, 1000, 4099};
constexpr float kEps = 5.96e-8f;  // 2^-24, f32 unit roundoff

}  // namespace
namespace detail {
// tests/kernels/test_ops_avx512_emulated.cpp: ops_avx512.cpp compiled against SIMDe.
const OpsTable& ops_avx512_emulated();
}  // namespace detail
namespace {

// A kernel table under test and the ISA the CPU needs to run it (Scalar: any CPU).
struct OpsVariant {
    const char* name;
    Isa needs;
    const detail::OpsTable& (*table)();
};

const detail::OpsTable& scalar_ops() {
    return detail::ops_scalar();
}

std::string variant_name(const ::testing::TestParamInfo<OpsVariant>& p) {
    return p.param.name;
}

class KernelsOps : public ::testing::TestWithParam<OpsVariant> {
  protected:
    void SetUp() override { WARDEN_REQUIRE_ISA(GetParam().needs); }
};

// Dot products: the SIMD versions sum in f32 over several lanes/chains, the reference in
// double. A sequential f32 sum of m terms is off by at most ~m*u*sum|a_i b_i| (Higham); the
// longest chain here is < n, so n*u*sum|ab| (+ a denormal floor) is a rigorous bound that
// still catches a lost or doubled term (error ~ |a_i b_i| ~ sum/n).
TEST_P(KernelsOps, DotMatchesScalar) {
    const detail::OpsTable& ops = GetParam().table();
    for (int64_t n : kSizes) {
        auto a = random_floats(n + 1, 1 + n), b = random_floats(n + 1, 2 + n);
        auto bh = random_bf16(n + 1, 3 + n);
        double mag = 0.0, magh = 0.0;
        for (int64_t i = 0; i < n; ++i) {
            mag += std::fabs(a[i + 1] * b[i + 1]);
            magh += std::fabs(a[i + 1] * tensor::bf16_to_f32(bh[i + 1]));
        }
        // +1 offsets: unaligned pointers on purpose.
        const float ref = scalar_ops().dot_f32(a.data() + 1, b.data() + 1, n);
        const float got = ops.dot_f32(a.data() + 1, b.data() + 1, n);
        EXPECT_NEAR(got, ref, (n + 1) * kEps * mag + 1e-30) << "n=" << n;
        const float refh = scalar_ops().dot_bf16(a.data() + 1, bh.data() + 1, n);
        const float goth = ops.dot_bf16(a.data() + 1, bh.data() + 1, n);
        EXPECT_NEAR(goth, refh, (n + 1) * kEps * magh + 1e-30) << "n=" << n;
    }
}

// axpy: the reference rounds a*x then y+a*x (two roundings), SIMD uses one fused FMA, so
// they may differ by ~1 ulp of |y| + |a*x|.
TEST_P(KernelsOps, AxpyMatchesScalar) {
    const detail::OpsTable& ops = GetParam().table();
    const float a = 0.7351f;
    for (int64_t n : kSizes) {
        auto x = random_floats(n + 1, 10 + n), y0 = random_floats(n + 1, 11 + n);
        auto xh = random_bf16(n + 1, 12 + n);
        for (int bf = 0; bf < 2; ++bf) {
            auto yr = y0, yg = y0;
            if (bf) {
                scalar_ops().axpy_bf16(a, xh.data() + 1, yr.data() + 1, n);
                ops.axpy_bf16(a, xh.data() + 1, yg.data() + 1, n);
            } else {
                scalar_ops().axpy_f32(a, x.data() + 1, yr.data() + 1, n);
                ops.axpy_f32(a, x.data() + 1, yg.data() + 1, n);
            }
            for (int64_t i = 0; i <= n; ++i) {
                const float xi = bf ? tensor::bf16_to_f32(xh[i]) : x[i];
                EXPECT_NEAR(yg[i], yr[i], 2 * kEps * (std::fabs(y0[i]) + std::fabs(a * xi)))
                    << "n=" << n << " i=" << i << " bf16=" << bf;
            }
        }
    }
}

// rmsnorm: the scale 1/sqrt(mean+eps) comes from an f32 sum of squares (rel. error <= n*u,
// all terms positive) vs double in the reference; each output is then 2-3 roundings more.
TEST_P(KernelsOps, RmsnormMatchesScalar) {
    const detail::OpsTable& ops = GetParam().table();
    for (int64_t n : kSizes) {
        if (n == 0) continue;
        auto x = random_floats(n, 20 + n, -3.0f, 3.0f), w = random_floats(n, 21 + n, 0.5f, 1.5f);
        std::vector<float> yr(n), yg(n);
        for (int gain = 0; gain < 2; ++gain) {
            const float* wp = gain ? w.data() : nullptr;
            scalar_ops().rmsnorm(x.data(), wp, yr.data(), n, 1e-6f);
            ops.rmsnorm(x.data(), wp, yg.data(), n, 1e-6f);
            for (int64_t i = 0; i < n; ++i)
                EXPECT_NEAR(yg[i], yr[i], (n / 2.0 + 4) * kEps * std::fabs(yr[i]) + 1e-30)
                    << "n=" << n << " i=" << i;
        }
        // In place (x and y alias).
        auto xi = x;
        ops.rmsnorm(xi.data(), w.data(), xi.data(), n, 1e-6f);
        scalar_ops().rmsnorm(x.data(), w.data(), yr.data(), n, 1e-6f);
        for (int64_t i = 0; i < n; ++i)
            EXPECT_NEAR(xi[i], yr[i], (n / 2.0 + 4) * kEps * std::fabs(yr[i]) + 1e-30);
    }
}

// silu: vector exp is within ~2 ulp of std::exp; g/(1+e) and *up add ~3 roundings, and
// 1+e has no cancellation (e > 0), so a relative bound of 16 ulp is generous but tight
// enough to catch a wrong polynomial (which is off by >1e-4). Extreme inputs (|g| > 87)
// are flushed/saturated differently and only need to agree in absolute terms.
TEST_P(KernelsOps, SiluMulMatchesScalar) {
    const detail::OpsTable& ops = GetParam().table();
    for (int64_t n : kSizes) {
        auto g = random_floats(n, 30 + n, -20.0f, 20.0f), u = random_floats(n, 31 + n, -2.0f, 2.0f);
        if (n > 4) {
            g[0] = -100.0f;
            g[1] = 100.0f;
            g[2] = 0.0f;
            g[3] = -87.5f;
        }
        std::vector<float> r(n), o(n);
        scalar_ops().silu_mul(g.data(), u.data(), r.data(), n);
        ops.silu_mul(g.data(), u.data(), o.data(), n);
        for (int64_t i = 0; i < n; ++i)
            EXPECT_NEAR(o[i], r[i], 16 * kEps * std::fabs(r[i]) + 1e-30) << "n=" << n << " i=" << i;
        auto in_place = g;
        ops.silu_mul(in_place.data(), u.data(), in_place.data(), n);
        for (int64_t i = 0; i < n; ++i) EXPECT_EQ(in_place[i], o[i]);
    }
}

// softmax: each p_i = exp(x_i - m) / sum. exp is ~2 ulp, the f32 sum of positive terms is
// within n*u relative, so p_i is within (n + 8)*u relative; entries whose true value is
// below ~1e-38 may be flushed to 0 (absolute floor).
TEST_P(KernelsOps, SoftmaxMatchesScalar) {
    const detail::OpsTable& ops = GetParam().table();
    for (int64_t n : kSizes) {
        if (n == 0) continue;
        auto x = random_floats(n, 40 + n, -30.0f, 30.0f);
        if (n > 3) x[1] = -1000.0f;  // underflows to 0
        auto r = x, o = x;
        scalar_ops().softmax(r.data(), n);
        ops.softmax(o.data(), n);
        double sum = 0.0;
        for (int64_t i = 0; i < n; ++i) {
            EXPECT_NEAR(o[i], r[i], (n + 16) * kEps * r[i] + 1e-37) << "n=" << n << " i=" << i;
            sum += o[i];
        }
        EXPECT_NEAR(sum, 1.0, 1e-5);
    }
}

// softmax_stats (the chunk softmax of split-context attention) is softmax, bit for bit, plus the
// max it shifted by and the sum of exp(x - max) it divided by: checked against the input (the max
// exactly) and a double-precision sum of exp.
TEST_P(KernelsOps, SoftmaxStatsIsSoftmaxWithItsMaxAndSum) {
    const detail::OpsTable& ops = GetParam().table();
    for (int64_t n : kSizes) {
        if (n == 0) continue;
        auto x = random_floats(n, 70 + n, -20.0f, 20.0f);
        auto a = x, b = x;
        ops.softmax(a.data(), n);
        float mx = NAN, sum = NAN;
        ops.softmax_stats(b.data(), n, &mx, &sum);
        for (int64_t i = 0; i < n; ++i)
            ASSERT_EQ(std::bit_cast<uint32_t>(a[i]), std::bit_cast<uint32_t>(b[i])) << n;
        float want_mx = x[0];
        for (float v : x) want_mx = std::max(want_mx, v);
        EXPECT_EQ(mx, want_mx) << "n=" << n;
        double want_sum = 0.0;
        for (float v : x) want_sum += std::exp(static_cast<double>(v) - want_mx);
        EXPECT_NEAR(sum, want_sum, (n + 16) * kEps * want_sum) << "n=" << n;
    }
}

TEST_P(KernelsOps, Bf16RowConversionBitExact) {
    const detail::OpsTable& ops = GetParam().table();
    // Specials: +-0, +-Inf, quiet/signalling NaNs with payloads (including ones whose upper
    // bits alone would look like Inf), the largest finite (rounds to Inf), denormals, and
    // exact ties on both even and odd mantissas (RNE must pick the even neighbour).
    std::vector<uint32_t> bits = {
        0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0xffc00000, 0x7f800001,
        0x7f80ffff, 0xff800001, 0x7fbfffff, 0x7f7fffff, 0xff7fffff, 0x7f7f8000, 0x00000001,
        0x807fffff, 0x00008000, 0x00018000, 0x00007fff, 0x0000ffff, 0x3f808000, 0x3f818000,
        0x3f80c000, 0x3f817fff, 0xbf808000, 0xbf818000, 0x3f800000, 0x4effffff, 0x00800000};
    std::mt19937 rng(7);
    while (bits.size() < 4099) bits.push_back(static_cast<uint32_t>(rng()));
    std::vector<float> x(bits.size());
    for (size_t i = 0; i < bits.size(); ++i) x[i] = std::bit_cast<float>(bits[i]);
    for (int64_t n : kSizes) {
        for (int64_t off = 0; off < 2; ++off) {  // also starting at an odd element (unaligned)
            if (n + off > static_cast<int64_t>(x.size())) continue;
            std::vector<uint16_t> got(n + 1, 0xdead);
            ops.f32_to_bf16_row(x.data() + off, got.data(), n);
            for (int64_t i = 0; i < n; ++i)
                ASSERT_EQ(got[i], tensor::f32_to_bf16(x[off + i]))
                    << std::hex << "bits=0x" << bits[off + i] << " n=" << std::dec << n;
            EXPECT_EQ(got[n], 0xdead) << "wrote past the end";
        }
    }
    // bf16 -> f32 is exact for every one of the 65536 patterns (compare bits: NaN != NaN).
    std::vector<uint16_t> all(65536);
    for (uint32_t i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
    std::vector<float> f(65536);
    ops.bf16_to_f32_row(all.data(), f.data(), 65536);
    for (uint32_t i = 0; i < 65536; ++i) ASSERT_EQ(std::bit_cast<uint32_t>(f[i]), i << 16) << i;
}

// argmax: the same index as the scalar loop on every row, including the rows where the SIMD
// bookkeeping could go wrong: equal maxima across lanes, accumulators and the tail (the first
// must win), +0 against -0, NaNs anywhere (never win; a NaN first element gives 0), rows of -inf,
// +inf. On NaN-free rows also std::max_element's answer (its first largest), an independent
// reference.
TEST_P(KernelsOps, ArgmaxMatchesScalar) {
    const detail::OpsTable& ops = GetParam().table();
    const float nan = std::numeric_limits<float>::quiet_NaN(),
                inf = std::numeric_limits<float>::infinity();
    std::mt19937 rng(11);
    int checked = 0;
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{2}, int64_t{7}, int64_t{8}, int64_t{15},
                      int64_t{16}, int64_t{17}, int64_t{31}, int64_t{32}, int64_t{33}, int64_t{47},
                      int64_t{64}, int64_t{100}, int64_t{257}, int64_t{1000}, int64_t{32000}}) {
        for (int variant = 0; variant < 12; ++variant) {
            std::vector<float> x = random_floats(n + 1, 100 + n * 13 + variant);
            float* row = x.data() + 1;  // unaligned on purpose
            std::uniform_int_distribution<int64_t> pos(0, n > 0 ? n - 1 : 0);
            if (n > 0) {
                switch (variant) {
                    case 1:  // one maximum, anywhere (also in the tail)
                        row[pos(rng)] = 50.0f;
                        break;
                    case 2:  // several equal maxima: the first must win
                        for (int k = 0; k < 4; ++k) row[pos(rng)] = 50.0f;
                        break;
                    case 3:  // +0 and -0 as the maxima, in either order
                        for (int64_t i = 0; i < n; ++i) row[i] = -std::fabs(row[i]) - 1.0f;
                        for (int k = 0; k < 3; ++k) row[pos(rng)] = (k % 2) ? 0.0f : -0.0f;
                        break;
                    case 4:  // NaNs sprinkled, one of them where the maximum was
                        for (int k = 0; k < 5; ++k) row[pos(rng)] = nan;
                        row[std::max_element(row, row + n) - row] = nan;
                        break;
                    case 5:  // a NaN first element: 0 whatever follows
                        row[0] = nan;
                        break;
                    case 6:  // all NaN
                        std::fill(row, row + n, nan);
                        break;
                    case 7:  // all -inf, and -inf with NaNs after the first
                        std::fill(row, row + n, -inf);
                        if (n > 2) row[n - 1] = nan;
                        break;
                    case 8:  // +inf twice
                        row[pos(rng)] = inf;
                        row[pos(rng)] = inf;
                        break;
                    case 9:  // the maximum at the last element, an equal one earlier in the tail
                        row[n - 1] = 60.0f;
                        if (n > 3) row[n - 3] = 60.0f;
                        break;
                    case 10:  // the maximum first
                        row[0] = 70.0f;
                        break;
                    case 11:  // -inf everywhere but one NaN-free small value late
                        std::fill(row, row + n, -inf);
                        row[n - 1] = -1e30f;
                        break;
                    default:
                        break;
                }
            }
            const int64_t want = scalar_ops().argmax(row, n);
            ASSERT_EQ(ops.argmax(row, n), want) << "n=" << n << " variant " << variant;
            const bool has_nan = std::any_of(row, row + n, [](float v) { return v != v; });
            if (n > 0 && !has_nan) {
                ASSERT_EQ(want, std::max_element(row, row + n) - row)
                    << "n=" << n << " variant " << variant;
                ++checked;
            }
            if (n > 0 && row[0] != row[0]) {
                ASSERT_EQ(want, 0) << "n=" << n;
            }
        }
    }
    EXPECT_GT(checked, 100);  // the independent reference was used
}

// avx512_emulated runs on every CPU: the AVX-512 source on SIMDe (kernels/avx512_compat.h).
INSTANTIATE_TEST_SUITE_P(KernelsSimd, KernelsOps,
                         ::testing::Values(OpsVariant{"avx2", Isa::AVX2, detail::ops_avx2},
                                           OpsVariant{"avx512", Isa::AVX512, detail::ops_avx512},
                                           OpsVariant{"avx512_emulated", Isa::Scalar,
                                                      detail::ops_avx512_emulated}),
                         variant_name);

TEST(KernelsOpsDispatch, PublicEntryPointsFollowActiveIsa) {
    // The dispatching entry points must give the scalar answer when scalar is active.
    testing::ActiveIsaGuard guard(Isa::Scalar);
    auto a = random_floats(33, 50), b = random_floats(33, 51);
    EXPECT_EQ(dot_f32(a.data(), b.data(), 33), scalar_ops().dot_f32(a.data(), b.data(), 33));
    std::vector<uint16_t> h(33), hr(33);
    f32_to_bf16_row(a.data(), h.data(), 33);
    for (int i = 0; i < 33; ++i) EXPECT_EQ(h[i], tensor::f32_to_bf16(a[i]));
    std::vector<float> back(33);
    bf16_to_f32_row(h.data(), back.data(), 33);
    for (int i = 0; i < 33; ++i) EXPECT_EQ(back[i], tensor::bf16_to_f32(h[i]));
}

}  // namespace
}  // namespace warden::kernels
