#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

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
    const auto j = nlohmann::json::parse(R"({"model_type":"qwen3","num_hidden_layers":2,"hidden_size":64,
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
        "intermediate_size":128,"num_attention_heads":6,"num_key_value_heads":4,"vocab_size":100})");
    EXPECT_THROW(config_from_hf_json(j, "c").validate(), warden::util::Error);  // 6 % 4 != 0
    j = nlohmann::json::parse(R"({"model_type":"llama","num_hidden_layers":"two"})");
    EXPECT_THROW(config_from_hf_json(j, "c"), warden::util::Error);
    j = nlohmann::json::parse(R"([1,2])");
    EXPECT_THROW(config_from_hf_json(j, "c"), warden::util::Error);
}
