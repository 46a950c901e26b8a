// attention against a naive double-precision reference: causal mask, GQA head grouping,
// queries appended to an existing cache (pos0 > 0), f32 and bf16 K/V, every ISA.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/attention.h"
#include "kernels_test_util.h"

namespace warden::kernels {
namespace {

using testing::random_bf16;
using testing::random_floats;

struct Case {
    int64_t n_q, n_heads, n_kv_heads, head_dim, pos0;
};

// out[t, h, :] = sum_j softmax_j(scale * q.k_j) v_j over j <= pos0 + t, kv head h / group.
std::vector<double> reference(const std::vector<float>& q, const Case& c,
                              const std::vector<float>& k, const std::vector<float>& v,
                              float scale) {
    const int64_t group = c.n_heads / c.n_kv_heads, d = c.head_dim;
    std::vector<double> out(c.n_q * c.n_heads * d, 0.0);
    for (int64_t t = 0; t < c.n_q; ++t)
        for (int64_t h = 0; h < c.n_heads; ++h) {
            const int64_t g = h / group, n_ctx = c.pos0 + t + 1;
            const float* qh = &q[(t * c.n_heads + h) * d];
            std::vector<double> s(n_ctx);
            double mx = -INFINITY;
            for (int64_t j = 0; j < n_ctx; ++j) {
                const float* kj = &k[(j * c.n_kv_heads + g) * d];
                double acc = 0.0;
                for (int64_t i = 0; i < d; ++i) acc += static_cast<double>(qh[i]) * kj[i];
                s[j] = acc * scale;
                mx = std::max(mx, s[j]);
            }
            double sum = 0.0;
            for (auto& e : s) sum += (e = std::exp(e - mx));
            double* o = &out[(t * c.n_heads + h) * d];
            for (int64_t j = 0; j < n_ctx; ++j)
                for (int64_t i = 0; i < d; ++i)
                    o[i] += s[j] / sum * v[(j * c.n_kv_heads + g) * d + i];
        }
    return out;
}

void run_case(const Case& c, KvType type, util::ThreadPool& pool, uint32_t seed) {
    const int64_t n_ctx = c.pos0 + c.n_q, kv_elems = n_ctx * c.n_kv_heads * c.head_dim;
    // Scale the queries so the scores spread over a few units (peaky but not one-hot).
    auto q = random_floats(c.n_q * c.n_heads * c.head_dim, seed, -2.0f, 2.0f);
    auto kf = random_floats(kv_elems, seed + 1), vf = random_floats(kv_elems, seed + 2);
    auto kh = random_bf16(kv_elems, seed + 3), vh = random_bf16(kv_elems, seed + 4);
    if (type == KvType::BF16)  // reference sees exactly the values the kernel sees
        for (int64_t i = 0; i < kv_elems; ++i) {
            kf[i] = tensor::bf16_to_f32(kh[i]);
            vf[i] = tensor::bf16_to_f32(vh[i]);
        }
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    KvView kv{type, type == KvType::F32 ? static_cast<const void*>(kf.data()) : kh.data(),
              type == KvType::F32 ? static_cast<const void*>(vf.data()) : vh.data(), c.n_kv_heads,
              c.head_dim};
    const auto ref = reference(q, c, kf, vf, scale);
    for (Isa isa : {Isa::Scalar, Isa::AVX2, Isa::AVX512}) {
        if (!isa_supported(isa)) continue;
        testing::ActiveIsaGuard guard(isa);
        std::vector<float> out(ref.size(), NAN);
        attention(q.data(), c.n_q, c.n_heads, c.pos0, kv, scale, out.data(), pool);
        // Outputs are convex combinations of |v| <= 1: an f32 pipeline (dot ~d*u, exp ~2 ulp,
        // sum over n_ctx ~n_ctx*u relative) stays far below 1e-4 absolute; a wrong mask or
        // head mapping moves outputs by ~1e-2 or more.
        for (size_t i = 0; i < ref.size(); ++i)
            ASSERT_NEAR(out[i], ref[i], 1e-4)
                << isa_name(isa) << " kv=" << (type == KvType::F32 ? "f32" : "bf16")
                << " n_q=" << c.n_q << " pos0=" << c.pos0 << " d=" << c.head_dim << " i=" << i;
    }
}

TEST(KernelsAttention, MatchesDoubleReference) {
    util::ThreadPool pool(2);
    const Case cases[] = {
        {1, 1, 1, 8, 0},     // single token, no history
        {5, 4, 2, 33, 0},    // GQA 2:1, odd head_dim (vector tails), fresh prefill
        {7, 8, 2, 64, 37},   // GQA 4:1, queries appended to an existing cache
        {3, 6, 6, 17, 100},  // plain MHA, decode-like with history
        {1, 4, 1, 128, 1000},
    };
    uint32_t seed = 1;
    for (const Case& c : cases)
        for (KvType t : {KvType::F32, KvType::BF16}) run_case(c, t, pool, seed += 10);
}

TEST(KernelsAttention, LongContextSingleQuery) {
    util::ThreadPool pool(2);
    run_case({1, 2, 1, 64, 32767}, KvType::BF16, pool, 99);  // 32k cache
}

TEST(KernelsAttention, ManyQueriesChunkedPrefill) {
    util::ThreadPool pool(2);
    run_case({200, 2, 1, 32, 50}, KvType::F32, pool, 77);
}

TEST(KernelsAttention, RejectsBadGrouping) {
    util::ThreadPool pool(1);
    float q[3] = {}, o[3] = {};
    KvView kv{KvType::F32, q, q, 2, 1};
    EXPECT_THROW(attention(q, 1, 3, 0, kv, 1.0f, o, pool), std::exception);
}

}  // namespace
}  // namespace warden::kernels
