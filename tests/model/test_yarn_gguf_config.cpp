// YaRN rope scaling and the llama.cpp GGUF metadata of the MoE / MLA architectures:
//  * the yarn frequency table, cos/sin attention factor and DeepSeek softmax scale of the
//    DeepSeek-V3 and Kimi-K2 rope_scaling configs against numbers printed by transformers 4.57.6
//    (_compute_yarn_parameters and DeepseekV3Attention.scaling; see kYarnRef below);
//  * deepseek2 / glm4moe / qwen3moe GGUF metadata (written with warden's GGUFWriter) read into
//    the same ModelConfig as the equivalent config.json, and missing / unsupported keys rejected
//    with an error naming the key.
// End-to-end logits of converted GGUFs are checked in tests/python/test_gguf_moe.py.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "formats/gguf_file.h"
#include "formats/gguf_writer.h"
#include "model/model_config.h"
#include "util/error.h"

using namespace warden;
using namespace warden::model;

namespace {

nlohmann::json deepseek_v3_like() {
    // DeepSeek-V3's attention / rope config (config.json of deepseek-ai/DeepSeek-V3), small layers.
    return {{"model_type", "deepseek_v3"},
            {"num_hidden_layers", 3},
            {"hidden_size", 64},
            {"intermediate_size", 96},
            {"moe_intermediate_size", 32},
            {"num_attention_heads", 4},
            {"num_key_value_heads", 4},
            {"vocab_size", 320},
            {"q_lora_rank", 24},
            {"kv_lora_rank", 32},
            {"qk_rope_head_dim", 64},
            {"qk_nope_head_dim", 16},
            {"v_head_dim", 16},
            {"n_routed_experts", 8},
            {"num_experts_per_tok", 2},
            {"n_shared_experts", 1},
            {"n_group", 4},
            {"topk_group", 2},
            {"first_k_dense_replace", 1},
            {"routed_scaling_factor", 2.5},
            {"rope_theta", 10000.0},
            {"max_position_embeddings", 163840},
            {"rope_scaling",
             {{"type", "yarn"},
              {"factor", 40.0},
              {"original_max_position_embeddings", 4096},
              {"beta_fast", 32},
              {"beta_slow", 1},
              {"mscale", 1.0},
              {"mscale_all_dim", 1.0}}}};
}

// transformers 4.57.6 (scripts/make_yarn_reference.py --print-constants):
// _compute_yarn_parameters(DeepseekV3Config(**deepseek_v3_like())) inv_freq[0, 8, 16, 24, 31] and
// attention_factor; DeepseekV3Attention(config, 0).scaling * sqrt(qk_head_dim).
struct YarnRef {
    float inv_freq[5];
    double attention_factor;
    double scaling_mult;
};
constexpr int kRefIdx[5] = {0, 8, 16, 24, 31};
// DeepSeek-V3: theta 1e4, factor 40, original 4096, beta 32/1, mscale 1/1.
constexpr YarnRef kDeepseekRef = {
    {1.0f, 0.100000001f, 0.00550000044f, 2.49999994e-05f, 3.33380353e-06f}, 1.0, 1.87385421};
// Kimi-K2: theta 5e4, factor 32, original 4096, beta 1/1, mscale 1/1.
constexpr YarnRef kKimiRef = {
    {1.0f, 0.0668740347f, 0.00447213603f, 9.34593027e-06f, 8.76441277e-07f}, 1.0, 1.81326043};

void expect_ref(const ModelConfig& c, const YarnRef& ref, const char* what) {
    ASSERT_EQ(c.rope_inv_freq.size(), 32u) << what;
    for (int k = 0; k < 5; ++k)
        EXPECT_NEAR(c.rope_inv_freq[static_cast<size_t>(kRefIdx[k])], ref.inv_freq[k],
                    2e-6 * ref.inv_freq[k] + 1e-12)
            << what << " inv_freq[" << kRefIdx[k] << "]";
    EXPECT_NEAR(c.rope_attn_factor, ref.attention_factor, 1e-6) << what;
    EXPECT_NEAR(c.attn_scale_factor, ref.scaling_mult, 1e-5) << what;
}

// Builds a metadata-only GGUF of `arch` from key/value setters and parses it.
struct GgufBuilder {
    formats::GGUFWriter w;
    std::string arch;
    explicit GgufBuilder(std::string a) : arch(std::move(a)) { str("general.architecture", arch); }
    void u32(const std::string& k, uint32_t v) { w.set_u32(arch + "." + k, v); }
    void f32(const std::string& k, double v) {
        formats::GGUFValue x;
        x.type = formats::GGUFValueType::FLOAT32;
        x.f = v;
        w.set(arch + "." + k, x);
    }
    void boolean(const std::string& k, bool v) {
        formats::GGUFValue x;
        x.type = formats::GGUFValueType::BOOL;
        x.u = v ? 1 : 0;
        w.set(arch + "." + k, x);
    }
    void str(const std::string& k, const std::string& v) {
        formats::GGUFValue x;
        x.type = formats::GGUFValueType::STRING;
        x.s = v;
        w.set(k, x);
    }
    void add_tensor(const std::string& name, std::vector<int64_t> shape) {
        int64_t n = 1;
        for (auto d : shape) n *= d;
        w.add_tensor(name, std::move(shape), warden::tensor::GgmlType::F32,
                     std::vector<uint8_t>(static_cast<size_t>(n) * 4));
    }
    ModelConfig config() const {
        const auto path = std::filesystem::temp_directory_path() /
                          ("warden_yarn_gguf_" + std::to_string(::getpid()) + "_" + arch + ".gguf");
        w.write(path.string());
        formats::GGUFFile f(path.string());
        std::filesystem::remove(path);
        return config_from_gguf(f);
    }
};

// deepseek_v3_like() as llama.cpp's converter writes it (current: *_mla keys, MQA head_count_kv 1).
GgufBuilder deepseek2_gguf(bool legacy = false) {
    GgufBuilder b("deepseek2");
    b.u32("block_count", 3);
    b.u32("context_length", 163840);
    b.u32("embedding_length", 64);
    b.u32("feed_forward_length", 96);
    b.u32("attention.head_count", 4);
    b.u32("attention.head_count_kv", 1);
    b.u32("vocab_size", 320);
    b.f32("rope.freq_base", 10000.0);
    b.f32("attention.layer_norm_rms_epsilon", 1e-6);
    b.u32("attention.q_lora_rank", 24);
    b.u32("attention.kv_lora_rank", 32);
    if (legacy) {
        b.u32("attention.key_length", 16 + 64);
        b.u32("attention.value_length", 16);
    } else {
        b.u32("attention.key_length", 32 + 64);
        b.u32("attention.value_length", 32);
        b.u32("attention.key_length_mla", 16 + 64);
        b.u32("attention.value_length_mla", 16);
    }
    b.u32("rope.dimension_count", 64);
    b.u32("expert_count", 8);
    b.u32("expert_used_count", 2);
    b.u32("expert_feed_forward_length", 32);
    b.u32("expert_shared_count", 1);
    b.u32("leading_dense_block_count", 1);
    b.u32("expert_group_count", 4);
    b.u32("expert_group_used_count", 2);
    b.f32("expert_weights_scale", 2.5);
    b.boolean("expert_weights_norm", true);
    b.u32("expert_gating_func", 2);
    b.str("deepseek2.rope.scaling.type", "yarn");
    b.f32("rope.scaling.factor", 40.0);
    b.u32("rope.scaling.original_context_length", 4096);
    b.f32("rope.scaling.yarn_log_multiplier", 0.1 * 1.0);
    b.add_tensor("output.weight", {64, 320});
    return b;
}

}  // namespace

TEST(YarnRope, DeepseekV3AndKimiK2MatchTransformers) {
    auto j = deepseek_v3_like();
    const auto c = config_from_hf_json(j, "dsv3");
    EXPECT_NO_THROW(c.validate());
    expect_ref(c, kDeepseekRef, "deepseek-v3");
    j["rope_theta"] = 50000.0;
    j["rope_scaling"] = {
        {"type", "yarn"},       {"factor", 32.0},   {"original_max_position_embeddings", 4096},
        {"beta_fast", 1.0},     {"beta_slow", 1.0}, {"mscale", 1.0},
        {"mscale_all_dim", 1.0}};
    expect_ref(config_from_hf_json(j, "kimi"), kKimiRef, "kimi-k2");
}

TEST(YarnRope, AttentionFactorFollowsTransformersRules) {
    auto j = deepseek_v3_like();
    // mscale != mscale_all_dim: cos/sin carry mscale(f, a) / mscale(f, b); softmax mscale(f, b)^2.
    j["rope_scaling"]["mscale"] = 0.8;
    j["rope_scaling"]["mscale_all_dim"] = 0.6;
    auto c = config_from_hf_json(j, "x");
    const double l = std::log(40.0);
    EXPECT_NEAR(c.rope_attn_factor, (0.08 * l + 1) / (0.06 * l + 1), 1e-6);
    EXPECT_NEAR(c.attn_scale_factor, (0.06 * l + 1) * (0.06 * l + 1), 1e-5);
    // explicit attention_factor wins; without mscale keys the paper's 0.1 ln f + 1; only
    // deepseek_v3 touches the softmax scale.
    j["rope_scaling"]["attention_factor"] = 0.5;
    EXPECT_FLOAT_EQ(config_from_hf_json(j, "x").rope_attn_factor, 0.5f);
    auto q = nlohmann::json{
        {"model_type", "qwen2"},
        {"num_hidden_layers", 2},
        {"hidden_size", 64},
        {"intermediate_size", 128},
        {"num_attention_heads", 4},
        {"vocab_size", 320},
        {"rope_theta", 10000.0},
        {"rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}, {"mscale_all_dim", 1.0}}}};
    c = config_from_hf_json(q, "q");
    EXPECT_NEAR(c.rope_attn_factor, 0.1 * std::log(4.0) + 1, 1e-6);
    EXPECT_FLOAT_EQ(c.attn_scale_factor, 1.0f);
    // no original_max_position_embeddings: max_position_embeddings (2048 default) is used
    EXPECT_NO_THROW(c.validate());
    // ignoring the scaling would leave the plain table: yarn must change the slow frequencies
    const auto plain = rope_inv_freq(16, 10000.0f);
    EXPECT_FLOAT_EQ(c.rope_inv_freq[0], plain[0]);
    EXPECT_NEAR(c.rope_inv_freq[7], plain[7] / 4.0f, 1e-6f * plain[7]);
    q["rope_scaling"]["factor"] = -1.0;
    EXPECT_THROW(config_from_hf_json(q, "q"), util::Error);
    q["rope_scaling"] = {{"rope_type", "yarn"}};
    EXPECT_THROW(config_from_hf_json(q, "q"), util::Error);
    q["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 2.0}};
    EXPECT_THROW(config_from_hf_json(q, "q"), util::Error);
}

TEST(GgufMoeConfig, Deepseek2MetadataMatchesConfigJson) {
    const ModelConfig g = deepseek2_gguf().config();
    const ModelConfig h = config_from_hf_json(deepseek_v3_like(), "dsv3");
    EXPECT_NO_THROW(g.validate());
    EXPECT_EQ(g.arch, Arch::DeepseekV3);
    EXPECT_EQ(g.n_kv_heads, 4);  // MQA view in the file, per-head latent keys in warden
    EXPECT_EQ(g.head_dim, h.head_dim);
    EXPECT_EQ(g.rope_dim, h.rope_dim);
    EXPECT_EQ(g.rope_style, RopeStyle::Interleaved);
    EXPECT_EQ(g.mla.q_lora_rank, 24);
    EXPECT_EQ(g.mla.kv_lora_rank, 32);
    EXPECT_EQ(g.mla.nope_dim, 16);
    EXPECT_EQ(g.mla.v_dim, 16);
    EXPECT_EQ(g.moe.n_experts, 8);
    EXPECT_EQ(g.moe.top_k, 2);
    EXPECT_EQ(g.moe.d_expert, 32);
    EXPECT_EQ(g.moe.n_shared, 1);
    EXPECT_EQ(g.moe.n_group, 4);
    EXPECT_EQ(g.moe.topk_group, 2);
    EXPECT_EQ(g.moe.scoring, RouterScoring::Sigmoid);
    EXPECT_TRUE(g.moe.score_bias);
    EXPECT_TRUE(g.moe.norm_topk_prob);
    EXPECT_FLOAT_EQ(g.moe.routed_scaling, 2.5f);
    EXPECT_EQ(g.moe.sparse, h.moe.sparse);
    EXPECT_FALSE(g.tied_embeddings);
    // yarn from GGUF keys == yarn from rope_scaling (llama.cpp: log_mul = 0.1 * mscale_all_dim)
    ASSERT_EQ(g.rope_inv_freq.size(), h.rope_inv_freq.size());
    for (size_t i = 0; i < g.rope_inv_freq.size(); ++i)
        EXPECT_FLOAT_EQ(g.rope_inv_freq[i], h.rope_inv_freq[i]) << i;
    EXPECT_NEAR(g.rope_attn_factor, h.rope_attn_factor, 1e-6);
    EXPECT_NEAR(g.attn_scale_factor, h.attn_scale_factor, 1e-5);
    EXPECT_GT(g.attn_scale_factor, 1.5f);  // (0.1 ln 40 + 1)^2 = 1.87
}

TEST(GgufMoeConfig, OlderDeepseek2LayoutAndNextnLayers) {
    // older converters: per-head sizes in key_length / value_length, no *_mla keys; a trailing
    // multi-token-prediction block is not a decoder layer
    auto b = deepseek2_gguf(true);
    b.u32("block_count", 4);
    b.u32("nextn_predict_layers", 1);
    const ModelConfig c = b.config();
    EXPECT_NO_THROW(c.validate());
    EXPECT_EQ(c.n_layers, 3);
    EXPECT_EQ(c.head_dim, 80);
    EXPECT_EQ(c.mla.nope_dim, 16);
    EXPECT_EQ(c.mla.v_dim, 16);
    EXPECT_EQ(c.moe.sparse, (std::vector<char>{0, 1, 1}));
}

TEST(GgufMoeConfig, MissingOrUnsupportedKeysNameTheKey) {
    auto expect_error = [](GgufBuilder b, const std::string& key) {
        try {
            (void)b.config();
            ADD_FAILURE() << "no error for " << key;
        } catch (const util::Error& e) {
            EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
        }
    };
    auto b = deepseek2_gguf();
    b.u32("expert_gating_func", 1);  // softmax (DeepSeek-V2 routing): not supported
    expect_error(b, "deepseek2.expert_gating_func");
    b = deepseek2_gguf();
    b.u32("expert_gating_func", 7);
    expect_error(b, "deepseek2.expert_gating_func");
    b = deepseek2_gguf();
    b.u32("nextn_predict_layers", 3);
    expect_error(b, "deepseek2.nextn_predict_layers");
    b = deepseek2_gguf();
    b.str("deepseek2.rope.scaling.type", "longrope");
    expect_error(b, "longrope");
    GgufBuilder q("qwen3moe");
    q.u32("block_count", 2);
    q.u32("embedding_length", 64);
    q.u32("feed_forward_length", 96);
    q.u32("attention.head_count", 4);
    q.u32("expert_count", 8);
    q.u32("expert_feed_forward_length", 32);
    expect_error(q, "qwen3moe.expert_used_count");
    q.u32("expert_used_count", 2);
    q.add_tensor("blk.0.ffn_gate_inp.weight", {64, 8});
    const ModelConfig c = q.config();
    EXPECT_EQ(c.arch, Arch::Qwen3Moe);
    EXPECT_TRUE(c.qk_norm);
    EXPECT_TRUE(c.moe.norm_topk_prob);  // llama.cpp's qwen3moe always renormalizes
    EXPECT_EQ(c.moe.scoring, RouterScoring::Softmax);
    EXPECT_EQ(c.moe.sparse, (std::vector<char>{1, 0}));  // layer 1 has no router: dense
}
