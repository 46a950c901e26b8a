// Prompt logprobs in the scheduler: requests that ask get the logprob of every prompt token
// after the first (with their first sampled token), equal to those of one whole-prompt prefill,
// whatever the chunking, batching and preemption; every request's tokens stay what they are
// without prompt logprobs (batch invariance). And the logit processors (logit_bias, min_tokens).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>

#include "engine/logit_processors.h"
#include "engine/scheduler.h"
#include "tiny_llama.h"

using namespace warden;

namespace {

std::vector<engine::Request> requests(int64_t vocab, bool with_prompt_logprobs) {
    std::mt19937_64 rng(5);
    std::vector<engine::Request> reqs(12);
    for (size_t k = 0; k < reqs.size(); ++k) {
        auto& r = reqs[k];
        const int len = 3 + static_cast<int>(rng() % 30);
        for (int i = 0; i < len; ++i)
            r.prompt.push_back(static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab)));
        r.max_new_tokens = 2 + static_cast<int64_t>(rng() % 6);
        r.sampling.temperature = 0.0f;
        if (with_prompt_logprobs && k % 2 == 0) r.prompt_logprobs = 2;
    }
    return reqs;
}

struct Outcome {
    std::vector<engine::Result> results;
    std::map<uint64_t, std::vector<engine::TokenLogprobs>> prompt_lp;  // by request index
    int64_t preemptions = 0;
};

Outcome run(const test::TinyLlama& f, const std::vector<engine::Request>& reqs, int64_t pages,
            engine::SchedulerOptions o) {
    kv::KvCache cache(f.kv_config(4, pages));
    engine::Executor exec(*f.tf, cache, kv::IntegrityMode::Step);
    engine::Scheduler s(exec, cache, o);
    Outcome out;
    s.on_token([&](engine::Scheduler::Handle h, const engine::TokenInfo& t) {
        if (!t.prompt_logprobs.empty()) {
            EXPECT_EQ(out.prompt_lp.count(h), 0u) << "prompt logprobs delivered twice";
            out.prompt_lp[h] = t.prompt_logprobs;
        }
    });
    out.results = s.run(reqs);
    out.preemptions = s.stats().preemptions;
    return out;
}

}  // namespace

TEST(PromptLogprobs, ChunkingBatchingAndPreemptionChangeNothing) {
    if (!test::tiny_llama_present()) GTEST_SKIP() << "tests/golden/models/tiny-llama missing";
    test::TinyLlama f;
    const int64_t vocab = f.model->config.vocab_size;
    engine::SchedulerOptions alone;
    alone.max_seqs = 1;
    const Outcome plain = run(f, requests(vocab, false), 256, alone);
    const Outcome ref = run(f, requests(vocab, true), 256, alone);
    engine::SchedulerOptions busy;
    busy.max_seqs = 16;
    busy.max_batch_tokens = 24;
    busy.prefill_chunk = 5;
    const auto reqs = requests(vocab, true);
    const Outcome got = run(f, reqs, 20, busy);  // a small pool: preemption
    EXPECT_GT(got.preemptions, 0);
    for (size_t i = 0; i < reqs.size(); ++i) {
        EXPECT_EQ(ref.results[i].output, plain.results[i].output) << i;
        EXPECT_EQ(got.results[i].output, plain.results[i].output) << i;
        if (reqs[i].prompt_logprobs < 0) {
            EXPECT_EQ(got.prompt_lp.count(i), 0u);
            continue;
        }
        ASSERT_EQ(ref.prompt_lp.at(i).size(), reqs[i].prompt.size() - 1) << i;
        ASSERT_EQ(got.prompt_lp.at(i).size(), reqs[i].prompt.size() - 1) << i;
        for (size_t p = 0; p < ref.prompt_lp.at(i).size(); ++p) {
            const auto& a = ref.prompt_lp.at(i)[p];
            const auto& b = got.prompt_lp.at(i)[p];
            EXPECT_NEAR(a.logprob, b.logprob, 1e-4) << i << " " << p;
            EXPECT_LE(a.logprob, 0.0f);
            ASSERT_EQ(b.top.size(), 2u);
            EXPECT_GE(b.top[0].second + 1e-6f, b.logprob);
            if (b.rank == 1) {
                EXPECT_NEAR(b.top[0].second, b.logprob, 1e-6) << i << " " << p;
            }
        }
    }
}

TEST(LogitProcessors, BiasAndMinTokens) {
    engine::Request r;
    r.stop_ids = {2, 4};
    r.logit_bias = {{1, 5.0f}, {3, -100.0f}, {99, 1.0f}};  // 99: outside the vocabulary, ignored
    r.min_tokens = 2;
    std::vector<float> l = {0, 0, 0, 0, 0};
    engine::apply_logit_processors(r, 1, l);
    EXPECT_EQ(l[0], 0.0f);
    EXPECT_EQ(l[1], 5.0f);
    EXPECT_TRUE(std::isinf(l[2]) && l[2] < 0);
    EXPECT_EQ(l[3], -100.0f);
    EXPECT_TRUE(std::isinf(l[4]) && l[4] < 0);
    std::vector<float> m = {0, 0, 0, 0, 0};
    engine::apply_logit_processors(r, 2, m);  // min_tokens reached: stop ids allowed again
    EXPECT_EQ(m[2], 0.0f);
    EXPECT_EQ(m[4], 0.0f);
}
