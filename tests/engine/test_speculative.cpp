// Speculative decoding: the rejection sampler keeps the target's distribution (chi-square over
// many draws with synthetic p and q, and a deliberately wrong rule that the same test rejects),
// n-gram lookup, the draft-length policy, and the engine's verification: greedy outputs equal a
// plain decode token for token, with batching (sequences with and without drafts in one step),
// chunked prefill, preemption, the prefix cache and 8-bit KV, and the pool is whole afterwards.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <random>

#include "engine/scheduler.h"
#include "engine/speculative/ngram_proposer.h"
#include "engine/speculative/policy.h"
#include "engine/speculative/rejection.h"
#include "kv/prefix_cache.h"
#include "tiny_llama.h"

using namespace warden;
namespace spec = warden::engine::speculative;

namespace {

using SparseDist = std::vector<std::pair<float, int32_t>>;
using Rule =
    std::function<spec::Verdict(spec::Dist, spec::Dist, int32_t, double, std::mt19937_64&)>;

// Pearson chi-square of the tokens one speculative step emits (draft d ~ q, then the rule)
// against p, over `n` draws with fresh seeds. p, q over ids [0, vocab).
double chi_square(const SparseDist& p, const SparseDist& q, int32_t vocab, int n,
                  const Rule& rule) {
    std::vector<int64_t> count(static_cast<size_t>(vocab), 0);
    double p_sum = 0;
    for (const auto& [w, id] : p) p_sum += w;
    for (int i = 0; i < n; ++i) {
        std::mt19937_64 rng(1000003ULL * static_cast<uint64_t>(i) + 17);
        const int32_t d = q.empty() ? 2 : spec::draw(q, rng);  // point mass: always token 2
        const double u = spec::uniform01(rng);
        ++count[static_cast<size_t>(rule(p, q, d, u, rng).token)];
    }
    double chi = 0;
    for (int32_t t = 0; t < vocab; ++t) {
        double pt = 0;
        for (const auto& [w, id] : p)
            if (id == t) pt = w / p_sum;
        const double expect = pt * n;
        const double obs = static_cast<double>(count[static_cast<size_t>(t)]);
        if (expect == 0) {
            if (obs > 0) return 1e9;  // a token outside p's support: always wrong
            continue;
        }
        chi += (obs - expect) * (obs - expect) / expect;
    }
    return chi;
}

// The 0.999 quantile of chi-square with 4 degrees of freedom (5 tokens): a correct sampler
// fails with probability 0.001 per case; the seeds are fixed, so the outcome is deterministic.
constexpr double kChi4 = 18.47;

const SparseDist kP = {{0.40f, 1}, {0.25f, 0}, {0.20f, 2}, {0.10f, 4}, {0.05f, 3}};

TEST(SpecRejection, KeepsTargetDistributionForAnyDraft) {
    const std::vector<SparseDist> qs = {
        {},                                                            // point mass (n-gram)
        {{0.2f, 0}, {0.2f, 1}, {0.2f, 2}, {0.2f, 3}, {0.2f, 4}},       // uniform
        {{0.05f, 1}, {0.9f, 3}, {0.05f, 4}},                           // far from p
        {{0.40f, 1}, {0.25f, 0}, {0.20f, 2}, {0.10f, 4}, {0.05f, 3}},  // q == p
        {{0.7f, 0}, {0.3f, 2}},  // unnormalized support subset
    };
    for (size_t i = 0; i < qs.size(); ++i)
        EXPECT_LT(chi_square(kP, qs[i], 5, 40000, spec::verify_token), kChi4) << "q #" << i;
}

TEST(SpecRejection, WrongRulesFailTheSameTest) {
    // Accepting every draft emits q, not p.
    const Rule accept_all = [](spec::Dist, spec::Dist, int32_t d, double, std::mt19937_64&) {
        return spec::Verdict{true, d};
    };
    // The right acceptance test, but replacements drawn from p instead of norm(max(0, p - q)).
    const Rule resample_p = [](spec::Dist p, spec::Dist q, int32_t d, double u,
                               std::mt19937_64& rng) {
        const spec::Verdict v = spec::verify_token(p, q, d, u, rng);
        return v.accepted ? v : spec::Verdict{false, spec::draw(p, rng)};
    };
    const SparseDist q = {{0.05f, 1}, {0.9f, 3}, {0.05f, 4}};
    EXPECT_GT(chi_square(kP, q, 5, 40000, accept_all), kChi4);
    EXPECT_GT(chi_square(kP, q, 5, 40000, resample_p), kChi4);
    EXPECT_GT(chi_square(kP, {}, 5, 40000, resample_p), kChi4);
}

TEST(SpecRejection, GreedyTargetAcceptsOnlyItsArgmax) {
    std::mt19937_64 rng(1);
    const SparseDist p = {{1.0f, 7}};
    EXPECT_TRUE(spec::verify_token(p, {}, 7, 0.999, rng).accepted);
    const spec::Verdict v = spec::verify_token(p, {}, 3, 0.0, rng);
    EXPECT_FALSE(v.accepted);
    EXPECT_EQ(v.token, 7);
}

TEST(SpecNgram, LongestMostRecentMatch) {
    // ... 5 6 7 8 | 9 ... 6 7 8 -> longest match "6 7 8" continues with 9 10.
    const std::vector<int32_t> t = {1, 6, 7, 8, 9, 10, 11, 2, 7, 8, 3, 6, 7, 8};
    EXPECT_EQ(spec::NgramProposer::lookup(t, 2, 1, 4), (std::vector<int32_t>{9, 10}));
    // Only the 2-gram "7 8" when 3-grams are out of range; its most recent earlier match is
    // at index 8, followed by 3.
    EXPECT_EQ(spec::NgramProposer::lookup(t, 3, 1, 2), (std::vector<int32_t>{3, 6, 7}));
    EXPECT_TRUE(spec::NgramProposer::lookup(std::vector<int32_t>{1, 2, 3, 4}, 4, 1, 3).empty());
    EXPECT_TRUE(spec::NgramProposer::lookup(t, 0, 1, 3).empty());
    // The proposal may run up to the end of the history, never past it.
    EXPECT_EQ(spec::NgramProposer::lookup(std::vector<int32_t>{5, 5, 5}, 4, 1, 2),
              (std::vector<int32_t>{5}));
}

TEST(SpecNgram, EvidenceIsTheLengthOfTheAgreement) {
    // "4 5 6 7" occurred before: the 4-gram matches and the agreement reaches back to "3".
    const std::vector<int32_t> t = {9, 3, 4, 5, 6, 7, 8, 1, 3, 4, 5, 6, 7};
    const auto m = spec::NgramProposer::find(t, 3, 1, 4);
    EXPECT_EQ(m.draft, (std::vector<int32_t>{8, 1, 3}));
    EXPECT_EQ(m.length, 5);
    // A single-token match has evidence 1.
    const auto one = spec::NgramProposer::find(std::vector<int32_t>{1, 2, 3, 2}, 2, 1, 4);
    EXPECT_EQ(one.draft, (std::vector<int32_t>{3, 2}));
    EXPECT_EQ(one.length, 1);
    // The agreement is counted up to kMaxEvidence.
    std::vector<int32_t> rep(40, 5);
    EXPECT_EQ(spec::NgramProposer::find(rep, 2, 1, 4).length, spec::NgramProposer::kMaxEvidence);
    EXPECT_EQ(spec::NgramProposer::find(t, 0, 1, 4).length, 0);
}

TEST(SpecPolicy, EvidenceClassesLearnTheirOwnRate) {
    using EA = spec::EvidenceAcceptance;
    EA ev;
    // Nothing measured yet: the priors.
    EXPECT_DOUBLE_EQ(ev.estimate(1).first, EA::kFirstPrior[0]);
    EXPECT_DOUBLE_EQ(ev.estimate(12).first, EA::kFirstPrior[4]);
    EXPECT_DOUBLE_EQ(ev.estimate(1).next, EA::kNextPrior);
    for (int i = 0; i < 20; ++i) {
        ev.observe(1, 4, 0);  // one-token matches: always rejected
        ev.observe(7, 4, 4);  // long matches: always kept
    }
    EXPECT_LT(ev.estimate(1).first, 0.05);
    EXPECT_GT(ev.estimate(8).first, 0.95);  // 5-8 is one class
    EXPECT_GT(ev.estimate(8).next, 0.95);   // every token after a kept first one was kept
    // Classes not verified keep their prior first-token rate.
    EXPECT_DOUBLE_EQ(ev.estimate(2).first, EA::kFirstPrior[1]);
    EXPECT_DOUBLE_EQ(ev.estimate(12).first, EA::kFirstPrior[4]);
    // One-token drafts that are always kept raise the first-token rate towards 1 and leave
    // the continuation's alone (they say nothing about it).
    EA one;
    for (int i = 0; i < 20; ++i) one.observe(3, 1, 1);
    EXPECT_GT(one.estimate(3).first, 0.95);
    EXPECT_DOUBLE_EQ(one.estimate(3).next, EA::kNextPrior);
    // Drafts whose first token is kept and whose second is not: continuation rate towards 0.
    EA cut;
    for (int i = 0; i < 20; ++i) cut.observe(5, 4, 1);
    EXPECT_GT(cut.estimate(5).first, 0.95);
    EXPECT_LT(cut.estimate(5).next, 0.15);
}

// The depth follows first * next^(i-1) against a row's share of the step, so a draft whose
// first token is uncertain but whose continuation is sure is drafted long or not at all, where
// one per-token rate drafts it one token deep.
TEST(SpecPolicy, DepthSplitsFirstTokenFromContinuation) {
    spec::SpecConfig cfg;
    cfg.max_k = 4;
    spec::StepCostModel cost;
    // 2.4 ms + 1.4 ms per row: a row is 0.37 of a one-row step (the default model's verify
    // step on one CPU thread). Enough steps that the prior has faded.
    for (int i = 0; i < 200; ++i) {
        const int64_t rows = 1 + i % 5;
        cost.observe(rows, 2.4 + 1.4 * static_cast<double>(rows));
    }
    EXPECT_NEAR(cost.row_share(1), 1.4 / 3.8, 0.01);
    EXPECT_EQ(spec::choose_depth(cfg, 0.55, 0.95, 1, cost), 4);  // 0.55 * 0.95^3 = 0.47 > 0.37
    EXPECT_EQ(spec::choose_k(cfg, 0.55, 1, cost), 1);            // 0.55^2 = 0.30 < 0.37
    EXPECT_EQ(spec::choose_depth(cfg, 0.6, 0.7, 1, cost), 2);    // 0.6, 0.42, 0.29
    EXPECT_EQ(spec::choose_depth(cfg, 0.3, 1.0, 1, cost), 0);    // the first token does not pay
    EXPECT_EQ(spec::choose_depth(cfg, 0.9, 0.9, 1, cost), 4);
    // The same rates at 64 rows, where rows are most of the step: none.
    spec::StepCostModel big;
    for (int i = 0; i < 64; ++i) {
        const int64_t rows = 1 + (i * 7) % 64;
        big.observe(rows, 1.0 + 1.4 * static_cast<double>(rows));
    }
    EXPECT_EQ(spec::choose_depth(cfg, 0.9, 0.95, 64, big), 0);
    cfg.adaptive = false;
    EXPECT_EQ(spec::choose_depth(cfg, 0.1, 0.1, 64, big), 4);
}

TEST(SpecPolicy, DraftsLessAsTheBatchGrows) {
    spec::SpecConfig cfg;
    cfg.max_k = 8;
    spec::StepCostModel cost;
    // A step costs 10 ms + 0.5 ms per row: weight-bound at 1 row, compute-bound at 64.
    for (int i = 0; i < 64; ++i) {
        const int64_t rows = 1 + (i * 7) % 64;
        cost.observe(rows, 10.0 + 0.5 * static_cast<double>(rows));
    }
    const int32_t k1 = spec::choose_k(cfg, 0.7, 1, cost);
    const int32_t k64 = spec::choose_k(cfg, 0.7, 64, cost);
    EXPECT_GE(k1, 5);
    EXPECT_EQ(k64, 0);
    EXPECT_EQ(spec::choose_k(cfg, 0.03, 1, cost), 0);
    cfg.adaptive = false;
    EXPECT_EQ(spec::choose_k(cfg, 0.05, 64, cost), 8);
}

// A draft model's own time per drafted token is part of a draft token's price: a draft kept
// half the time pays against the target's rows alone, but not once each draft token costs more
// than half of what a kept token saves.
TEST(SpecPolicy, DraftModelTimeCountsAgainstItsDrafts) {
    spec::SpecConfig cfg;
    cfg.max_k = 4;
    spec::StepCostModel cost;
    for (int i = 0; i < 200; ++i) {  // 10 ms + 1 ms per row
        const int64_t rows = 1 + i % 5;
        cost.observe(rows, 10.0 + static_cast<double>(rows));
    }
    spec::DraftCostModel none;
    EXPECT_EQ(none.share(cost, 1), 0.0);  // nothing measured: only the rows count
    EXPECT_EQ(spec::choose_k(cfg, 0.5, 1, cost, none.share(cost, 1)), 3);  // 0.5^3 > 1/11
    spec::DraftCostModel cheap, dear;
    for (int i = 0; i < 50; ++i) {
        cheap.observe(4, 12.0);  // 3 ms per drafted token
        dear.observe(2, 12.0);   // 6 ms
    }
    EXPECT_NEAR(cheap.share(cost, 1), 3.0 / 11.0, 0.005);  // the fit's faded prior
    EXPECT_NEAR(cheap.share(cost, 4), 4 * 3.0 / 14.0, 0.005);
    EXPECT_EQ(spec::choose_k(cfg, 0.5, 1, cost, cheap.share(cost, 1)), 1);  // 0.5 > 4/11 > 0.25
    EXPECT_EQ(spec::choose_k(cfg, 0.5, 1, cost, dear.share(cost, 1)), 0);   // 0.5 < 7/11
    EXPECT_EQ(spec::choose_k(cfg, 0.95, 1, cost, dear.share(cost, 1)), 4);  // 0.95^4 > 7/11
}

// The acceptance estimate is tokens kept over tokens tried: a one-token draft kept every time
// reads as nearly certain (so deeper drafts follow), a first-token rejection as a miss; a probe
// that keeps nothing doubles the probe interval up to its cap, one kept token resets it.
TEST(SpecPolicy, AcceptanceCountsTokensAndProbesBackOff) {
    spec::SeqState st;
    for (int i = 0; i < 12; ++i) spec::update_acceptance(st, 1, 1);
    EXPECT_GT(st.acceptance(), 0.85);
    spec::SeqState half;
    for (int i = 0; i < 40; ++i) spec::update_acceptance(half, 4, i % 2 == 0 ? 4 : 0);
    // 4 kept per 5 tried, the latest verification (a miss) weighing most.
    EXPECT_GT(half.acceptance(), 0.65);
    EXPECT_LT(half.acceptance(), 0.85);
    spec::SeqState miss;
    for (int i = 0; i < 12; ++i) spec::update_acceptance(miss, 2, 0);
    EXPECT_LT(miss.acceptance(), 0.01);

    spec::SeqState p;
    EXPECT_EQ(p.probe_interval, spec::kProbeInterval);
    int64_t want = spec::kProbeInterval;
    for (int i = 0; i < 8; ++i) {
        p.probing = true;
        spec::update_acceptance(p, 1, 0);
        want = std::min(2 * want, spec::kMaxProbeInterval);
        EXPECT_EQ(p.probe_interval, want) << i;
        EXPECT_FALSE(p.probing);
    }
    EXPECT_EQ(p.probe_interval, spec::kMaxProbeInterval);
    spec::update_acceptance(p, 1, 0);  // not a probe: the interval stays
    EXPECT_EQ(p.probe_interval, spec::kMaxProbeInterval);
    p.probing = true;
    spec::update_acceptance(p, 1, 1);
    EXPECT_EQ(p.probe_interval, spec::kProbeInterval);
}

// Before any step, a row is half the fixed part; the first measured steps and preempted ones
// (a shared machine) move the fit only gradually instead of sizing drafts by a one-off slope.
TEST(SpecPolicy, StepCostFitResistsNoisySteps) {
    spec::StepCostModel cost;
    const double prior = spec::StepCostModel::kPriorRow / (1.0 + spec::StepCostModel::kPriorRow);
    EXPECT_DOUBLE_EQ(cost.row_share(1), prior);
    // Three steps whose sizes read as a slope near zero (the 1-row steps were preempted).
    cost.observe(1, 3.8);
    cost.observe(1, 9.0);
    cost.observe(5, 9.4);
    EXPECT_GT(cost.row_share(1), 0.2);
    // A true cost of 2.4 ms + 1.4 ms per row, every eighth step preempted to ten times its time.
    for (int i = 0; i < 300; ++i) {
        const int64_t rows = 1 + i % 5;
        const double ms = 2.4 + 1.4 * static_cast<double>(rows);
        cost.observe(rows, i % 8 == 7 ? 10 * ms : ms);
    }
    EXPECT_NEAR(cost.row_share(1), 1.4 / 3.8, 0.06);
}

// ---- verification in the engine (tiny-llama) ----

// Proposes each request's known greedy continuation with some tokens deliberately wrong, so
// verification sees full acceptances, partial ones and immediate rejections; requests whose
// prompt starts with an odd token get no drafts (mixed steps).
class NoisyOracle final : public spec::Proposer {
  public:
    NoisyOracle(std::map<std::vector<int32_t>, std::vector<int32_t>> truth, uint64_t seed)
        : truth_(std::move(truth)), rng_(seed) {}
    const char* name() const override { return "noisy-oracle"; }
    void propose(std::span<spec::DraftRequest*> reqs) override {
        for (spec::DraftRequest* r : reqs) {
            r->draft.clear();
            const std::vector<int32_t> prompt(r->tokens.begin(), r->tokens.begin() + r->n_prompt);
            const auto it = truth_.find(prompt);
            if (it == truth_.end() || prompt[0] % 2 == 1) continue;
            const auto have =
                static_cast<size_t>(static_cast<int64_t>(r->tokens.size()) - r->n_prompt);
            for (size_t j = have;
                 j < it->second.size() && r->draft.size() < static_cast<size_t>(r->k); ++j) {
                int32_t t = it->second[j];
                if (rng_() % 5 == 0) t = (t + 1) % 64;  // a wrong guess
                r->draft.push_back(t);
            }
        }
    }
    int64_t released = 0;
    void release(kv::SeqId) override { ++released; }

  private:
    std::map<std::vector<int32_t>, std::vector<int32_t>> truth_;
    std::mt19937_64 rng_;
};

std::vector<engine::Request> greedy_requests(int n, int64_t vocab, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<engine::Request> reqs(static_cast<size_t>(n));
    for (auto& r : reqs) {
        const int len = 3 + static_cast<int>(rng() % 30);
        for (int i = 0; i < len; ++i)
            r.prompt.push_back(static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab)));
        r.max_new_tokens = 4 + static_cast<int64_t>(rng() % 20);
        r.sampling.temperature = 0.0f;
        r.sampling.repetition_penalty = (rng() % 3) ? 1.0f : 1.3f;
        r.top_logprobs = 1;
    }
    return reqs;
}

struct SpecRun {
    std::vector<engine::Result> results;
    engine::SchedulerStats stats;
    int32_t used_after = 0;
};

SpecRun run_engine(test::TinyLlama& f, const std::vector<engine::Request>& reqs, int64_t pages,
                   kernels::KvType kv_type, spec::Proposer* proposer, int32_t k, int64_t max_seqs,
                   bool prefix, bool adaptive = false) {
    kv::KvCache kv(f.kv_config(4, pages, kv_type));
    engine::Executor exec(*f.tf, kv, kv::IntegrityMode::Step);
    engine::SchedulerOptions ro;
    ro.max_seqs = max_seqs;
    ro.max_batch_tokens = 40;
    ro.prefill_chunk = 8;
    std::optional<kv::PrefixCache> pc;
    SpecRun out;
    {
        engine::Scheduler sch(exec, kv, ro);
        if (prefix) {
            kv::PrefixCacheConfig c;
            c.page_size = 4;
            c.model_id = 3;
            c.copy_partial_pages = true;
            pc.emplace(kv.pool(), c);
            sch.set_prefix_cache(&*pc);
        }
        spec::SpecConfig cfg;
        cfg.max_k = k;
        cfg.adaptive = adaptive;
        sch.set_speculative(proposer, cfg);
        out.results = sch.run(reqs);
        out.stats = sch.stats();
        EXPECT_EQ(kv.pool().check_integrity(), "");
        if (pc) {
            EXPECT_EQ(pc->check_integrity(), "");
        }
        out.used_after = kv.pool().used_pages();
    }
    return out;
}

void expect_same_outputs(const SpecRun& ref, const SpecRun& got) {
    ASSERT_EQ(ref.results.size(), got.results.size());
    for (size_t i = 0; i < ref.results.size(); ++i) {
        EXPECT_EQ(got.results[i].output, ref.results[i].output) << "request " << i;
        EXPECT_EQ(got.results[i].finish, ref.results[i].finish) << "request " << i;
    }
}

// With nothing waiting, drafts only pay when they shorten the batch: every sequence with the
// most tokens left must have one. Two sequences decode together with the same budget; only the
// one whose prompt starts with an even token gets oracle drafts.
TEST(SpecEngineAdaptive, NoDraftsWhileTheLongestSequenceHasNone) {
    if (!test::tiny_llama_present()) GTEST_SKIP() << "tests/golden/models/tiny-llama missing";
    test::TinyLlama f;
    auto make = [](int32_t first) {
        engine::Request r;
        r.prompt = {first, 5, 9, 3, 7};
        r.max_new_tokens = 16;
        r.sampling.temperature = 0.0f;
        return r;
    };
    auto run_pair = [&](int32_t first_b) {
        const std::vector<engine::Request> reqs = {make(2), make(first_b)};
        const SpecRun ref = run_engine(f, reqs, 512, kernels::KvType::BF16, nullptr, 0, 1, false);
        std::map<std::vector<int32_t>, std::vector<int32_t>> truth;
        for (size_t i = 0; i < reqs.size(); ++i) truth[reqs[i].prompt] = ref.results[i].output;
        NoisyOracle oracle(truth, 3);
        const SpecRun got =
            run_engine(f, reqs, 512, kernels::KvType::BF16, &oracle, 4, 2, false, true);
        expect_same_outputs(ref, got);
        return got.stats.spec.proposed;
    };
    EXPECT_EQ(run_pair(1), 0);  // the second sequence never drafts: neither does the first
    EXPECT_GT(run_pair(4), 0);  // both draft
}

class SpecEngine : public ::testing::TestWithParam<kernels::KvType> {};

TEST_P(SpecEngine, GreedyOutputsEqualPlainDecode) {
    if (!test::tiny_llama_present()) GTEST_SKIP() << "tests/golden/models/tiny-llama missing";
    test::TinyLlama f;
    const auto reqs = greedy_requests(20, f.vocab(), 5);
    // Reference: one sequence at a time, no speculation, a roomy pool.
    const SpecRun ref = run_engine(f, reqs, 512, GetParam(), nullptr, 0, 1, false);
    std::map<std::vector<int32_t>, std::vector<int32_t>> truth;
    for (size_t i = 0; i < reqs.size(); ++i) truth[reqs[i].prompt] = ref.results[i].output;

    for (const bool small_pool : {false, true}) {
        NoisyOracle oracle(truth, 11);
        const SpecRun got =
            run_engine(f, reqs, small_pool ? 40 : 512, GetParam(), &oracle, 4, 8, small_pool);
        SCOPED_TRACE(small_pool ? "small pool + prefix cache" : "roomy pool");
        expect_same_outputs(ref, got);
        EXPECT_GT(got.stats.spec.accepted, 0);
        EXPECT_LT(got.stats.spec.accepted, got.stats.spec.proposed);  // some were rejected
        EXPECT_GT(got.stats.spec.rollback_pages, 0);
        // Fewer steps than the same batch without drafts.
        const SpecRun plain =
            run_engine(f, reqs, small_pool ? 40 : 512, GetParam(), nullptr, 0, 8, small_pool);
        expect_same_outputs(ref, plain);
        EXPECT_LT(got.stats.steps, plain.stats.steps);
        if (small_pool) {
            EXPECT_GT(got.stats.preemptions, 0);
        }
        EXPECT_EQ(got.used_after, 0);
        int64_t per_req = 0;
        for (const auto& r : got.results) per_req += r.timing.spec_accepted;
        EXPECT_EQ(per_req, got.stats.spec.accepted);
    }
    // n-gram lookup through the same path.
    spec::NgramProposer ngram(1, 3);
    const SpecRun ng = run_engine(f, reqs, 512, GetParam(), &ngram, 3, 8, false);
    expect_same_outputs(ref, ng);
    EXPECT_GT(ng.stats.spec.proposed, 0);
}

INSTANTIATE_TEST_SUITE_P(KvTypes, SpecEngine,
                         ::testing::Values(kernels::KvType::BF16, kernels::KvType::FP8_E4M3),
                         [](const auto& i) { return std::string(kernels::kv_type_name(i.param)); });

TEST(SpecEngineSampling, TemperatureRunsAndStaysInBudget) {
    if (!test::tiny_llama_present()) GTEST_SKIP() << "tests/golden/models/tiny-llama missing";
    test::TinyLlama f;
    auto reqs = greedy_requests(8, f.vocab(), 6);
    for (size_t i = 0; i < reqs.size(); ++i) {
        reqs[i].sampling.temperature = 0.9f;
        reqs[i].sampling.seed = i;
    }
    spec::NgramProposer ngram(1, 3);
    const SpecRun got = run_engine(f, reqs, 64, kernels::KvType::BF16, &ngram, 4, 4, false);
    for (size_t i = 0; i < reqs.size(); ++i) {
        EXPECT_LE(static_cast<int64_t>(got.results[i].output.size()), reqs[i].max_new_tokens);
        EXPECT_EQ(got.results[i].finish, engine::FinishReason::Length);
    }
    EXPECT_EQ(got.used_after, 0);
}

}  // namespace
