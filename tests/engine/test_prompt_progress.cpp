// Prompt tokens are reported as the scheduler completes each prefill chunk (what
// warden:prompt_tokens_total counts): every chunk at most the chunk size, the whole prompt
// reported by the request's first token, and never again when a preempted sequence recomputes
// its prompt.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "engine/executor.h"
#include "engine/scheduler.h"
#include "tiny_llama.h"

using namespace warden;

TEST(PromptProgress, ReportedPerChunkOnceEachAndCompleteAtFirstToken) {
    if (!test::tiny_llama_present()) GTEST_SKIP() << "tests/golden/models/tiny-llama missing";
    test::TinyLlama f;
    std::mt19937_64 rng(5);
    std::vector<engine::Request> reqs(12);
    for (auto& r : reqs) {
        const int len = 20 + static_cast<int>(rng() % 30);
        for (int i = 0; i < len; ++i)
            r.prompt.push_back(static_cast<int32_t>(rng() % static_cast<uint64_t>(f.vocab())));
        r.max_new_tokens = 6 + static_cast<int64_t>(rng() % 10);
        r.sampling.temperature = 0.0f;
    }
    // 24 pages of 4 tokens for 12 prompts of 20-49 tokens: the newest sequences get preempted
    // and recompute their prompts.
    kv::KvCache cache(f.kv_config(4, 24));
    engine::Executor exec(*f.tf, cache, kv::IntegrityMode::Step);
    engine::SchedulerOptions ro;
    ro.max_seqs = 12;
    ro.max_batch_tokens = 32;
    ro.prefill_chunk = 8;
    engine::Scheduler sched(exec, cache, ro);

    std::map<engine::Scheduler::Handle, int64_t> reported, at_first_token, n_prompt;
    std::map<engine::Scheduler::Handle, int> chunks;
    int64_t largest = 0;
    sched.on_prompt_tokens([&](engine::Scheduler::Handle h, int64_t n) {
        EXPECT_GT(n, 0);
        EXPECT_FALSE(at_first_token.count(h)) << "prompt reported after the first token";
        reported[h] += n;
        ++chunks[h];
        largest = std::max(largest, n);
    });
    sched.on_token([&](engine::Scheduler::Handle h, const engine::TokenInfo&) {
        if (!at_first_token.count(h)) at_first_token[h] = reported[h];
    });
    for (const auto& r : reqs) n_prompt[sched.add(r)] = static_cast<int64_t>(r.prompt.size());
    for (int i = 0; i < 10000 && !sched.idle(); ++i) sched.step();
    ASSERT_TRUE(sched.idle());

    EXPECT_GT(sched.stats().preemptions, 0) << "the pool must be small enough to preempt";
    EXPECT_LE(largest, ro.prefill_chunk);
    for (const auto& [h, n] : n_prompt) {
        ASSERT_TRUE(at_first_token.count(h)) << h;
        EXPECT_EQ(at_first_token[h], n) << "request " << h;
        EXPECT_EQ(reported[h], n) << "request " << h << ": recomputed prompt counted again";
        EXPECT_GE(chunks[h], (n + ro.prefill_chunk - 1) / ro.prefill_chunk) << h;
    }
}
