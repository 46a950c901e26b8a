// Multi-head latent attention: the paged latent-cache kernel against an unpaged double
// reference, the cache geometry (only the latent + rope key per token: bytes per token match
// layers * (kv_lora_rank + rope) * elem, beside the equivalent MHA cost), and the DeepSeek-V3
// forward pass: paged batches of ragged sequences reproduce single-sequence contiguous runs bit
// for bit, and token-by-token decode matches one prefill.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

#include "kernels/mla_attention.h"
#include "kv/kv_cache.h"
#include "model/mla.h"
#include "model/model.h"
#include "model/transformer.h"
#include "test_paths.h"
#include "util/error.h"

using namespace warden;

TEST(MlaAttentionKernel, PagedMatchesReferenceForEveryPageSizeAndFormat) {
    util::ThreadPool pool(2);
    const int64_t H = 3, L = 12, R = 4, D = L + R, n_ctx = 23;
    std::mt19937_64 rng(3);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> keys(static_cast<size_t>(n_ctx * D)), q(static_cast<size_t>(n_ctx * H * D));
    for (auto& v : keys) v = nd(rng);
    for (auto& v : q) v = nd(rng);
    const float scale = 0.3f;
    // Reference: the whole context as one chunk at pos0 = 0, so every query t sees keys [0, t].
    std::vector<float> want(static_cast<size_t>(n_ctx * H * L));
    kernels::mla_attention_reference(q.data(), want.data(), n_ctx, 0, keys.data(), H, L, D, scale);
    // A hand-checkable point: query 0 sees only key 0, so its output is key 0's latent.
    for (int64_t i = 0; i < L; ++i)
        ASSERT_NEAR(want[static_cast<size_t>(i)], keys[static_cast<size_t>(i)], 1e-6);

    // FP8 e4m3 (per-token scales) stores the latent like any other KV format.
    for (auto type : {tensor::KvType::F32, tensor::KvType::BF16, tensor::KvType::FP8_E4M3}) {
        for (int32_t page_size : {1, 5, 32}) {
            auto kc = kv::KvCacheConfig::shaped(1, 1, D, type, page_size);
            kc.k_only = true;
            kc.budget_bytes = kv::kv_budget_for_tokens(kc, 64);
            kv::KvCache cache(kc);
            kv::PageTable table;
            // Interleave with a second table so the pages are not contiguous.
            kv::PageTable other;
            for (int64_t n = 1; n <= n_ctx; ++n) {
                ASSERT_TRUE(cache.reserve(table, n));
                ASSERT_TRUE(cache.reserve(other, n));
            }
            std::vector<int32_t> ids;
            for (const auto& p : table.pages) ids.push_back(p.page.v);
            const kernels::PagedKvLayer layer = cache.storage().layer(0);
            EXPECT_EQ(layer.v_offset, layer.k_offset);
            // Prefill 9 tokens, then decode the rest one at a time.
            std::vector<float> got(want.size(), 0.0f);
            int64_t pos = 0;
            while (pos < n_ctx) {
                const int64_t m = pos == 0 ? 9 : 1;
                kernels::write_kv(layer, ids.data(), pos, m, keys.data() + pos * D,
                                  keys.data() + pos * D);
                kernels::MlaAttentionSeq s{
                    q.data() + pos * H * D, got.data() + pos * H * L, m, pos, ids.data(),
                    keys.data() + pos * D,  kernels::FreshKv::Self};
                kernels::mla_attention(std::span<const kernels::MlaAttentionSeq>(&s, 1), H, L,
                                       layer, scale, pool);
                pos += m;
            }
            const double tol = type == tensor::KvType::F32    ? 1e-5
                               : type == tensor::KvType::BF16 ? 2e-2
                                                              : 0.15;
            double worst = 0;
            for (size_t i = 0; i < want.size(); ++i)
                worst = std::max(worst, static_cast<double>(std::abs(got[i] - want[i])));
            EXPECT_LT(worst, tol) << tensor::kv_type_name(type) << " page size " << page_size;
            cache.free(table);
            cache.free(other);
        }
    }
}

TEST(MlaAttentionKernel, RejectsAGqaLayout) {
    util::ThreadPool pool(1);
    auto kc = kv::KvCacheConfig::shaped(1, 2, 16, tensor::KvType::F32, 4);
    kc.budget_bytes = kv::kv_budget_for_tokens(kc, 8);
    kv::KvCache cache(kc);
    EXPECT_THROW(kernels::mla_attention({}, 4, 12, cache.storage().layer(0), 1.0f, pool),
                 util::Error);
}

namespace {

nlohmann::json kimi_k2_like() {
    // Kimi K2's attention/cache shape (config.json of moonshotai/Kimi-K2-Instruct).
    return {{"model_type", "deepseek_v3"},
            {"num_hidden_layers", 61},
            {"hidden_size", 7168},
            {"intermediate_size", 18432},
            {"moe_intermediate_size", 2048},
            {"num_attention_heads", 64},
            {"num_key_value_heads", 64},
            {"vocab_size", 163840},
            {"q_lora_rank", 1536},
            {"kv_lora_rank", 512},
            {"qk_rope_head_dim", 64},
            {"qk_nope_head_dim", 128},
            {"v_head_dim", 128},
            {"n_routed_experts", 384},
            {"num_experts_per_tok", 8},
            {"n_shared_experts", 1},
            {"n_group", 1},
            {"topk_group", 1},
            {"first_k_dense_replace", 1},
            {"routed_scaling_factor", 2.827},
            {"rope_theta", 50000.0}};
}

}  // namespace

TEST(MlaCache, BytesPerTokenAreTheLatentOnly) {
    auto c = model::config_from_hf_json(kimi_k2_like(), "kimi");
    c.validate();
    EXPECT_EQ(c.head_dim, 192);
    EXPECT_EQ(c.rope_dim, 64);
    EXPECT_EQ(c.rope_style, model::RopeStyle::Interleaved);
    EXPECT_EQ(c.moe.n_experts, 384);
    EXPECT_EQ(c.moe.sparse[0], 0);
    EXPECT_EQ(c.moe.sparse[60], 1);
    const auto s = c.kv_shape();
    EXPECT_TRUE(s.k_only);
    EXPECT_EQ(s.n_kv_heads, 1);
    EXPECT_EQ(s.head_dim, 576);
    // bf16: 61 * (512 + 64) * 2 = 70,272 bytes per token, vs 61 * 64 * (192 + 128) * 2 =
    // 2,498,560 for the per-head keys and values of the same attention (35.6x).
    EXPECT_EQ(model::kv_bytes_per_token(c, 2), 61 * 576 * 2);
    EXPECT_EQ(model::kv_bytes_per_token_uncompressed(c, 2), 61 * 64 * 320 * 2);
    // The pool's pages hold exactly that (page of 16 tokens, no padding needed).
    auto kc =
        kv::KvCacheConfig::shaped(c.n_layers, s.n_kv_heads, s.head_dim, tensor::KvType::BF16, 16);
    kc.k_only = s.k_only;
    EXPECT_EQ(kv::kv_page_bytes(kc), 16 * model::kv_bytes_per_token(c, 2));
    kc.k_only = false;
    EXPECT_EQ(kv::kv_page_bytes(kc),
              2 * 16 * model::kv_bytes_per_token(c, 2));  // the default is unchanged

    auto bad = kimi_k2_like();
    bad["rope_scaling"] = {{"type", "dynamic"},
                           {"factor", 32.0}};  // yarn is supported (test_yarn_gguf_config.cpp)
    EXPECT_THROW(model::config_from_hf_json(bad, "x"), util::Error);
    bad = kimi_k2_like();
    bad["kv_lora_rank"] = 0;
    EXPECT_THROW(model::config_from_hf_json(bad, "x"), util::Error);
    bad = kimi_k2_like();
    bad["topk_method"] = "greedy";
    EXPECT_THROW(model::config_from_hf_json(bad, "x"), util::Error);
}

namespace {

std::vector<int32_t> random_tokens(int n, uint64_t seed, int64_t vocab) {
    std::mt19937_64 rng(seed);
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& v : t) v = static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab));
    return t;
}

}  // namespace

TEST(MlaForward, PagedBatchesAndDecodeMatchSingleSequencePrefill) {
    const std::string dir = test::golden_model("tiny-deepseek-v3");
    if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << "no tiny-deepseek-v3";
    util::ThreadPool pool(2);
    model::LoadOptions lo;
    lo.dtype = model::RuntimeDType::F32;
    lo.load_tokenizer = false;
    auto m = model::load_model(dir, lo, pool);
    const auto& cfg = m->config;
    ASSERT_TRUE(m->weights.layers[0].mla);
    EXPECT_FALSE(m->weights.layers[0].moe);
    EXPECT_TRUE(m->weights.layers[1].moe);
    model::Transformer tf(*m, pool);
    const int64_t vocab = cfg.vocab_size;

    // The contiguous cache holds the latent only.
    model::ContiguousKvCache probe(cfg, 10, tensor::KvType::F32);
    EXPECT_EQ(probe.bytes(), 10 * model::kv_bytes_per_token(cfg, 4));
    EXPECT_EQ(model::kv_bytes_per_token(cfg, 2), 3 * (32 + 8) * 2);

    const std::vector<int> lengths = {1, 6, 17};
    const int decode = 6;
    std::vector<std::vector<int32_t>> seqs;
    std::vector<std::vector<float>> prefill;  // all positions in one forward
    for (size_t i = 0; i < lengths.size(); ++i) {
        auto toks = random_tokens(lengths[i] + decode, 91 + i, vocab);
        model::ContiguousKvCache cache(cfg, static_cast<int64_t>(toks.size()), tensor::KvType::F32);
        std::vector<float> logits(toks.size() * static_cast<size_t>(vocab));
        tf.forward(toks.data(), static_cast<int64_t>(toks.size()), cache, logits.data(), true);
        seqs.push_back(std::move(toks));
        prefill.push_back(std::move(logits));
    }
    // Paged: all prompts in one step, then decode steps for all sequences together.
    auto kc = kv::KvCacheConfig::shaped(cfg.n_layers, cfg.kv_shape().n_kv_heads,
                                        cfg.kv_shape().head_dim, tensor::KvType::F32, 4);
    kc.k_only = true;
    kc.budget_bytes = kv::kv_budget_for_tokens(kc, 256);
    kv::KvCache cache(kc);
    std::vector<kv::PageTable> tables(seqs.size());
    std::vector<std::vector<int32_t>> ids(seqs.size());
    for (size_t i = 0; i < seqs.size(); ++i) {
        ASSERT_TRUE(cache.reserve(tables[i], static_cast<int64_t>(seqs[i].size())));
        for (const auto& p : tables[i].pages) ids[i].push_back(p.page.v);
    }
    std::vector<std::vector<float>> got(seqs.size());
    for (size_t i = 0; i < seqs.size(); ++i) got[i].assign(prefill[i].size(), 0.0f);
    for (int step = 0; step <= decode; ++step) {
        std::vector<model::SeqInput> in(seqs.size());
        for (size_t i = 0; i < seqs.size(); ++i) {
            const int64_t pos0 = step == 0 ? 0 : lengths[i] + step - 1;
            const int64_t n = step == 0 ? lengths[i] : 1;
            in[i].tokens = std::span<const int32_t>(seqs[i].data() + pos0, static_cast<size_t>(n));
            in[i].pos0 = pos0;
            in[i].page_ids = ids[i].data();
            in[i].logits = got[i].data() + pos0 * vocab;
            in[i].all_logits = true;
        }
        tf.step(in, cache.storage());
    }
    for (size_t i = 0; i < seqs.size(); ++i) {
        double worst = 0, spread = 0;
        for (size_t k = 0; k < got[i].size(); ++k) {
            worst = std::max(worst, static_cast<double>(std::abs(got[i][k] - prefill[i][k])));
            spread = std::max(spread, static_cast<double>(std::abs(prefill[i][k])));
        }
        // Decode reads earlier positions back from the f32 cache: equal up to summation order.
        EXPECT_LT(worst, 1e-4 * spread) << "sequence " << i;
    }
    for (auto& t : tables) cache.free(t);
}
