// Paged attention must reproduce the contiguous cache exactly: same logits, bit for bit, for
// every page size, across page boundaries, for a batch of sequences of ragged lengths whose
// pages are interleaved in the pool, with every KV format (quantization is per token and kv
// head, so a sequence's stored bytes and outputs do not depend on its batch mates).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <random>

#include "kv/kv_cache.h"
#include "model/model.h"
#include "model/transformer.h"
#include "tiny_llama.h"

using namespace warden;

namespace {

using Tiny = test::TinyLlama;

std::vector<int32_t> random_tokens(int n, uint64_t seed, int64_t vocab) {
    std::mt19937_64 rng(seed);
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& v : t) v = static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab));
    return t;
}

}  // namespace

TEST(PagedAttention, MatchesContiguousCacheForRaggedBatches) {
    if (!test::tiny_llama_present()) GTEST_SKIP() << "no tiny-llama";
    using tensor::KvType;
    const std::pair<model::RuntimeDType, KvType> combos[] = {
        {model::RuntimeDType::F32, KvType::F32},
        {model::RuntimeDType::BF16, KvType::BF16},
        {model::RuntimeDType::BF16, KvType::F16},
        {model::RuntimeDType::BF16, KvType::FP8_E4M3},
        {model::RuntimeDType::BF16, KvType::FP8_E5M2},
        {model::RuntimeDType::BF16, KvType::INT8}};
    for (auto [dt, kv_type] : combos) {
        Tiny m(dt);
        const auto& cfg = m.model->config;
        const int64_t vocab = cfg.vocab_size;
        const std::vector<int> lengths = {1, 5, 16, 17, 40, 63};
        const int decode_steps = 20;

        // Reference: each sequence alone on a contiguous cache, prefill then greedy-free decode
        // of fixed tokens; logits of every position.
        std::vector<std::vector<int32_t>> seqs;
        std::vector<std::vector<float>> want;
        for (size_t i = 0; i < lengths.size(); ++i) {
            auto toks = random_tokens(lengths[i] + decode_steps, 77 + i, vocab);
            model::ContiguousKvCache cache(cfg, static_cast<int64_t>(toks.size()), kv_type);
            std::vector<float> logits(toks.size() * static_cast<size_t>(vocab));
            m.tf->forward(toks.data(), lengths[i], cache, logits.data(), true);
            for (size_t t = static_cast<size_t>(lengths[i]); t < toks.size(); ++t)
                m.tf->forward(&toks[t], 1, cache, logits.data() + t * static_cast<size_t>(vocab),
                              true);
            seqs.push_back(std::move(toks));
            want.push_back(std::move(logits));
        }

        for (int32_t page_size : {1, 3, 16, 64}) {
            auto kc = kv::KvCacheConfig::shaped(cfg.n_layers, cfg.n_kv_heads, cfg.head_dim, kv_type,
                                                page_size);
            kc.budget_bytes = kv::kv_budget_for_tokens(kc, 1023 * int64_t{page_size});
            kv::KvCache cache(kc);
            // Interleave page ownership: grow every table one page at a time, round-robin.
            std::vector<kv::PageTable> tables(seqs.size());
            bool grew = true;
            while (grew) {
                grew = false;
                for (size_t i = 0; i < seqs.size(); ++i) {
                    const int64_t have = tables[i].capacity(page_size);
                    if (have < static_cast<int64_t>(seqs[i].size())) {
                        ASSERT_TRUE(cache.reserve(tables[i], have + 1));
                        grew = true;
                    }
                }
            }
            std::vector<std::vector<int32_t>> ids(seqs.size());
            for (size_t i = 0; i < seqs.size(); ++i)
                for (const auto& p : tables[i].pages) ids[i].push_back(p.page.v);
            std::vector<std::vector<float>> got(seqs.size());
            for (size_t i = 0; i < seqs.size(); ++i) got[i].assign(want[i].size(), 0.0f);

            // Step 0: every prompt in one batch; then decode steps, all sequences together.
            auto run_step = [&](int step) {
                std::vector<model::SeqInput> in(seqs.size());
                for (size_t i = 0; i < seqs.size(); ++i) {
                    const int64_t pos0 = step == 0 ? 0 : lengths[i] + step - 1;
                    const int64_t n = step == 0 ? lengths[i] : 1;
                    in[i].tokens =
                        std::span<const int32_t>(seqs[i].data() + pos0, static_cast<size_t>(n));
                    in[i].pos0 = pos0;
                    in[i].page_ids = ids[i].data();
                    in[i].logits = got[i].data() + pos0 * vocab;
                    in[i].all_logits = true;
                }
                m.tf->step(in, cache.storage());
            };
            for (int step = 0; step <= decode_steps; ++step) run_step(step);
            for (size_t i = 0; i < seqs.size(); ++i)
                ASSERT_EQ(
                    0, std::memcmp(got[i].data(), want[i].data(), want[i].size() * sizeof(float)))
                    << "sequence " << i << " (length " << lengths[i] << ") differs with page size "
                    << page_size << " kv " << tensor::kv_type_name(kv_type);
            for (auto& t : tables) cache.free(t);
            EXPECT_EQ(cache.pool().used_pages(), 0);
        }
    }
}
