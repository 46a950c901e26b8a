// The integrity contract under load: many sequences share one page pool while the fault
// injector breaks ownership rules between and during steps. Every fault must be caught, only
// the sequences hit may end, and every other sequence must produce exactly (bit for bit) the
// tokens it produces in a fault-free run.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "engine/batch_runner.h"
#include "model/model.h"
#include "test_paths.h"

using namespace warden;

namespace {

struct Fixture {
    util::ThreadPool pool{2};
    std::unique_ptr<model::Model> model;
    std::unique_ptr<model::Transformer> tf;

    explicit Fixture(model::RuntimeDType dtype = model::RuntimeDType::BF16) {
        model::LoadOptions lo;
        lo.dtype = dtype;
        lo.load_tokenizer = false;
        model = model::load_model(test::golden_model("tiny-llama"), lo, pool);
        tf = std::make_unique<model::Transformer>(*model, pool);
    }

    kv::KvCacheConfig kv_config(int32_t page_size, int64_t pages) const {
        kv::KvCacheConfig c;
        c.n_layers = model->config.n_layers;
        c.n_kv_heads = model->config.n_kv_heads;
        c.head_dim = model->config.head_dim;
        c.type = kernels::KvType::BF16;
        c.page_size = page_size;
        kernels::PagedKvStorage s;
        s.type = c.type;
        s.page_size = page_size;
        s.n_layers = c.n_layers;
        s.n_kv_heads = c.n_kv_heads;
        s.head_dim = c.head_dim;
        c.budget_bytes = (pages + 1) * s.bytes_per_page();
        return c;
    }
};

std::vector<engine::Request> make_requests(int n, uint64_t seed, int64_t vocab) {
    std::mt19937_64 rng(seed);
    std::vector<engine::Request> reqs(static_cast<size_t>(n));
    for (auto& r : reqs) {
        const int len = 2 + static_cast<int>(rng() % 30);
        for (int i = 0; i < len; ++i) r.prompt.push_back(static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab)));
        r.max_new_tokens = 3 + static_cast<int64_t>(rng() % 10);
        r.sampling.temperature = 0.0f;
    }
    return reqs;
}

bool model_present() { return std::filesystem::exists(test::golden_model("tiny-llama") + "/config.json"); }

}  // namespace

TEST(KvIntegrity, FaultsAreDetectedAndOnlyVictimsAbort) {
    if (!model_present()) GTEST_SKIP() << "tests/golden/models/tiny-llama missing";
    Fixture f;
    const auto reqs = make_requests(160, 42, f.model->config.vocab_size);

    auto run = [&](const std::string& spec, kv::IntegrityMode mode, int32_t page_size, engine::RunnerStats* st,
                   kv::FaultInjector** fi_out, std::unique_ptr<kv::FaultInjector>& holder) {
        kv::KvCache cache(f.kv_config(page_size, 96));
        engine::Executor exec(*f.tf, cache, mode);
        holder = spec.empty() ? nullptr : std::make_unique<kv::FaultInjector>(kv::FaultSpec::parse(spec));
        if (fi_out) *fi_out = holder.get();
        engine::RunnerOptions ro;
        ro.max_seqs = 24;
        ro.max_batch_tokens = 128;
        ro.prefill_chunk = 16;
        engine::BatchRunner runner(exec, cache, ro, holder.get());
        auto res = runner.run(reqs);
        EXPECT_EQ(cache.pool().used_pages(), 0) << "pages leaked";
        EXPECT_EQ(cache.pool().check_integrity(), "");
        if (st) *st = runner.stats();
        return res;
    };

    std::unique_ptr<kv::FaultInjector> none;
    const auto clean = run("", kv::IntegrityMode::Step, 16, nullptr, nullptr, none);
    for (const auto& r : clean) ASSERT_EQ(r.finish, engine::FinishReason::Length);

    for (auto mode : {kv::IntegrityMode::Step, kv::IntegrityMode::Layer}) {
        std::unique_ptr<kv::FaultInjector> holder;
        kv::FaultInjector* fi = nullptr;
        engine::RunnerStats st;
        const auto faulty = run("all=0.04,seed=9", mode, 16, &st, &fi, holder);
        int64_t victims = 0;
        for (size_t i = 0; i < reqs.size(); ++i) {
            if (faulty[i].fault_target) {
                ++victims;
                EXPECT_TRUE(faulty[i].finish == engine::FinishReason::IntegrityError ||
                            faulty[i].finish == engine::FinishReason::Cancelled)
                    << "request " << i << " was hit but finished " << engine::finish_reason_name(faulty[i].finish);
            } else {
                EXPECT_EQ(faulty[i].finish, clean[i].finish) << "request " << i;
                EXPECT_EQ(faulty[i].output, clean[i].output) << "request " << i << " changed by someone else's fault";
            }
        }
        EXPECT_GT(victims, 10);
        EXPECT_GT(fi->total_injected(), 10);
    }
}
