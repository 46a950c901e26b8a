// The serving engine over the incremental scheduler core: requests submitted from many threads
// give exactly the tokens Scheduler::run gives for the same requests; cancellation (a message
// to the scheduler thread) frees pages; the bounded queue refuses when full.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <random>
#include <thread>

#include "engine/engine.h"
#include "model/model.h"
#include "model/transformer.h"
#include "tiny_llama.h"
#include "util/error.h"
#include "util/huge_page_arena.h"

using namespace warden;

namespace {

// Page size 4: short prompts still span several pages.
struct EngineFixture : test::TinyLlama {
    kv::KvCacheConfig kv_config(int64_t pages) const { return TinyLlama::kv_config(4, pages); }
};

bool model_present() {
    return test::tiny_llama_present();
}

std::vector<engine::Request> requests(int n, int64_t vocab) {
    std::mt19937_64 rng(9);
    std::vector<engine::Request> reqs(static_cast<size_t>(n));
    for (auto& r : reqs) {
        const int len = 2 + static_cast<int>(rng() % 20);
        for (int i = 0; i < len; ++i)
            r.prompt.push_back(static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab)));
        r.max_new_tokens = 2 + static_cast<int64_t>(rng() % 8);
        r.sampling.temperature = (rng() % 2) ? 0.0f : 0.9f;
        r.sampling.seed = rng();
        r.sampling.frequency_penalty = (rng() % 3) ? 0.0f : 0.7f;
        r.top_logprobs = 2;
    }
    return reqs;
}

std::vector<int32_t> drain(engine::Stream& s, engine::Result* out = nullptr) {
    std::vector<int32_t> toks;
    engine::Event ev;
    for (;;) {
        EXPECT_TRUE(s.next(ev, std::chrono::seconds(120)));
        if (ev.kind == engine::Event::Kind::Finish) {
            EXPECT_EQ(ev.result.output, toks);
            if (out) *out = ev.result;
            return toks;
        }
        EXPECT_EQ(ev.token.logprobs.top.size(), 2u);
        EXPECT_LE(ev.token.logprobs.logprob, ev.token.logprobs.top[0].second + 1e-6f);
        toks.push_back(ev.token.token);
    }
}

}  // namespace

TEST(Engine, ConcurrentSubmitsMatchBatchRun) {
    if (!model_present()) GTEST_SKIP() << "tests/golden/models/tiny-llama missing";
    EngineFixture f;
    const auto reqs = requests(24, f.model->config.vocab_size);
    std::vector<engine::Result> ref;
    {
        kv::KvCache cache(f.kv_config(256));
        engine::Executor exec(*f.tf, cache, kv::IntegrityMode::Step);
        engine::SchedulerOptions ro;
        ro.max_seqs = 1;  // one at a time: the reference has no batching at all
        engine::Scheduler runner(exec, cache, ro);
        ref = runner.run(reqs);
    }
    // A small pool (preemption) and concurrent submitters.
    kv::KvCache cache(f.kv_config(24));
    engine::Executor exec(*f.tf, cache, kv::IntegrityMode::Step);
    engine::EngineConfig cfg;
    cfg.scheduler.max_seqs = 16;
    cfg.scheduler.max_batch_tokens = 32;
    cfg.scheduler.prefill_chunk = 8;
    engine::Engine eng(exec, cache, cfg);
    std::vector<std::vector<int32_t>> got(reqs.size());
    std::vector<std::thread> th;
    for (size_t t = 0; t < 4; ++t)
        th.emplace_back([&, t] {
            for (size_t i = t; i < reqs.size(); i += 4) {
                auto sub = eng.submit(reqs[i]);
                ASSERT_EQ(sub.status, engine::SubmitStatus::Ok);
                engine::Result r;
                got[i] = drain(*sub.stream, &r);
                EXPECT_GE(r.timing.total_ms, r.timing.ttft_ms);
            }
        });
    for (auto& t : th) t.join();
    for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(got[i], ref[i].output) << "request " << i;
    EXPECT_TRUE(eng.wait_idle(std::chrono::seconds(10)));
    EXPECT_EQ(eng.metrics().gauges().kv_pages_used, 0);
}

TEST(Engine, CancelFreesPagesAndQueueIsBounded) {
    if (!model_present()) GTEST_SKIP() << "tests/golden/models/tiny-llama missing";
    EngineFixture f;
    kv::KvCache cache(f.kv_config(64));
    engine::Executor exec(*f.tf, cache, kv::IntegrityMode::Step);
    engine::EngineConfig cfg;
    cfg.scheduler.max_seqs = 1;
    cfg.max_queue = 2;
    engine::Engine eng(exec, cache, cfg);
    engine::Request long_req;
    long_req.prompt = {1, 2, 3, 4, 5};
    long_req.max_new_tokens = 200;
    long_req.sampling.temperature = 0;
    std::vector<std::shared_ptr<engine::Stream>> streams;
    int refused = 0;
    for (int i = 0; i < 8; ++i) {
        auto sub = eng.submit(long_req);
        if (sub.status == engine::SubmitStatus::QueueFull)
            ++refused;
        else
            streams.push_back(sub.stream);
    }
    EXPECT_GT(refused, 0);
    EXPECT_GE(streams.size(), 2u);
    for (auto& s : streams) s->cancel();
    for (auto& s : streams) {
        engine::Event ev;
        do {
            ASSERT_TRUE(s->next(ev, std::chrono::seconds(60)));
        } while (ev.kind != engine::Event::Kind::Finish);
        EXPECT_EQ(ev.result.finish, engine::FinishReason::Cancelled);
        EXPECT_LT(ev.result.output.size(), 200u);
    }
    EXPECT_TRUE(eng.wait_idle(std::chrono::seconds(10)));
    EXPECT_EQ(cache.pool().used_pages(), 0);
    EXPECT_EQ(cache.pool().check_integrity(), "");
    eng.begin_drain();
    EXPECT_EQ(eng.submit(long_req).status, engine::SubmitStatus::Draining);
}

// A prompt token without an embedding row (a tokenizer larger than the model's vocabulary) is
// refused as that request's error, naming the id; the request decoding beside it runs on to its
// length (inside a step the lookup would fail every sequence of the batch).
TEST(Engine, AnOutOfVocabularyPromptIsItsOwnErrorNotTheBatchs) {
    if (!model_present()) GTEST_SKIP() << "tests/golden/models/tiny-llama missing";
    EngineFixture f;
    const auto vocab = static_cast<int32_t>(f.model->config.vocab_size);
    kv::KvCache cache(f.kv_config(64));
    engine::Executor exec(*f.tf, cache, kv::IntegrityMode::Step);
    engine::Engine eng(exec, cache, engine::EngineConfig{});
    engine::Request good;
    good.prompt = {1, 2, 3, 4, 5};
    good.max_new_tokens = 24;
    good.sampling.temperature = 0;
    good.top_logprobs = 2;
    auto g = eng.submit(good);
    ASSERT_EQ(g.status, engine::SubmitStatus::Ok);
    engine::Event ev;
    ASSERT_TRUE(g.stream->next(ev, std::chrono::seconds(60)));  // decoding
    ASSERT_EQ(ev.kind, engine::Event::Kind::Token);
    for (const int32_t id : {vocab, vocab + 100, -1}) {
        engine::Request bad = good;
        bad.prompt = {1, 2, id, 4};
        auto b = eng.submit(bad);
        ASSERT_EQ(b.status, engine::SubmitStatus::Ok);
        do {
            ASSERT_TRUE(b.stream->next(ev, std::chrono::seconds(60)));
        } while (ev.kind != engine::Event::Kind::Finish);
        EXPECT_EQ(ev.result.finish, engine::FinishReason::Rejected);
        EXPECT_NE(
            ev.result.error.find("token id " + std::to_string(id) +
                                 ", outside the model's vocabulary of " + std::to_string(vocab)),
            std::string::npos)
            << ev.result.error;
    }
    do {
        ASSERT_TRUE(g.stream->next(ev, std::chrono::seconds(60)));
    } while (ev.kind != engine::Event::Kind::Finish);
    EXPECT_EQ(ev.result.finish, engine::FinishReason::Length) << ev.result.error;
    EXPECT_EQ(ev.result.output.size(), 24u);
    EXPECT_TRUE(eng.wait_idle(std::chrono::seconds(10)));
    EXPECT_EQ(cache.pool().used_pages(), 0);
}

// Admission by expected length (SchedulerOptions::reserve_outputs): on a pool small enough that the
// default policy preempts, reserving every running request's prompt + max_new_tokens never
// preempts, still batches, and gives exactly the same tokens.
TEST(Engine, ReserveAdmissionNeverPreemptsAndKeepsOutputs) {
    if (!model_present()) GTEST_SKIP() << "tests/golden/models/tiny-llama missing";
    EngineFixture f;
    auto reqs = requests(24, f.model->config.vocab_size);
    for (size_t i = 0; i < reqs.size(); ++i)
        reqs[i].max_new_tokens = 6 + static_cast<int64_t>(i % 5) * 3;
    auto run = [&](int64_t pages, int64_t max_seqs, bool reserve, engine::SchedulerStats& st) {
        kv::KvCache cache(f.kv_config(pages));
        engine::Executor exec(*f.tf, cache, kv::IntegrityMode::Step);
        engine::SchedulerOptions ro;
        ro.max_seqs = max_seqs;
        ro.max_batch_tokens = 32;
        ro.prefill_chunk = 8;
        ro.reserve_outputs = reserve;
        engine::Scheduler runner(exec, cache, ro);
        auto out = runner.run(reqs);
        st = runner.stats();
        EXPECT_EQ(cache.pool().used_pages(), 0);
        return out;
    };
    engine::SchedulerStats s_ref, s_wm, s_res;
    const auto ref = run(256, 1, false, s_ref);
    const auto wm = run(20, 16, false, s_wm);
    const auto res = run(20, 16, true, s_res);
    for (size_t i = 0; i < reqs.size(); ++i) {
        EXPECT_EQ(wm[i].output, ref[i].output) << "watermark, request " << i;
        EXPECT_EQ(res[i].output, ref[i].output) << "reserve, request " << i;
        EXPECT_EQ(res[i].preemptions, 0) << i;
    }
    std::printf(
        "[ figures  ] 24 requests, 20 pages: watermark %lld preemptions, %lld tokens computed, "
        "%lld at once; "
        "reserve %lld preemptions, %lld tokens computed, %lld at once\n",
        static_cast<long long>(s_wm.preemptions), static_cast<long long>(s_wm.tokens_computed),
        static_cast<long long>(s_wm.max_running), static_cast<long long>(s_res.preemptions),
        static_cast<long long>(s_res.tokens_computed), static_cast<long long>(s_res.max_running));
    EXPECT_GT(s_wm.preemptions, 0)
        << "the pool must be small enough for the default policy to preempt";
    EXPECT_EQ(s_res.preemptions, 0);
    EXPECT_GT(s_res.max_running, 1) << "reserve admission must still batch";
    EXPECT_LT(s_res.max_running, s_wm.max_running) << "reserving outputs admits fewer at once";
}

// A step that throws (here the token callback, on the second token) reaches the caller of
// Scheduler::run as that error; the sequences it leaves behind are
// finished by the scheduler's destructor without writing into run's results, which are gone by
// then (AddressSanitizer checks that), and the pool gets every page back.
TEST(Engine, ARunWhoseStepThrowsLeavesTheSchedulerSafeToDestroy) {
    if (!model_present()) GTEST_SKIP() << "tests/golden/models/tiny-llama missing";
    EngineFixture f;
    kv::KvCache cache(f.kv_config(64));
    const int32_t free_before = cache.pool().free_pages();
    {
        engine::Executor exec(*f.tf, cache, kv::IntegrityMode::Step);
        engine::Scheduler runner(exec, cache, engine::SchedulerOptions{});
        int tokens = 0;
        runner.on_token([&](engine::Scheduler::Handle, const engine::TokenInfo&) {
            if (++tokens == 2) throw util::Error("a step fails");
        });
        EXPECT_THROW(runner.run(requests(3, f.model->config.vocab_size)), util::Error);
    }
    EXPECT_EQ(cache.pool().free_pages(), free_before);
    EXPECT_EQ(cache.pool().check_integrity(), "");
}

// Scheduler::run (warden run, batch) marks foreground work for as long as its requests run, so a
// KV pool's background population (util::HugePageArena::map_populating) takes no core or memory
// bandwidth from its steps, as the engine does while it has requests; and unmarks it after, also
// when a step throws.
TEST(Engine, ARunHoldsBackgroundPopulationWhileItsStepsRun) {
    if (!model_present()) GTEST_SKIP() << "tests/golden/models/tiny-llama missing";
    EngineFixture f;
    kv::KvCache cache(f.kv_config(64));
    engine::Executor exec(*f.tf, cache, kv::IntegrityMode::Step);
    engine::Scheduler runner(exec, cache, engine::SchedulerOptions{});
    ASSERT_FALSE(util::ForegroundWork::any_active());
    int tokens = 0, seen_active = 0;
    runner.on_token([&](engine::Scheduler::Handle, const engine::TokenInfo&) {
        ++tokens;
        seen_active += util::ForegroundWork::any_active();
    });
    runner.run(requests(3, f.model->config.vocab_size));
    EXPECT_GT(tokens, 0);
    EXPECT_EQ(seen_active, tokens);
    EXPECT_FALSE(util::ForegroundWork::any_active());
    runner.on_token([&](engine::Scheduler::Handle, const engine::TokenInfo&) {
        throw util::Error("a step fails");
    });
    EXPECT_THROW(runner.run(requests(2, f.model->config.vocab_size)), util::Error);
    EXPECT_FALSE(util::ForegroundWork::any_active());
}
