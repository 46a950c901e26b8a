// The prefix cache inside the scheduler (Scheduler with set_prefix_cache), on tiny-llama:
//  - outputs with the cache on equal outputs with it off, token for token, for many requests
//    sharing prefixes of different lengths across tenants and salts, in a pool small enough
//    that cached pages are evicted and running sequences preempted;
//  - a tenant never hits another tenant's prefix, and a miss costs it exactly the same work
//    whether or not another tenant sent the same prompt (the cause of any timing signal);
//  - a cached page evicted or reused while a sequence holds it aborts that sequence only; a
//    stale cache entry is dropped at attach and the request is served from scratch.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <random>
#include <set>

#include "engine/scheduler.h"
#include "kv/prefix_cache.h"
#include "tiny_llama.h"

using namespace warden;

namespace {

constexpr int32_t kPs = 4;  // page size: short prompts still span several pages

bool model_present() {
    return test::tiny_llama_present();
}

struct Fixture : test::TinyLlama {
    kv::KvCacheConfig kv_config(int64_t pages) const { return TinyLlama::kv_config(kPs, pages); }
};

kv::PrefixCacheConfig pc_config() {
    kv::PrefixCacheConfig c;
    c.page_size = kPs;
    c.model_id = 7;
    c.copy_partial_pages = true;  // as the server runs it
    return c;
}

std::vector<int32_t> random_tokens(std::mt19937_64& rng, int n, int64_t vocab) {
    std::vector<int32_t> t;
    for (int i = 0; i < n; ++i)
        t.push_back(static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab)));
    return t;
}

// Agent-like traffic: per tenant a system prompt, a few "conversations" whose turns extend
// each other, some requests with a cache_salt, identical prompts across tenants, prompts
// shorter than a page, and one prefix declared shared by the operator.
std::vector<engine::Request> agent_requests(int64_t vocab, const std::vector<int32_t>& shared) {
    std::mt19937_64 rng(41);
    std::vector<engine::Request> out;
    const std::vector<std::string> tenants = {"acme", "globex", "initech"};
    const auto common = random_tokens(rng, 13, vocab);  // the same text sent by every tenant
    for (int round = 0; round < 3; ++round)
        for (size_t t = 0; t < tenants.size(); ++t) {
            std::mt19937_64 trng(100 + t);  // a tenant's own prefixes are the same every round
            const auto system = random_tokens(trng, 5 + 7 * static_cast<int>(t), vocab);
            std::vector<int32_t> history = system;
            for (int turn = 0; turn < 3; ++turn) {
                const auto more = random_tokens(trng, 3 + 5 * turn, vocab);
                history.insert(history.end(), more.begin(), more.end());
                engine::Request r;
                r.tenant = tenants[t];
                r.prompt = history;
                const auto q = random_tokens(rng, 1 + static_cast<int>(rng() % 6),
                                             vocab);  // this turn's question
                r.prompt.insert(r.prompt.end(), q.begin(), q.end());
                r.max_new_tokens = 3 + static_cast<int64_t>(rng() % 5);
                r.sampling.temperature = (rng() % 3 == 0) ? 0.8f : 0.0f;
                r.sampling.seed = rng();
                if (turn == 2 && round == 1) r.cache_salt = "user-" + std::to_string(rng() % 2);
                out.push_back(r);
            }
            engine::Request c;  // identical prompt from every tenant
            c.tenant = tenants[t];
            c.prompt = common;
            c.max_new_tokens = 4;
            out.push_back(c);
            engine::Request s;  // the operator's shared prefix plus a per-tenant question
            s.tenant = tenants[t];
            s.prompt = shared;
            const auto q = random_tokens(rng, 2 + static_cast<int>(t), vocab);
            s.prompt.insert(s.prompt.end(), q.begin(), q.end());
            s.max_new_tokens = 3;
            out.push_back(s);
            engine::Request tiny;  // shorter than a page: never cached
            tiny.tenant = tenants[t];
            tiny.prompt = random_tokens(trng, 2, vocab);
            tiny.max_new_tokens = 2;
            out.push_back(tiny);
        }
    return out;
}

struct RunOut {
    std::vector<engine::Result> results;
    engine::SchedulerStats stats;
    kv::PrefixCacheStats pc;
};

RunOut run(Fixture& f, const std::vector<engine::Request>& reqs, int64_t pages, bool cache,
           const std::vector<int32_t>& shared = {}, int64_t max_seqs = 4) {
    kv::KvCache kv(f.kv_config(pages));
    engine::Executor exec(*f.tf, kv, kv::IntegrityMode::Step);
    engine::SchedulerOptions ro;
    ro.max_seqs = max_seqs;
    ro.max_batch_tokens = 24;
    ro.prefill_chunk = 8;
    RunOut o;
    std::optional<kv::PrefixCache> pc;
    {
        engine::Scheduler runner(exec, kv, ro);
        if (cache) {
            pc.emplace(kv.pool(), pc_config());
            if (!shared.empty()) {
                EXPECT_GT(pc->declare_shared_prefix(shared), 0);
            }
            runner.set_prefix_cache(&*pc);
        }
        o.results = runner.run(reqs);
        o.stats = runner.stats();
        EXPECT_EQ(kv.pool().used_pages(), 0);
        EXPECT_EQ(kv.pool().check_integrity(), "");
        if (pc) {
            EXPECT_EQ(pc->check_integrity(), "");
            o.pc = pc->stats();
        }
    }
    return o;
}

}  // namespace

TEST(PrefixCacheRunner, OutputsWithCacheOnEqualCacheOffUnderEvictionAndPreemption) {
    if (!model_present()) GTEST_SKIP() << "tests/golden/models/tiny-llama missing";
    Fixture f;
    std::mt19937_64 rng(5);
    const auto shared = random_tokens(rng, 10, f.vocab());  // 2 full shared pages
    const auto reqs = agent_requests(f.vocab(), shared);
    // Reference: no cache, a pool that holds everything at once.
    const RunOut off = run(f, reqs, 400, false);
    for (int64_t pages : {400, 40, 24}) {  // roomy; tight (evictions); tighter (preemptions too)
        const RunOut on = run(f, reqs, pages, true, shared);
        SCOPED_TRACE("pages " + std::to_string(pages));
        for (size_t i = 0; i < reqs.size(); ++i) {
            EXPECT_EQ(on.results[i].output, off.results[i].output) << "request " << i;
            EXPECT_EQ(on.results[i].finish, off.results[i].finish) << "request " << i;
        }
        int64_t cached = 0, prompt = 0;
        for (const auto& r : on.results) {
            cached += r.cached_tokens;
            prompt += r.n_prompt;
            EXPECT_LT(r.cached_tokens, r.n_prompt);
        }
        std::printf(
            "[ runner   ] %lld pages: %zu requests, %lld/%lld prompt tokens cached, %lld pages "
            "evicted, "
            "%lld preemptions, %lld vs %lld tokens computed\n",
            static_cast<long long>(pages), reqs.size(), static_cast<long long>(cached),
            static_cast<long long>(prompt), static_cast<long long>(on.pc.evicted_pages),
            static_cast<long long>(on.stats.preemptions),
            static_cast<long long>(on.stats.tokens_computed),
            static_cast<long long>(off.stats.tokens_computed));
        // Roomy: most of the repeated history hits. Tight: evictions cost hits, but some remain.
        EXPECT_GT(cached, pages == 400 ? prompt / 5 : 0);
        EXPECT_LT(on.stats.tokens_computed, off.stats.tokens_computed);
        if (on.stats.preemptions == 0) {
            // Every token the cache served is a token the model did not compute, and no other.
            EXPECT_EQ(off.stats.tokens_computed - on.stats.tokens_computed, on.pc.hit_tokens);
        }
        if (pages <= 40) {
            EXPECT_GT(on.pc.evicted_pages, 0) << "the tight pools must force evictions";
        }
        if (pages == 24) {
            EXPECT_GT(on.stats.preemptions, 0) << "the tightest pool must also preempt";
        }
    }
}

TEST(PrefixCacheRunner, TenantsNeverHitEachOthersPrefixesAndMissesCostTheSame) {
    if (!model_present()) GTEST_SKIP() << "tests/golden/models/tiny-llama missing";
    Fixture f;
    std::mt19937_64 rng(77);
    const auto p = random_tokens(rng, 22, f.vocab());
    auto req = [&](const std::string& tenant, const std::string& salt) {
        engine::Request r;
        r.tenant = tenant;
        r.cache_salt = salt;
        r.prompt = p;
        r.max_new_tokens = 5;
        return r;
    };
    // Cost of a cold request on an empty cache: the baseline every miss must equal.
    kv::KvCache cold_kv(f.kv_config(64));
    engine::Executor cold_exec(*f.tf, cold_kv, kv::IntegrityMode::Step);
    engine::Scheduler cold(cold_exec, cold_kv, engine::SchedulerOptions{});
    kv::PrefixCache cold_pc(cold_kv.pool(), pc_config());
    cold.set_prefix_cache(&cold_pc);
    const auto cold_res = cold.run({req("bob", "")});
    const int64_t cold_tokens = cold.stats().tokens_computed, cold_steps = cold.stats().steps;

    kv::KvCache kv(f.kv_config(64));
    engine::Executor exec(*f.tf, kv, kv::IntegrityMode::Step);
    engine::Scheduler runner(exec, kv, engine::SchedulerOptions{});
    kv::PrefixCache pc(kv.pool(), pc_config());
    runner.set_prefix_cache(&pc);
    struct Case {
        std::string tenant, salt;
        int64_t expect_cached;  // 0: must miss
    };
    // Every prompt token but the last (always computed): 5 full pages + 1 token of a copied page.
    const int64_t full = static_cast<int64_t>(p.size()) - 1;
    const std::vector<Case> cases = {
        {"alice", "", 0},      // first sight
        {"bob", "", 0},        // alice's prefix is not bob's
        {"alice", "x", 0},     // a salt narrows: not alice's unsalted entries
        {"alice", "", full},   // alice hits her own
        {"bob", "", full},     // bob hits his own (from his miss above)
        {"alice", "x", full},  // the salted scope hits itself
        {"alice", "y", 0},     // another salt does not
        {"carol", "x", 0},     // the same salt under another tenant does not
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.tenant + "/" + c.salt);
        const auto hits_before = pc.stats().hit_tokens;
        const auto tokens_before = runner.stats().tokens_computed,
                   steps_before = runner.stats().steps;
        const auto res = runner.run({req(c.tenant, c.salt)});
        ASSERT_EQ(res.size(), 1u);
        EXPECT_EQ(res[0].cached_tokens, c.expect_cached);
        EXPECT_EQ(pc.stats().hit_tokens - hits_before, c.expect_cached);
        EXPECT_EQ(res[0].output, cold_res[0].output) << "a hit or miss never changes the tokens";
        if (c.expect_cached == 0) {
            // A miss does exactly the work of a cold request on an empty cache, whatever other
            // tenants have cached: the same tokens through the model in the same steps.
            EXPECT_EQ(runner.stats().tokens_computed - tokens_before, cold_tokens);
            EXPECT_EQ(runner.stats().steps - steps_before, cold_steps);
        } else {
            EXPECT_EQ(runner.stats().tokens_computed - tokens_before,
                      cold_tokens - c.expect_cached);
        }
    }
    EXPECT_EQ(pc.stats().collisions_rejected, 0);
}

// A cached page evicted (and optionally handed to a new owner) while a running sequence holds it:
// that sequence aborts with an integrity error at its next step; its batch mates finish with
// exactly their fault-free tokens; a later request whose lookup meets the stale entry drops it
// and is served from scratch (no abort, correct tokens).
TEST(PrefixCacheRunner, SharedPageFaultsAbortOnlyTheHolder) {
    if (!model_present()) GTEST_SKIP() << "tests/golden/models/tiny-llama missing";
    Fixture f;
    std::mt19937_64 rng(3);
    const auto p = random_tokens(rng, 17, f.vocab());
    auto with = [&](std::string tenant, std::vector<int32_t> head, int tail, int64_t n) {
        engine::Request r;
        r.tenant = std::move(tenant);
        r.prompt = std::move(head);
        const auto t = random_tokens(rng, tail, f.vocab());
        r.prompt.insert(r.prompt.end(), t.begin(), t.end());
        r.max_new_tokens = n;
        return r;
    };
    for (const bool reuse : {false, true}) {
        SCOPED_TRACE(reuse ? "reuse after evict" : "evict while referenced");
        const engine::Request warm = with("acme", p, 2, 1);  // 19 tokens computed: 4 full pages
        const std::vector<engine::Request> batch = {
            with("acme", p, 3, 8), with("globex", {}, 11, 8), with("initech", p, 5, 8)};
        const engine::Request late = with("acme", p, 4, 4);  // meets the stale entry
        std::vector<engine::Result> ref;
        {
            kv::KvCache kv(f.kv_config(64));
            engine::Executor exec(*f.tf, kv, kv::IntegrityMode::Step);
            engine::Scheduler r(exec, kv, engine::SchedulerOptions{});
            ref = r.run(batch);
            ref.push_back(r.run({late})[0]);
        }
        kv::KvCache kv(f.kv_config(64));
        engine::Executor exec(*f.tf, kv, kv::IntegrityMode::Step);
        engine::Scheduler runner(exec, kv, engine::SchedulerOptions{});
        kv::PrefixCache pc(kv.pool(), pc_config());
        runner.set_prefix_cache(&pc);
        (void)runner.run({warm});
        std::set<int32_t> warm_pages;  // acme's cached pages of p
        for (int32_t pg = 1; pg <= kv.pool().capacity(); ++pg)
            if (kv.pool().is_cache_held(kv::PageId{pg})) warm_pages.insert(pg);
        ASSERT_EQ(warm_pages.size(), p.size() / kPs);
        const engine::Scheduler::Handle victim = 1;  // batch[0]: handles count from 0 (warm)
        std::optional<kv::PageRef> reused;
        int32_t broken = 0;
        runner.on_token([&](engine::Scheduler::Handle h, const engine::TokenInfo&) {
            if (h != victim || broken) return;
            for (int32_t pg : warm_pages) {
                const kv::PageId id{pg};
                if (kv.pool().refcount(id) < 2) continue;  // the victim holds it besides the cache
                broken = pg;
                // Evict while referenced: every hold goes, the page is freed, its generation moves.
                const kv::PageRef live{id, kv.pool().generation(id)};
                if (kv.pool().is_cache_held(id)) {
                    ASSERT_EQ(kv.pool().cache_drop(live), kv::PoolStatus::Ok);
                }
                while (kv.pool().refcount(id) > 0)
                    ASSERT_EQ(kv.pool().release(live), kv::PoolStatus::Ok);
                if (reuse) {
                    reused = kv.pool().allocate();  // LIFO: the page just freed, to a new owner
                    ASSERT_TRUE(reused && reused->page == id);
                }
                return;
            }
        });
        const auto got = runner.run(batch);
        runner.on_token(nullptr);
        ASSERT_NE(broken, 0) << "the victim attached no cached page";
        EXPECT_EQ(got[0].finish, engine::FinishReason::IntegrityError);
        ASSERT_TRUE(got[0].violation.has_value());
        EXPECT_EQ(got[0].violation->page.v, broken);
        for (size_t i = 1; i < batch.size(); ++i) {
            EXPECT_EQ(got[i].finish, ref[i].finish) << "batch mate " << i;
            EXPECT_EQ(got[i].output, ref[i].output) << "batch mate " << i;
        }
        // Stale attach: the entry of the broken page is dropped, the chain is cut there, the
        // request computes the rest and gets the tokens of a cache-free run.
        const auto stale_before = pc.stats().stale_dropped;
        const auto late_res = runner.run({late});
        EXPECT_EQ(late_res[0].finish, ref.back().finish);
        EXPECT_EQ(late_res[0].output, ref.back().output);
        EXPECT_GT(pc.stats().stale_dropped, stale_before);
        EXPECT_LT(late_res[0].cached_tokens, static_cast<int64_t>(p.size()) / kPs * kPs);
        if (reused) {
            EXPECT_EQ(kv.pool().release(*reused), kv::PoolStatus::Ok);
        }
        EXPECT_EQ(kv.pool().check_integrity(), "");
        EXPECT_EQ(pc.check_integrity(), "");
        EXPECT_EQ(kv.pool().used_pages(), 0);
    }
}
