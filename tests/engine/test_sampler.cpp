#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <vector>

#include "engine/sampler.h"
#include "util/error.h"

using warden::engine::Sampler;
using warden::engine::SamplingParams;

namespace {
std::vector<float> logits_fixture() {
    return {1.0f, 3.0f, 2.0f, 3.0f, -1.0f, 0.5f};
}

SamplingParams plain(float temp) {
    SamplingParams p;
    p.temperature = temp;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    return p;
}
}  // namespace

TEST(Sampler, GreedyPicksFirstMaximum) {
    Sampler s(plain(0.0f));
    auto l = logits_fixture();
    EXPECT_EQ(s.sample(l, {}), 1);  // ties resolve to the lower id, like torch.argmax
}

TEST(Sampler, SameSeedSameSequence) {
    for (uint64_t seed : {0ull, 1ull, 42ull}) {
        SamplingParams p = plain(1.0f);
        p.seed = seed;
        Sampler a(p), b(p);
        for (int i = 0; i < 200; ++i) {
            auto la = logits_fixture(), lb = logits_fixture();
            ASSERT_EQ(a.sample(la, {}), b.sample(lb, {}));
        }
    }
}

TEST(Sampler, FrequenciesFollowSoftmax) {
    SamplingParams p = plain(1.0f);
    p.seed = 7;
    Sampler s(p);
    const auto base = logits_fixture();
    std::map<int, int> count;
    const int n = 60000;
    for (int i = 0; i < n; ++i) {
        auto l = base;
        ++count[s.sample(l, {})];
    }
    double z = 0;
    for (float v : base) z += std::exp(v);
    for (int id = 0; id < static_cast<int>(base.size()); ++id) {
        const double expect = std::exp(base[static_cast<size_t>(id)]) / z;
        const double got = static_cast<double>(count[id]) / n;
        EXPECT_NEAR(got, expect, 0.01) << "token " << id;
    }
}

// sample() over the whole vocabulary sorts only as far as its walk goes; it must draw exactly what
// a walk over distribution() in the walk order draws with the same generator state. Peaked
// logits (the walk stays in the first band) and a few likely tokens over a long tail 5-25 below
// them (many draws land in the later bands), with and without top-p / min-p; a top-p just below
// 1 makes the survivors' walk reach the last band's remainder.
TEST(Sampler, WholeVocabularyDrawEqualsWalkOverDistribution) {
    std::mt19937 gen(3);
    const size_t vocab = 20000;
    struct Case {
        bool tail;
        float temperature, top_p, min_p;
    };
    for (const Case& c : {Case{false, 1.0f, 1.0f, 0.0f}, Case{true, 1.0f, 1.0f, 0.0f},
                          Case{false, 0.7f, 0.9f, 0.0f}, Case{true, 1.3f, 0.95f, 0.0f},
                          Case{true, 1.0f, 1.0f, 1e-3f}, Case{true, 1.0f, 0.999f, 1e-9f},
                          Case{true, 1.0f, 0.99999994f, 0.0f}}) {
        SCOPED_TRACE(testing::Message() << "tail " << c.tail << " T " << c.temperature << " top_p "
                                        << c.top_p << " min_p " << c.min_p);
        std::vector<float> base(vocab);
        std::normal_distribution<float> nd(0.0f, 6.0f);
        std::uniform_real_distribution<float> ud(-25.0f, -5.0f);
        for (size_t i = 0; i < vocab; ++i)
            base[i] = c.tail ? (i % 2000 == 3 ? 0.0f : ud(gen)) : nd(gen);
        base[17] = base[18];  // a tie: the lower id ranks first
        int deep = 0;         // draws that landed below the first band
        for (uint64_t seed = 0; seed < 200; ++seed) {
            SamplingParams p = plain(c.temperature);
            p.top_p = c.top_p;
            p.min_p = c.min_p;
            p.seed = seed;
            Sampler fast(p), ref(p);
            auto l1 = base, l2 = base;
            const int32_t got = fast.sample(l1, {});
            // distribution() in the walk order (it lists every token in vocabulary order when
            // nothing truncates): higher scaled logit first, then lower id.
            auto dist = ref.distribution(l2, {});
            std::sort(dist.begin(), dist.end(), [&](const auto& x, const auto& y) {
                const float lx = base[static_cast<size_t>(x.second)] / c.temperature,
                            ly = base[static_cast<size_t>(y.second)] / c.temperature;
                return lx > ly || (lx == ly && x.second < y.second);
            });
            double total = 0.0;
            for (const auto& d : dist) total += d.first;
            std::mt19937_64 rng(seed);
            const double u = static_cast<double>(rng() >> 11) * (1.0 / 9007199254740992.0) * total;
            double acc = 0.0;
            size_t rank = dist.size() - 1;
            for (size_t k = 0; k < dist.size(); ++k) {
                acc += dist[k].first;
                if (u < acc) {
                    rank = k;
                    break;
                }
            }
            ASSERT_EQ(got, dist[rank].second) << "seed " << seed;
            deep += dist[rank].first < dist[0].first * std::exp(-4.0f / c.temperature) ? 1 : 0;
        }
        if (c.tail && c.min_p < 1e-6f) {
            EXPECT_GT(deep, 50);  // many draws walked past the first band
        }
    }
}

TEST(Sampler, TopKRestrictsToKBest) {
    SamplingParams p = plain(5.0f);  // hot: without top-k every token would appear
    p.top_k = 2;
    Sampler s(p);
    for (int i = 0; i < 2000; ++i) {
        auto l = logits_fixture();
        const int id = s.sample(l, {});
        ASSERT_TRUE(id == 1 || id == 3) << id;
    }
}

TEST(Sampler, TopPKeepsSmallestNucleus) {
    // probabilities ~ [0.6, 0.3, 0.1]: top_p 0.5 keeps only the first.
    SamplingParams p = plain(1.0f);
    p.top_p = 0.5f;
    Sampler s(p);
    for (int i = 0; i < 500; ++i) {
        std::vector<float> l = {std::log(0.6f), std::log(0.3f), std::log(0.1f)};
        ASSERT_EQ(s.sample(l, {}), 0);
    }
    p.top_p = 0.85f;  // keeps two
    Sampler s2(p);
    std::map<int, int> c;
    for (int i = 0; i < 3000; ++i) {
        std::vector<float> l = {std::log(0.6f), std::log(0.3f), std::log(0.1f)};
        ++c[s2.sample(l, {})];
    }
    EXPECT_EQ(c[2], 0);
    EXPECT_GT(c[1], 500);
}

TEST(Sampler, MinPDropsUnlikelyTokens) {
    SamplingParams p = plain(1.0f);
    p.min_p = 0.2f;  // keeps tokens with prob >= 0.2 * max
    Sampler s(p);
    for (int i = 0; i < 2000; ++i) {
        std::vector<float> l = {std::log(0.5f), std::log(0.15f), std::log(0.05f), std::log(0.3f)};
        const int id = s.sample(l, {});
        ASSERT_NE(id, 2);  // 0.05 < 0.2 * 0.5
    }
}

TEST(Sampler, RepetitionPenaltyShrinksSeenTokens) {
    SamplingParams p = plain(0.0f);
    p.repetition_penalty = 2.0f;
    Sampler s(p);
    std::vector<float> l = {2.0f, 1.5f, -1.0f};
    const std::vector<int32_t> hist = {0, 2, 0};
    EXPECT_EQ(s.sample(l, hist), 1);  // 2.0 / 2 = 1.0 < 1.5
    EXPECT_FLOAT_EQ(l[0], 1.0f);
    EXPECT_FLOAT_EQ(l[2], -2.0f);  // negative logits are multiplied
}

TEST(Sampler, RejectsOutOfRangeParameters) {
    SamplingParams p;
    p.temperature = -1.0f;
    EXPECT_THROW(p.validate(), warden::util::Error);
    p = SamplingParams{};
    p.top_p = 0.0f;
    EXPECT_THROW(p.validate(), warden::util::Error);
    p = SamplingParams{};
    p.top_k = -3;
    EXPECT_THROW(p.validate(), warden::util::Error);
    p = SamplingParams{};
    p.temperature = std::nanf("");
    EXPECT_THROW(p.validate(), warden::util::Error);
}
