// Disaggregated decode in the engine (engine_remote.cpp) against a scripted prefill source:
// the page checksums are compared on the engine's verifier thread, the rest of the hand-off
// check on the scheduler thread. A payload that differs from the manifest fails the request
// closed (IntegrityError, after the configured retries) and frees every reserved page; a
// corrupt first attempt is retried on new pages; a clean transfer decodes from the sender's
// logits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <thread>

#include "engine/engine.h"
#include "tiny_llama.h"

using namespace warden;

namespace {

// Writes zero pages (valid bf16 KV) and a manifest of their checksums from its own thread, as
// a transport does; attempts listed in corrupt_attempts get one byte flipped after the
// checksums were taken (a page damaged in transit).
class ScriptedSource : public engine::PrefillSource {
  public:
    ScriptedSource(uint64_t fingerprint, int64_t vocab, int32_t first_token)
        : fingerprint_(fingerprint), vocab_(vocab), first_token_(first_token) {}
    ~ScriptedSource() override {
        for (auto& t : threads_) t.join();
    }
    std::vector<int> corrupt_attempts;

    uint64_t fingerprint() const override { return fingerprint_; }
    void fetch(uint64_t transfer_id, const std::vector<int32_t>& prompt, std::vector<uint8_t*> dest,
               size_t page_bytes, int attempt, const std::string&,
               std::function<void(engine::RemotePrefill&&)> done) override {
        const bool corrupt = std::count(corrupt_attempts.begin(), corrupt_attempts.end(), attempt);
        const auto n_tokens = static_cast<int64_t>(prompt.size());
        std::lock_guard lk(mu_);
        ++fetches_;
        threads_.emplace_back([=, this, dest = std::move(dest), done = std::move(done)] {
            engine::RemotePrefill r;
            r.ok = true;
            r.manifest.transfer_id = transfer_id;
            r.manifest.fingerprint = fingerprint_;
            r.manifest.n_tokens = n_tokens;
            for (uint8_t* p : dest) {
                std::memset(p, 0, page_bytes);
                r.manifest.checksums.push_back(kv::page_checksum(p, page_bytes));
            }
            if (corrupt) dest.back()[page_bytes / 2] ^= 0x10;
            r.logits.assign(static_cast<size_t>(vocab_), 0.0f);
            r.logits[static_cast<size_t>(first_token_)] = 10.0f;
            done(std::move(r));
        });
    }
    bool knows(const std::string&) const override { return false; }
    void cancel(uint64_t) override {}
    int fetches() {
        std::lock_guard lk(mu_);
        return fetches_;
    }

  private:
    uint64_t fingerprint_;
    int64_t vocab_;
    int32_t first_token_;
    std::mutex mu_;
    int fetches_ = 0;
    std::vector<std::thread> threads_;
};

engine::Result finish_of(engine::Stream& s, std::vector<int32_t>& tokens) {
    engine::Event ev;
    for (;;) {
        EXPECT_TRUE(s.next(ev, std::chrono::seconds(60)));
        if (ev.kind == engine::Event::Kind::Finish) return ev.result;
        tokens.push_back(ev.token.token);
    }
}

engine::Request prompt_of(int n, int64_t max_new) {
    engine::Request r;
    for (int i = 0; i < n; ++i) r.prompt.push_back(1 + i);
    r.max_new_tokens = max_new;
    r.sampling.temperature = 0;
    return r;
}

struct RemoteFixture : test::TinyLlama {
    kv::KvCache cache{kv_config(4, 64)};
    engine::Executor exec{*tf, cache, kv::IntegrityMode::Step};
    ScriptedSource src{kv::kv_layout_fingerprint(cache.config(), "scripted"), vocab(), 7};
    engine::EngineConfig config(int attempts) {
        engine::EngineConfig c;
        c.remote_prefill = &src;
        c.remote_attempts = attempts;
        return c;
    }
};

}  // namespace

TEST(RemotePrefill, VerifierFailureFailsClosedAndFreesPages) {
    if (!test::tiny_llama_present()) GTEST_SKIP() << "tests/golden/models/tiny-llama missing";
    RemoteFixture f;
    f.src.corrupt_attempts = {0, 1};
    engine::Engine eng(f.exec, f.cache, f.config(2));
    auto sub = eng.submit(prompt_of(10, 4));
    ASSERT_EQ(sub.status, engine::SubmitStatus::Ok);
    std::vector<int32_t> tokens;
    const engine::Result r = finish_of(*sub.stream, tokens);
    EXPECT_EQ(r.finish, engine::FinishReason::IntegrityError);
    EXPECT_NE(r.error.find("page checksum mismatch (page 2)"), std::string::npos) << r.error;
    EXPECT_TRUE(tokens.empty());
    EXPECT_EQ(f.src.fetches(), 2);  // retried once, on new pages
    EXPECT_TRUE(eng.wait_idle(std::chrono::seconds(10)));
    EXPECT_EQ(f.cache.pool().used_pages(), 0);
    EXPECT_EQ(f.cache.pool().check_integrity(), "");
    EXPECT_NE(eng.metrics().prometheus().find("warden_remote_prefill_total{outcome=\"refused\"} 1"),
              std::string::npos);
}

TEST(RemotePrefill, CorruptFirstAttemptIsRetriedAndCleanOnesDecode) {
    if (!test::tiny_llama_present()) GTEST_SKIP() << "tests/golden/models/tiny-llama missing";
    RemoteFixture f;
    f.src.corrupt_attempts = {0};
    engine::Engine eng(f.exec, f.cache, f.config(2));
    // Several at once: outcomes arrive while other sequences decode.
    std::vector<std::shared_ptr<engine::Stream>> streams;
    for (int i = 0; i < 4; ++i) {
        auto sub = eng.submit(prompt_of(6 + 3 * i, 5));
        ASSERT_EQ(sub.status, engine::SubmitStatus::Ok);
        streams.push_back(sub.stream);
    }
    for (auto& s : streams) {
        std::vector<int32_t> tokens;
        const engine::Result r = finish_of(*s, tokens);
        EXPECT_EQ(r.finish, engine::FinishReason::Length) << r.error;
        ASSERT_EQ(tokens.size(), 5u);
        EXPECT_EQ(tokens[0], 7);  // sampled from the sender's logits, greedily
    }
    EXPECT_EQ(f.src.fetches(), 8);  // each request: the corrupt attempt, then the clean one
    EXPECT_TRUE(eng.wait_idle(std::chrono::seconds(10)));
    EXPECT_EQ(f.cache.pool().used_pages(), 0);
    EXPECT_EQ(f.cache.pool().check_integrity(), "");
}
