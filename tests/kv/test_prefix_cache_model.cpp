// End to end at the transformer level: many requests sharing prefixes of different lengths
// (a declared shared prefix, per-tenant chains, prompts shorter than a page, identical prompts
// from different tenants) run over one small KV pool with the prefix cache, in batches, with
// chunked prefill starting at pos0 = cached tokens, a preemption + resume per batch and
// evictions forced by memory pressure and by hand. Every request's greedy tokens and the
// logits of every sampled position must equal, bit for bit, a from-scratch run of the same
// request alone on a fresh cache (prefill in one chunk). No cross-tenant page is ever attached:
// every request's cached token count is bounded by what its own scope (plus the shared
// prefix) offered before.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <random>

#include "kv/kv_cache.h"
#include "kv/prefix_cache.h"
#include "model/model.h"
#include "model/transformer.h"
#include "tiny_llama.h"

using namespace warden;

namespace {

constexpr int32_t kPs = 4;
constexpr int kNew = 6;  // generated tokens per request

using Tiny = test::TinyLlama;

int32_t argmax(const std::vector<float>& v) {
    return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

struct Request {
    kv::CacheScope scope;
    std::vector<int32_t> prompt;
};

struct Output {
    std::vector<int32_t> tokens;
    std::vector<std::vector<float>> logits;  // [kNew][vocab]
};

// One live sequence of the cached run.
struct Live {
    size_t req = 0;
    std::vector<int32_t> tokens;  // prompt + generated
    kv::PageTable table;          // table.n_tokens = tokens whose K/V are stored
    Output out;
};

class Runner {
  public:
    Runner(Tiny& m, kv::KvCache& kv, kv::PrefixCache* pc) : m_(m), kv_(kv), pc_(pc) {}

    // Grows the table to cover n tokens, evicting cached pages first when the pool is dry.
    void ensure(kv::PageTable& t, int64_t n) {
        while (!kv_.reserve(t, n)) {
            const int64_t deficit =
                kv_.pages_for(n) - static_cast<int64_t>(t.pages.size()) - kv_.pool().free_pages();
            ASSERT_TRUE(pc_ && pc_->evict(deficit) > 0) << "KV pool too small for the test";
        }
    }
    // Runs tokens [t.n_tokens, end) in chunks of `chunk` for each sequence (one step per chunk
    // round, all sequences batched); returns the logits after each sequence's last token.
    std::vector<std::vector<float>> compute(std::vector<Live*> seqs, int64_t chunk) {
        const int64_t vocab = m_.model->config.vocab_size;
        std::vector<std::vector<float>> last(seqs.size(),
                                             std::vector<float>(static_cast<size_t>(vocab)));
        for (Live* s : seqs) ensure(s->table, static_cast<int64_t>(s->tokens.size()));
        for (;;) {
            std::vector<model::SeqInput> in;
            std::vector<std::vector<int32_t>> ids;
            std::vector<size_t> who;
            for (size_t i = 0; i < seqs.size(); ++i) {
                Live& s = *seqs[i];
                const int64_t left = static_cast<int64_t>(s.tokens.size()) - s.table.n_tokens;
                if (left <= 0) continue;
                const int64_t n = std::min(left, chunk);
                std::vector<int32_t> pid;
                for (const auto& p : s.table.pages) pid.push_back(p.page.v);
                ids.push_back(std::move(pid));
                model::SeqInput x;
                x.tokens = std::span<const int32_t>(s.tokens.data() + s.table.n_tokens,
                                                    static_cast<size_t>(n));
                x.pos0 = s.table.n_tokens;
                x.logits = n == left ? last[i].data() : nullptr;
                in.push_back(x);
                who.push_back(i);
            }
            if (in.empty()) break;
            for (size_t j = 0; j < in.size(); ++j) {
                in[j].page_ids = ids[j].data();
                EXPECT_FALSE(
                    kv_.verify(kv::SeqId{static_cast<int64_t>(who[j])}, seqs[who[j]]->table)
                        .has_value());
            }
            const auto ok = m_.tf->step(in, kv_.storage());
            for (size_t j = 0; j < in.size(); ++j) {
                EXPECT_TRUE(ok[j]);
                seqs[who[j]]->table.n_tokens += static_cast<int64_t>(in[j].tokens.size());
            }
        }
        return last;
    }

  private:
    Tiny& m_;
    kv::KvCache& kv_;
    kv::PrefixCache* pc_;
};

kv::KvCacheConfig kv_config(const Tiny& m, tensor::KvType type, int64_t pages) {
    return m.kv_config(kPs, pages, type);
}

// The reference: the request alone on a fresh cache, whole prompt in one chunk, greedy.
Output reference(Tiny& m, tensor::KvType type, const Request& r) {
    kv::KvCache kv(kv_config(m, type, 64));
    Runner run(m, kv, nullptr);
    Live s;
    s.tokens = r.prompt;
    auto logits = run.compute({&s}, 1 << 20)[0];
    for (int k = 0; k < kNew; ++k) {
        s.out.logits.push_back(logits);
        s.out.tokens.push_back(argmax(logits));
        s.tokens.push_back(s.out.tokens.back());
        if (k + 1 < kNew) logits = run.compute({&s}, 1)[0];
    }
    kv.free(s.table);
    return s.out;
}

size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
    size_t n = 0;
    while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
    return n;
}

}  // namespace

TEST(PrefixCacheModel, CachedRunsMatchFromScratchBitForBit) {
    if (!test::tiny_llama_present()) GTEST_SKIP() << "no tiny-llama";
    for (auto dt : {model::RuntimeDType::BF16, model::RuntimeDType::F32}) {
        Tiny m(dt);
        const auto type =
            dt == model::RuntimeDType::F32 ? tensor::KvType::F32 : tensor::KvType::BF16;
        const int64_t vocab = m.model->config.vocab_size;
        std::mt19937_64 rng(31337);
        auto toks = [&](int n) {
            std::vector<int32_t> v;
            for (int i = 0; i < n; ++i)
                v.push_back(static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab)));
            return v;
        };
        // Prefix families: a declared shared system prompt (10 tokens: 2 full pages) with
        // several continuations, an unshared 7-token base, a base shorter than a page.
        const auto sys = toks(10);
        auto tools = sys;
        for (int32_t t : toks(7)) tools.push_back(t);
        const std::vector<std::vector<int32_t>> bases = {sys, tools, toks(7), toks(3), {}};
        const std::vector<kv::CacheScope> scopes = {{"A", ""}, {"B", ""}, {"A", "conversation-9"}};
        std::vector<Request> reqs;
        for (int i = 0; i < 30; ++i) {
            Request r;
            r.scope = scopes[rng() % scopes.size()];
            r.prompt = bases[rng() % bases.size()];
            for (int32_t t : toks(1 + static_cast<int>(rng() % 9))) r.prompt.push_back(t);
            reqs.push_back(r);
            if (i % 5 == 4) {  // the same prompt again, from another tenant and from the same one
                Request other = r;
                other.scope =
                    r.scope.tenant == "A" ? kv::CacheScope{"B", ""} : kv::CacheScope{"A", ""};
                reqs.push_back(other);
                reqs.push_back(r);
            }
        }
        std::vector<Output> want;
        for (const auto& r : reqs) want.push_back(reference(m, type, r));

        // The cached run: 40 pages (160 tokens) for batches of 3 sequences of up to ~31
        // tokens each plus the cache: pressure evicts, and we evict by hand as well.
        kv::KvCache kv(kv_config(m, type, 40));
        kv::PrefixCacheConfig pcfg;
        pcfg.page_size = kPs;
        pcfg.model_id = static_cast<uint64_t>(dt);
        pcfg.kv_format = static_cast<uint32_t>(type);
        kv::PrefixCache pc(kv.pool(), pcfg);
        ASSERT_EQ(pc.declare_shared_prefix(sys), 2);
        Runner run(m, kv, &pc);
        std::map<std::string, std::vector<std::vector<int32_t>>>
            offered;  // scope -> token lists offered
        std::vector<std::vector<int32_t>> offered_shared;
        auto scope_key = [](const kv::CacheScope& s) { return s.tenant + '\x1f' + s.cache_salt; };
        // The most a request may get from the cache: its own scope's earlier offers, or the
        // declared prefix's full pages if anyone offered them; whole pages, >= 1 token left.
        auto bound = [&](const Request& r, const std::vector<int32_t>& tokens) {
            size_t best = 0;
            for (const auto& o : offered[scope_key(r.scope)])
                best = std::max(best, common_prefix(o, tokens));
            const size_t shared = std::min(common_prefix(sys, tokens), size_t{8});
            for (const auto& o : offered_shared)
                best = std::max(best, std::min(shared, common_prefix(o, tokens)));
            best = std::min(best, tokens.size() - 1);
            return static_cast<int64_t>(best / kPs * kPs);
        };
        auto offer = [&](Live& s) {
            const kv::OfferResult o = pc.offer(reqs[s.req].scope, s.tokens, s.table);
            ASSERT_FALSE(o.violation.has_value());
            std::vector<int32_t> stored(s.tokens.begin(), s.tokens.begin() + s.table.n_tokens);
            if (common_prefix(stored, sys) >= 4) offered_shared.push_back(stored);
            offered[scope_key(reqs[s.req].scope)].push_back(std::move(stored));
        };
        auto admit = [&](Live& s) {
            const int64_t allowed = bound(reqs[s.req], s.tokens);
            const kv::AttachResult a = pc.attach(reqs[s.req].scope, s.tokens, s.table);
            EXPECT_LE(a.cached_tokens, allowed)
                << "request " << s.req << " got pages its scope never offered";
            return a.cached_tokens;
        };

        int64_t resumed_hits = 0, total_cached = 0;
        for (size_t b0 = 0; b0 < reqs.size(); b0 += 3) {
            std::vector<Live> batch;
            for (size_t i = b0; i < std::min(reqs.size(), b0 + 3); ++i) {
                Live s;
                s.req = i;
                s.tokens = reqs[i].prompt;
                batch.push_back(std::move(s));
            }
            for (Live& s : batch) total_cached += admit(s);
            std::vector<Live*> all;
            for (Live& s : batch) all.push_back(&s);
            auto logits = run.compute(all, 3);  // chunks of 3 from pos0 = cached tokens
            for (int k = 0; k < kNew; ++k) {
                for (size_t i = 0; i < batch.size(); ++i) {
                    batch[i].out.logits.push_back(logits[i]);
                    batch[i].out.tokens.push_back(argmax(logits[i]));
                    batch[i].tokens.push_back(batch[i].out.tokens.back());
                }
                if (k + 1 == kNew) break;
                if (k == 2) {  // preempt the middle sequence: offer + free, then resume
                    Live& p = batch[batch.size() / 2];
                    offer(p);
                    kv.free(p.table);
                    pc.evict(static_cast<int64_t>(rng() % 3));  // maybe lose some of it
                    const int64_t got = admit(p);
                    resumed_hits += got > 0;
                    total_cached += got;
                }
                logits = run.compute(all, 3);
            }
            for (Live& s : batch) {
                offer(s);
                EXPECT_EQ(kv.free(s.table), 0);
            }
            ASSERT_EQ(kv.pool().check_integrity(), "");
            ASSERT_EQ(pc.check_integrity(), "");
            if (b0 % 2 == 0) pc.evict(static_cast<int64_t>(rng() % 6));
            for (const Live& s : batch) {
                const Output& w = want[s.req];
                ASSERT_EQ(s.out.tokens, w.tokens) << "request " << s.req;
                for (int k = 0; k < kNew; ++k)
                    ASSERT_EQ(0, std::memcmp(s.out.logits[static_cast<size_t>(k)].data(),
                                             w.logits[static_cast<size_t>(k)].data(),
                                             static_cast<size_t>(vocab) * sizeof(float)))
                        << "request " << s.req << " logits of generated token " << k << " differ";
            }
        }
        EXPECT_EQ(kv.pool().used_pages(), 0);
        const auto& st = pc.stats();
        EXPECT_GT(st.hit_requests, static_cast<int64_t>(reqs.size()) / 3);
        EXPECT_GT(st.evicted_pages, 10);
        EXPECT_GT(resumed_hits, 3);
        EXPECT_EQ(st.hit_tokens, total_cached);
        EXPECT_EQ(st.collisions_rejected, 0);
        std::printf(
            "[ prefix   ] %s: %zu requests, %lld hit (%lld tokens), %lld pages evicted, %lld "
            "resumed with hits\n",
            dt == model::RuntimeDType::F32 ? "f32" : "bf16", reqs.size(),
            static_cast<long long>(st.hit_requests), static_cast<long long>(st.hit_tokens),
            static_cast<long long>(st.evicted_pages), static_cast<long long>(resumed_hits));
    }
}
