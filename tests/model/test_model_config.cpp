#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

#include "model/model_config.h"
#include "util/error.h"

using namespace warden::model;

TEST(ModelConfig, RopeInvFreqMatchesDefinition) {
    const auto f = rope_inv_freq(64, 10000.0f);
    ASSERT_EQ(f.size(), 32u);
    EXPECT_FLOAT_EQ(f[0], 1.0f);
    EXPECT_NEAR(f[1], std::pow(10000.0, -2.0 / 64), 1e-7);
    EXPECT_NEAR(f[31], std::pow(10000.0, -62.0 / 64), 1e-9);
}

TEST(ModelConfig, Llama3ScalingKeepsHighAndScalesLowFrequencies) {
    // Llama 3.1 8B values: factor 8, low 1, high 4, original 8192, theta 500000, dim 128.
    auto f = rope_inv_freq(128, 500000.0f);
    const auto orig = f;
    apply_llama3_rope_scaling(f, 8.0f, 1.0f, 4.0f, 8192.0f);
    for (size_t i = 0; i < f.size(); ++i) {
        const double wavelen = 2 * M_PI / orig[i];
        if (wavelen < 8192.0 / 4) {
            EXPECT_FLOAT_EQ(f[i], orig[i]) << i;
        } else if (wavelen > 8192.0) {
            EXPECT_FLOAT_EQ(f[i], orig[i] / 8.0f) << i;
        } else {
            EXPECT_LT(f[i], orig[i]);
            EXPECT_GT(f[i], orig[i] / 8.0f);
        }
    }
}

TEST(ModelConfig, FromHfJson) {
    const auto j =
        nlohmann::json::parse(R"({"model_type":"qwen3","num_hidden_layers":2,"hidden_size":64,
        "intermediate_size":128,"num_attention_heads":4,"num_key_value_heads":2,"head_dim":32,
        "vocab_size":100,"max_position_embeddings":256,"rms_norm_eps":1e-6,"rope_theta":1000000,
        "tie_word_embeddings":true})");
    const auto c = config_from_hf_json(j, "config.json");
    EXPECT_EQ(c.arch, Arch::Qwen3);
    EXPECT_EQ(c.head_dim, 32);
    EXPECT_TRUE(c.qk_norm);
    EXPECT_FALSE(c.qkv_bias);
    EXPECT_TRUE(c.tied_embeddings);
    EXPECT_EQ(c.rope_style, RopeStyle::NeoX);
    EXPECT_NO_THROW(c.validate());
}

TEST(ModelConfig, RejectsBadConfigs) {
    auto j = nlohmann::json::parse(R"({"model_type":"gpt_neox","num_hidden_layers":2})");
    EXPECT_THROW(config_from_hf_json(j, "c"), warden::util::Error);
    j = nlohmann::json::parse(R"({"model_type":"llama","num_hidden_layers":2,"hidden_size":64,
        "intermediate_size":128,"num_attention_heads":6,"num_key_value_heads":4,"vocab_size":100,
        "rope_theta":10000})");
    EXPECT_THROW(config_from_hf_json(j, "c").validate(), warden::util::Error);  // 6 % 4 != 0
    j = nlohmann::json::parse(R"({"model_type":"llama","num_hidden_layers":"two"})");
    EXPECT_THROW(config_from_hf_json(j, "c"), warden::util::Error);
    j = nlohmann::json::parse(R"([1,2])");
    EXPECT_THROW(config_from_hf_json(j, "c"), warden::util::Error);
}

namespace {

std::string error_of(const nlohmann::json& j) {
    try {
        config_from_hf_json(j, "c");
    } catch (const warden::util::Error& e) {
        return e.what();
    }
    return "";
}

// A config in the transformers 4.x layout and the same config as transformers 5 saves it
// (rope_theta, rope_scaling and partial_rotary_factor folded into rope_parameters).
void expect_same_rope(const ModelConfig& a, const ModelConfig& b) {
    EXPECT_EQ(a.rope_theta, b.rope_theta);
    EXPECT_EQ(a.rope_dim, b.rope_dim);
    EXPECT_EQ(a.rope_inv_freq, b.rope_inv_freq);
    EXPECT_EQ(a.rope_attn_factor, b.rope_attn_factor);
    EXPECT_EQ(a.attn_scale_factor, b.attn_scale_factor);
    EXPECT_EQ(a.rope_linear_factor, b.rope_linear_factor);
}

nlohmann::json base(const char* type) {
    return {
        {"model_type", type},      {"num_hidden_layers", 2},   {"hidden_size", 64},
        {"intermediate_size", 96}, {"num_attention_heads", 4}, {"num_key_value_heads", 2},
        {"head_dim", 16},          {"vocab_size", 100},        {"max_position_embeddings", 256}};
}

}  // namespace

TEST(ModelConfig, Transformers5RopeParametersLayout) {
    // llama3 scaling, theta 500000.
    auto v4 = base("llama");
    v4["rope_theta"] = 500000.0;
    v4["rope_scaling"] = {{"rope_type", "llama3"},
                          {"factor", 8.0},
                          {"low_freq_factor", 1.0},
                          {"high_freq_factor", 4.0},
                          {"original_max_position_embeddings", 64}};
    auto v5 = base("llama");
    v5["rope_parameters"] = v4["rope_scaling"];
    v5["rope_parameters"]["rope_theta"] = 500000.0;
    const auto a = config_from_hf_json(v4, "v4"), b = config_from_hf_json(v5, "v5");
    EXPECT_EQ(b.rope_theta, 500000.0f);
    expect_same_rope(a, b);
    // No scaling: rope_type default.
    auto q4 = base("qwen3");
    q4["rope_theta"] = 1000000.0;
    auto q5 = base("qwen3");
    q5["rope_parameters"] = {{"rope_theta", 1000000.0}, {"rope_type", "default"}};
    expect_same_rope(config_from_hf_json(q4, "q4"), config_from_hf_json(q5, "q5"));
    // GLM-4 MoE: partial_rotary_factor inside rope_parameters (0.25, not the 4.x default 0.5).
    auto g4 = base("glm4_moe");
    for (auto* g : {&g4}) {
        (*g)["n_routed_experts"] = 8;
        (*g)["num_experts_per_tok"] = 2;
        (*g)["moe_intermediate_size"] = 32;
    }
    auto g5 = g4;
    g4["rope_theta"] = 10000.0;
    g4["partial_rotary_factor"] = 0.25;
    g5["rope_parameters"] = {
        {"rope_theta", 10000.0}, {"rope_type", "default"}, {"partial_rotary_factor", 0.25}};
    const auto ga = config_from_hf_json(g4, "g4"), gb = config_from_hf_json(g5, "g5");
    EXPECT_EQ(gb.rope_dim, 4);
    expect_same_rope(ga, gb);
    // DeepSeek-V3 YaRN with mscale / mscale_all_dim.
    auto d4 = base("deepseek_v3");
    d4["kv_lora_rank"] = 32;
    d4["qk_nope_head_dim"] = 16;
    d4["qk_rope_head_dim"] = 8;
    d4["v_head_dim"] = 16;
    d4["n_routed_experts"] = 8;
    d4["num_experts_per_tok"] = 2;
    d4["moe_intermediate_size"] = 32;
    auto d5 = d4;
    d4["rope_theta"] = 50000.0;
    d4["rope_scaling"] = {
        {"rope_type", "yarn"}, {"factor", 4.0},         {"original_max_position_embeddings", 64},
        {"mscale", 1.0},       {"mscale_all_dim", 1.0}, {"beta_fast", 32.0},
        {"beta_slow", 1.0}};
    d5["rope_parameters"] = d4["rope_scaling"];
    d5["rope_parameters"]["rope_theta"] = 50000.0;
    const auto da = config_from_hf_json(d4, "d4"), db = config_from_hf_json(d5, "d5");
    EXPECT_NE(db.attn_scale_factor, 1.0f);
    expect_same_rope(da, db);
    // Qwen3-MoE: transformers 5 writes num_local_experts.
    auto m5 = base("qwen3_moe");
    m5["rope_parameters"] = {{"rope_theta", 10000.0}, {"rope_type", "default"}};
    m5["num_local_experts"] = 8;
    m5["num_experts_per_tok"] = 2;
    m5["moe_intermediate_size"] = 32;
    EXPECT_EQ(config_from_hf_json(m5, "m5").moe.n_experts, 8);
}

TEST(ModelConfig, MissingOrAmbiguousRopeSettingsAreErrors) {
    auto j = base("llama");
    EXPECT_NE(error_of(j).find("rope_theta"), std::string::npos);  // neither layout: no guess
    j["rope_parameters"] = {{"full_attention", {{"rope_theta", 10000.0}}}};
    EXPECT_NE(error_of(j).find("per-layer-type"), std::string::npos);
    j["rope_parameters"] = {{"rope_type", "default"}};
    EXPECT_NE(error_of(j).find("rope_theta"), std::string::npos);
    j["rope_parameters"] = {{"rope_theta", 10000.0}, {"rope_type", "default"}};
    EXPECT_EQ(error_of(j), "");
    j["rope_theta"] = 20000.0;
    EXPECT_NE(error_of(j).find("differ"), std::string::npos);
    j["rope_theta"] = 10000.0;
    EXPECT_EQ(error_of(j), "");
    j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
    EXPECT_NE(error_of(j).find("disagrees"), std::string::npos);
    j["rope_parameters"] = {{"rope_theta", 10000.0}, {"rope_type", "bogus"}};
    j.erase("rope_scaling");
    EXPECT_NE(error_of(j).find("unsupported rope_scaling type 'bogus'"), std::string::npos);
    auto g = base("glm4_moe");
    g["rope_theta"] = 10000.0;
    g["n_routed_experts"] = 8;
    g["num_experts_per_tok"] = 2;
    g["moe_intermediate_size"] = 32;
    EXPECT_NE(error_of(g).find("partial_rotary_factor"), std::string::npos);
    auto m = base("qwen3_moe");
    m["rope_theta"] = 10000.0;
    m["num_experts_per_tok"] = 2;
    m["moe_intermediate_size"] = 32;
    EXPECT_NE(error_of(m).find("num_local_experts"), std::string::npos);
    m["num_experts"] = 8;
    m["num_local_experts"] = 4;
    EXPECT_NE(error_of(m).find("different values"), std::string::npos);
}
