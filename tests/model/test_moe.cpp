// Mixture-of-experts FFN: routing against hand-computed cases and an independent brute-force
// router, the batched-by-expert FFN against a per-token double-precision reference, batch
// invariance, and config parsing of the qwen3_moe / glm4_moe fields.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>

#include "model/model.h"
#include "model/moe.h"
#include "quant/quantizer.h"
#include "tensor/weight_format.h"
#include "test_paths.h"
#include "util/error.h"

using namespace warden;
using model::MoeConfig;
using model::RouterScoring;

namespace {

float logit_of(double p) {
    return static_cast<float>(std::log(p / (1.0 - p)));
}

// Independent reference of the transformers routers (Qwen3MoeSparseMoeBlock and
// Glm4MoeTopkRouter / DeepseekV3TopkRouter), in double, with std::sort.
void ref_route(const MoeConfig& m, const float* lg, const float* bias, std::vector<int>& sel,
               std::vector<double>& w) {
    const int E = static_cast<int>(m.n_experts), K = static_cast<int>(m.top_k);
    std::vector<double> s(E), ch(E);
    auto topk = [](const std::vector<double>& v, int k) {
        std::vector<int> idx(v.size());
        std::iota(idx.begin(), idx.end(), 0);
        std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return v[a] > v[b]; });
        idx.resize(k);
        return idx;
    };
    if (m.scoring == RouterScoring::Softmax) {
        double mx = *std::max_element(lg, lg + E), z = 0;
        for (int e = 0; e < E; ++e) z += std::exp(lg[e] - mx);
        for (int e = 0; e < E; ++e) s[e] = std::exp(lg[e] - mx) / z;
        sel = topk(s, K);
    } else {
        for (int e = 0; e < E; ++e) {
            s[e] = 1.0 / (1.0 + std::exp(-static_cast<double>(lg[e])));
            ch[e] = s[e] + (bias ? bias[e] : 0.0);
        }
        const int G = static_cast<int>(m.n_group), per = E / G;
        std::vector<double> gs(G);
        for (int g = 0; g < G; ++g) {
            std::vector<double> in(ch.begin() + g * per, ch.begin() + (g + 1) * per);
            std::sort(in.rbegin(), in.rend());
            gs[g] = in[0] + (per > 1 ? in[1] : 0.0);
        }
        if (G > 1) {
            auto keep = topk(gs, static_cast<int>(m.topk_group));
            for (int e = 0; e < E; ++e)
                if (std::find(keep.begin(), keep.end(), e / per) == keep.end())
                    ch[e] = -std::numeric_limits<double>::infinity();
        }
        sel = topk(ch, K);
    }
    w.assign(K, 0.0);
    double sum = 0;
    for (int j = 0; j < K; ++j) sum += (w[j] = s[sel[j]]);
    if (m.norm_topk_prob)
        for (auto& v : w) v /= sum;
    if (m.scoring == RouterScoring::Sigmoid)
        for (auto& v : w) v *= m.routed_scaling;
}

MoeConfig glm_like() {
    MoeConfig m;
    m.n_experts = 8;
    m.top_k = 2;
    m.d_expert = 4;
    m.scoring = RouterScoring::Sigmoid;
    m.score_bias = true;
    m.norm_topk_prob = true;
    m.n_group = 4;
    m.topk_group = 2;
    m.routed_scaling = 2.5f;
    return m;
}

}  // namespace

TEST(MoeRoute, SoftmaxTopKRenormalized) {
    MoeConfig m;
    m.n_experts = 4;
    m.top_k = 2;
    m.scoring = RouterScoring::Softmax;
    const float lg[4] = {1.0f, 3.0f, 2.0f, 0.0f};
    int32_t sel[2];
    float w[2];
    m.norm_topk_prob = true;
    model::moe_route(m, lg, nullptr, 1, sel, w);
    EXPECT_EQ(sel[0], 1);
    EXPECT_EQ(sel[1], 2);
    const double e3 = std::exp(3.0), e2 = std::exp(2.0);
    EXPECT_NEAR(w[0], e3 / (e3 + e2), 1e-6);
    EXPECT_NEAR(w[1], e2 / (e3 + e2), 1e-6);
    // Without renormalization: the softmax probabilities over all four experts.
    m.norm_topk_prob = false;
    model::moe_route(m, lg, nullptr, 1, sel, w);
    const double z = std::exp(1.0) + e3 + e2 + 1.0;
    EXPECT_NEAR(w[0], e3 / z, 1e-6);
    EXPECT_NEAR(w[1], e2 / z, 1e-6);
}

TEST(MoeRoute, GroupedTopKExcludesTheBestExpertOfAWeakGroup) {
    // Groups of two: {0.9, 0.01} sums 0.91, {0.5, 0.5} 1.0, {0.48, 0.47} 0.95, {0.1, 0.1} 0.2.
    // The two best groups are 1 and 2, so expert 0 (best alone) is not eligible.
    MoeConfig m = glm_like();
    const double p[8] = {0.9, 0.01, 0.5, 0.5, 0.48, 0.47, 0.1, 0.1};
    float lg[8], bias[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int e = 0; e < 8; ++e) lg[e] = logit_of(p[e]);
    int32_t sel[2];
    float w[2];
    model::moe_route(m, lg, bias, 1, sel, w);
    EXPECT_EQ(sel[0], 2);  // tie 0.5 / 0.5: lower id first
    EXPECT_EQ(sel[1], 3);
    EXPECT_NEAR(w[0], 2.5 * 0.5, 1e-5);
    EXPECT_NEAR(w[1], 2.5 * 0.5, 1e-5);
    // The correction bias moves selection but not the weights: lift group 3 above all.
    bias[6] = 1.0f;
    bias[7] = 0.5f;
    model::moe_route(m, lg, bias, 1, sel, w);
    EXPECT_EQ(sel[0], 6);
    EXPECT_EQ(sel[1], 7);
    EXPECT_NEAR(w[0], 2.5 * 0.5, 1e-5);  // sigmoid scores 0.1 and 0.1, renormalized
    // With one group every expert is eligible.
    m.n_group = 1;
    m.topk_group = 1;
    bias[6] = bias[7] = 0.0f;
    model::moe_route(m, lg, bias, 1, sel, w);
    EXPECT_EQ(sel[0], 0);
    EXPECT_EQ(sel[1], 2);
    EXPECT_NEAR(w[0], 2.5 * 0.9 / 1.4, 1e-5);
}

TEST(MoeRoute, GroupedTopKNeverPicksAnExcludedGroupWithNegativeBias) {
    // DeepSeek-V3 checkpoints carry negative e_score_correction_bias values: every eligible
    // choice (sigmoid + bias) is then below 0. The excluded groups must lose to them (-inf mask),
    // not win with a masked choice of 0.
    MoeConfig m = glm_like();  // 8 experts, 4 groups of two, best 2 groups, top 2
    const double p[8] = {0.9, 0.8, 0.7, 0.6, 0.2, 0.1, 0.15, 0.05};
    float lg[8], bias[8];
    for (int e = 0; e < 8; ++e) {
        lg[e] = logit_of(p[e]);
        bias[e] = -2.0f;
    }
    int32_t sel[2];
    float w[2];
    model::moe_route(m, lg, bias, 1, sel, w);
    // Groups 0 {0.9, 0.8} and 1 {0.7, 0.6} are kept; experts 0 and 1 are the best of them.
    EXPECT_EQ(sel[0], 0);
    EXPECT_EQ(sel[1], 1);
    EXPECT_NEAR(w[0], 2.5 * 0.9 / 1.7, 1e-5);
    EXPECT_NEAR(w[1], 2.5 * 0.8 / 1.7, 1e-5);
    // top_k larger than the eligible experts of one group: the second kept group supplies the rest.
    m.top_k = 3;
    int32_t sel3[3];
    float w3[3];
    model::moe_route(m, lg, bias, 1, sel3, w3);
    EXPECT_EQ(sel3[0], 0);
    EXPECT_EQ(sel3[1], 1);
    EXPECT_EQ(sel3[2], 2);
}

TEST(MoeRoute, MatchesBruteForceReferenceOnRandomLogits) {
    std::mt19937_64 rng(5);
    std::normal_distribution<float> nd(0.0f, 2.0f);
    std::vector<MoeConfig> cfgs;
    MoeConfig sm;
    sm.n_experts = 16;
    sm.top_k = 4;
    sm.scoring = RouterScoring::Softmax;
    sm.norm_topk_prob = true;
    cfgs.push_back(sm);
    sm.norm_topk_prob = false;
    cfgs.push_back(sm);
    MoeConfig sg = glm_like();
    sg.n_experts = 32;
    sg.top_k = 6;
    sg.n_group = 8;
    sg.topk_group = 3;
    cfgs.push_back(sg);
    for (const MoeConfig& m : cfgs) {
        const int n = 200, E = static_cast<int>(m.n_experts), K = static_cast<int>(m.top_k);
        std::vector<float> lg(static_cast<size_t>(n * E)), bias(static_cast<size_t>(E));
        for (auto& v : lg) v = nd(rng);
        // Positive and (as in DeepSeek-V3 checkpoints) negative correction biases.
        for (int sign : {1, -1}) {
            for (auto& v : bias)
                v = static_cast<float>(sign) *
                    (std::abs(nd(rng)) * 0.05f + (sign < 0 ? 1.0f : 0.0f));
            std::vector<int32_t> sel(static_cast<size_t>(n * K));
            std::vector<float> w(static_cast<size_t>(n * K));
            model::moe_route(m, lg.data(), bias.data(), n, sel.data(), w.data());
            for (int t = 0; t < n; ++t) {
                std::vector<int> rs;
                std::vector<double> rw;
                ref_route(m, lg.data() + t * E, bias.data(), rs, rw);
                for (int j = 0; j < K; ++j) {
                    ASSERT_EQ(sel[static_cast<size_t>(t * K + j)], rs[static_cast<size_t>(j)])
                        << "token " << t << " slot " << j;
                    ASSERT_NEAR(w[static_cast<size_t>(t * K + j)], rw[static_cast<size_t>(j)],
                                1e-5);
                }
            }
        }
    }
}

namespace {

// fmt: a --weights name for a quantized matrix (default quantizer, as the loader packs), else f32.
model::Matrix random_matrix(std::mt19937_64& rng, int64_t rows, int64_t cols, float sd,
                            const char* fmt = nullptr) {
    std::normal_distribution<float> nd(0.0f, sd);
    std::vector<float> row(static_cast<size_t>(cols));
    if (fmt != nullptr) {
        const kernels::WeightMatrix layout =
            kernels::weight_layout(tensor::parse_weight_format(fmt), rows, cols);
        auto m = model::Matrix::quantized(layout);
        for (int64_t r = 0; r < rows; ++r) {
            for (auto& v : row) v = nd(rng);
            m.pack_quant_row(r,
                             quant::default_quantizer().quantize_row(layout, row.data(), nullptr));
        }
        return m;
    }
    auto m = model::Matrix::owned(tensor::WeightType::F32, rows, cols);
    for (int64_t r = 0; r < rows; ++r) {
        for (auto& v : row) v = nd(rng);
        m.pack_row(r, row.data());
    }
    return m;
}

// y = W x in double, W read back from the packed matrix.
std::vector<double> matvec(const model::Matrix& w, const std::vector<double>& x) {
    std::vector<double> y(static_cast<size_t>(w.rows()));
    std::vector<float> row(static_cast<size_t>(w.cols()));
    for (int64_t r = 0; r < w.rows(); ++r) {
        w.row_f32(r, row.data());
        double s = 0;
        for (int64_t k = 0; k < w.cols(); ++k)
            s += static_cast<double>(row[static_cast<size_t>(k)]) * x[static_cast<size_t>(k)];
        y[static_cast<size_t>(r)] = s;
    }
    return y;
}

std::vector<double> swiglu(const model::Matrix& g, const model::Matrix& u, const model::Matrix& dn,
                           const std::vector<double>& x) {
    auto a = matvec(g, x), b = matvec(u, x);
    for (size_t i = 0; i < a.size(); ++i) a[i] = a[i] / (1.0 + std::exp(-a[i])) * b[i];
    return matvec(dn, a);
}

}  // namespace

// n = 300 holds more gathered rows (n * top_k = 600) than one dispatch chunk takes
// (max(n, 256)), so the experts go to the pool in several chunks.
TEST(MoeFfn, MatchesPerTokenReferenceAndIsBatchInvariant) {
    util::ThreadPool pool(2);
    const std::pair<bool, int64_t> cases[] = {
        {false, 9}, {true, 9}, {false, 300}, {true, 300}};  // glm, n
    for (const auto& [glm, n] : cases) {
        model::ModelConfig c;
        c.d_model = 32;
        c.moe = glm ? glm_like() : MoeConfig{};
        if (!glm) {
            c.moe.n_experts = 6;
            c.moe.top_k = 2;
            c.moe.norm_topk_prob = true;
        }
        c.moe.d_expert = 16;
        c.moe.n_shared = glm ? 1 : 0;
        const int64_t d = c.d_model, de = c.moe.d_expert, E = c.moe.n_experts;
        std::mt19937_64 rng(glm ? 11 : 12);
        model::MoeWeights w;
        w.router = random_matrix(rng, E, d, 0.3f);
        if (glm) {
            std::uniform_real_distribution<float> ud(0.0f, 0.1f);
            for (int64_t e = 0; e < E; ++e) w.router_bias.push_back(ud(rng));
        }
        for (int64_t e = 0; e < E; ++e) {
            w.gate.push_back(random_matrix(rng, de, d, 0.25f));
            w.up.push_back(random_matrix(rng, de, d, 0.25f));
            w.down.push_back(random_matrix(rng, d, de, 0.25f));
        }
        if (glm) {
            w.shared_gate = random_matrix(rng, de, d, 0.25f);
            w.shared_up = random_matrix(rng, de, d, 0.25f);
            w.shared_down = random_matrix(rng, d, de, 0.25f);
        }
        std::normal_distribution<float> nd(0.0f, 1.0f);
        std::vector<float> x(static_cast<size_t>(n * d));
        for (auto& v : x) v = nd(rng);
        std::vector<float> out(static_cast<size_t>(n * d));
        model::MoeFfn ffn;
        ffn.forward(c, w, x.data(), n, out.data(), pool);
        const auto& counts = ffn.last_expert_counts();
        EXPECT_EQ(std::accumulate(counts.begin(), counts.end(), int64_t{0}), n * c.moe.top_k);
        int used = 0;
        for (auto cnt : counts) used += cnt > 0;
        EXPECT_GT(used, 2) << "random tokens should spread over several experts";

        double worst = 0;
        for (int64_t t = 0; t < n; ++t) {
            std::vector<double> xt(x.begin() + t * d, x.begin() + (t + 1) * d);
            auto lg_d = matvec(w.router, xt);
            std::vector<float> lg(lg_d.begin(), lg_d.end());
            std::vector<int> sel;
            std::vector<double> wt;
            ref_route(c.moe, lg.data(), glm ? w.router_bias.data() : nullptr, sel, wt);
            std::vector<double> ref(static_cast<size_t>(d), 0.0);
            for (size_t j = 0; j < sel.size(); ++j) {
                const auto e = static_cast<size_t>(sel[j]);
                auto y = swiglu(w.gate[e], w.up[e], w.down[e], xt);
                for (int64_t i = 0; i < d; ++i)
                    ref[static_cast<size_t>(i)] += wt[j] * y[static_cast<size_t>(i)];
            }
            if (glm) {
                auto y = swiglu(w.shared_gate, w.shared_up, w.shared_down, xt);
                for (int64_t i = 0; i < d; ++i)
                    ref[static_cast<size_t>(i)] += y[static_cast<size_t>(i)];
            }
            for (int64_t i = 0; i < d; ++i)
                worst = std::max(worst, std::abs(ref[static_cast<size_t>(i)] -
                                                 out[static_cast<size_t>(t * d + i)]));

            // The same token alone gives bit-identical output.
            std::vector<float> one(static_cast<size_t>(d));
            ffn.forward(c, w, x.data() + t * d, 1, one.data(), pool);
            for (int64_t i = 0; i < d; ++i)
                ASSERT_EQ(one[static_cast<size_t>(i)], out[static_cast<size_t>(t * d + i)])
                    << "token " << t << " dim " << i;
        }
        EXPECT_LT(worst, 1e-4) << (glm ? "glm" : "qwen") << " MoE vs double reference, n=" << n;
    }
}

// int4 (W4A8) experts: a batch-1 step (every expert reads x itself, in one group with the
// shared expert, x quantized once) and a batch step (gathered rows per expert, several dispatch
// chunks at n = 200) give every token the same bits; and both match the double reference of the
// dequantized weights to within the int8 activation rounding.
TEST(MoeFfn, Int4ExpertsBatchInvariantAcrossDispatchChunks) {
    util::ThreadPool pool(3);
    model::ModelConfig c;
    c.d_model = 64;
    c.moe = glm_like();
    c.moe.d_expert = 32;
    c.moe.n_shared = 1;
    const int64_t d = c.d_model, de = c.moe.d_expert, E = c.moe.n_experts;
    std::mt19937_64 rng(21);
    model::MoeWeights w;
    w.router = random_matrix(rng, E, d, 0.3f);
    std::uniform_real_distribution<float> ud(0.0f, 0.1f);
    for (int64_t e = 0; e < E; ++e) w.router_bias.push_back(ud(rng));
    for (int64_t e = 0; e < E; ++e) {
        w.gate.push_back(random_matrix(rng, de, d, 0.25f, "int4"));
        w.up.push_back(random_matrix(rng, de, d, 0.25f, "int4"));
        w.down.push_back(random_matrix(rng, d, de, 0.25f, "int4"));
    }
    w.shared_gate = random_matrix(rng, de, d, 0.25f, "int4");
    w.shared_up = random_matrix(rng, de, d, 0.25f, "int4");
    w.shared_down = random_matrix(rng, d, de, 0.25f);
    const int64_t n = 200;
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(n * d));
    for (auto& v : x) v = nd(rng);
    std::vector<float> out(static_cast<size_t>(n * d)), one(static_cast<size_t>(d));
    model::MoeFfn ffn;
    ffn.forward(c, w, x.data(), n, out.data(), pool);
    double worst = 0, scale = 0;
    for (int64_t t = 0; t < n; ++t) {
        ffn.forward(c, w, x.data() + t * d, 1, one.data(), pool);
        for (int64_t i = 0; i < d; ++i)
            ASSERT_EQ(one[static_cast<size_t>(i)], out[static_cast<size_t>(t * d + i)])
                << "token " << t << " dim " << i;
        std::vector<double> xt(x.begin() + t * d, x.begin() + (t + 1) * d);
        auto lg_d = matvec(w.router, xt);
        std::vector<float> lg(lg_d.begin(), lg_d.end());
        std::vector<int> sel;
        std::vector<double> wt;
        ref_route(c.moe, lg.data(), w.router_bias.data(), sel, wt);
        std::vector<double> ref(static_cast<size_t>(d), 0.0);
        for (size_t j = 0; j < sel.size(); ++j) {
            const auto e = static_cast<size_t>(sel[j]);
            auto y = swiglu(w.gate[e], w.up[e], w.down[e], xt);
            for (int64_t i = 0; i < d; ++i)
                ref[static_cast<size_t>(i)] += wt[j] * y[static_cast<size_t>(i)];
        }
        auto y = swiglu(w.shared_gate, w.shared_up, w.shared_down, xt);
        for (int64_t i = 0; i < d; ++i) {
            ref[static_cast<size_t>(i)] += y[static_cast<size_t>(i)];
            worst = std::max(
                worst, std::abs(ref[static_cast<size_t>(i)] - out[static_cast<size_t>(t * d + i)]));
            scale = std::max(scale, std::abs(ref[static_cast<size_t>(i)]));
        }
    }
    EXPECT_GT(scale, 0.5);
    EXPECT_LT(worst, 0.02 * scale) << "int4 MoE vs double reference of the dequantized weights";
}

TEST(MoeConfig, ParsesQwen3MoeAndGlm4Moe) {
    nlohmann::json q = {{"model_type", "qwen3_moe"},
                        {"num_hidden_layers", 4},
                        {"hidden_size", 64},
                        {"intermediate_size", 96},
                        {"num_attention_heads", 4},
                        {"num_key_value_heads", 2},
                        {"head_dim", 16},
                        {"vocab_size", 100},
                        {"num_experts", 8},
                        {"num_experts_per_tok", 2},
                        {"moe_intermediate_size", 32},
                        {"norm_topk_prob", true},
                        {"decoder_sparse_step", 2},
                        {"mlp_only_layers", {3}},
                        {"rope_theta", 10000.0}};
    auto c = model::config_from_hf_json(q, "q");
    c.validate();
    EXPECT_TRUE(c.qk_norm);
    EXPECT_EQ(c.moe.n_experts, 8);
    EXPECT_EQ(c.moe.scoring, RouterScoring::Softmax);
    EXPECT_TRUE(c.moe.norm_topk_prob);
    EXPECT_FALSE(c.tied_embeddings);
    // sparse iff (l + 1) % 2 == 0 and l not in mlp_only_layers
    EXPECT_EQ(c.moe.sparse, (std::vector<char>{0, 1, 0, 0}));

    nlohmann::json g = {{"model_type", "glm4_moe"},
                        {"num_hidden_layers", 3},
                        {"hidden_size", 64},
                        {"intermediate_size", 96},
                        {"num_attention_heads", 4},
                        {"num_key_value_heads", 2},
                        {"vocab_size", 100},
                        {"partial_rotary_factor", 0.5},
                        {"use_qk_norm", true},
                        {"rope_theta", 10000.0},
                        {"attention_bias", true},
                        {"n_routed_experts", 8},
                        {"num_experts_per_tok", 2},
                        {"moe_intermediate_size", 32},
                        {"n_shared_experts", 1},
                        {"routed_scaling_factor", 2.5},
                        {"n_group", 4},
                        {"topk_group", 2},
                        {"first_k_dense_replace", 1}};
    c = model::config_from_hf_json(g, "g");
    c.validate();
    EXPECT_EQ(c.head_dim, 16);
    EXPECT_EQ(c.rope_dim, 8);
    EXPECT_EQ(c.rope_inv_freq.size(), 4u);
    EXPECT_NEAR(c.rope_inv_freq[1], std::pow(10000.0, -2.0 / 8.0),
                1e-7);  // theta^(-2/rope_dim), rope_dim 8
    EXPECT_TRUE(c.qk_norm && c.qkv_bias);
    EXPECT_EQ(c.moe.scoring, RouterScoring::Sigmoid);
    EXPECT_TRUE(c.moe.score_bias && c.moe.norm_topk_prob);
    EXPECT_EQ(c.moe.n_shared, 1);
    EXPECT_FLOAT_EQ(c.moe.routed_scaling, 2.5f);
    EXPECT_EQ(c.moe.sparse, (std::vector<char>{0, 1, 1}));

    auto bad = [&](nlohmann::json j, const char* key, nlohmann::json v) {
        j[key] = v;
        EXPECT_THROW(model::config_from_hf_json(j, "x").validate(), util::Error)
            << key << " = " << v;
    };
    bad(q, "num_experts_per_tok", 9);
    bad(q, "num_experts_per_tok", 0);
    bad(q, "moe_intermediate_size", 0);
    bad(q, "decoder_sparse_step", 0);
    bad(g, "n_group", 3);
    bad(g, "topk_group", 5);
    bad(g, "num_experts_per_tok", 5);  // 2 groups x 2 experts < 5
    bad(g, "partial_rotary_factor", 0.0);
    g.erase("moe_intermediate_size");
    EXPECT_THROW(model::config_from_hf_json(g, "x"), util::Error);
}

TEST(MoeLoad, TinyQwen3MoeHasExpertsOnSparseLayersOnly) {
    const std::string dir = test::golden_model("tiny-qwen3-moe");
    if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << "no tiny-qwen3-moe";
    util::ThreadPool pool(2);
    model::LoadOptions lo;
    lo.load_tokenizer = false;
    auto m = model::load_model(dir, lo, pool);
    ASSERT_EQ(m->weights.layers.size(), 3u);
    ASSERT_TRUE(m->weights.layers[0].moe);
    EXPECT_FALSE(m->weights.layers[1].moe);
    ASSERT_TRUE(m->weights.layers[2].moe);
    EXPECT_EQ(m->weights.layers[1].w_gate.rows(), 96);
    const auto& mw = *m->weights.layers[0].moe;
    EXPECT_EQ(mw.gate.size(), 8u);
    EXPECT_EQ(mw.router.view().type, tensor::WeightType::F32);  // router stays f32 under bf16
    EXPECT_EQ(mw.gate[3].view().type, tensor::WeightType::BF16);
    EXPECT_EQ(mw.down[7].rows(), 64);
    EXPECT_EQ(mw.down[7].cols(), 32);
}
