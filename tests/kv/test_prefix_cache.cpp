// The prefix cache: SipHash against the reference vectors; hits, misses and partial pages;
// tenant isolation (cache_salt narrows, declared shared prefixes are hit by everyone and the
// chain continues per tenant); forced hash collisions rejected by the token comparison;
// refcounts, LRU and leaf-first eviction; a bounded random-operation property test whose
// pages carry a fingerprint of the tokens (and scope) that produced them, so any wrong
// hand-out is seen in the page contents; and the shared-page faults, detected on exactly the
// holders of the stale reference.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <set>

#include "kv/fault_injector.h"
#include "kv/keyed_hash.h"
#include "kv/prefix_cache.h"
#include "util/error.h"

using namespace warden::kv;

namespace {

constexpr int32_t kPs = 4;
const HashKey kTestKey{0x0706050403020100ULL, 0x0f0e0d0c0b0a0908ULL};

PrefixCacheConfig cfg(uint64_t mask = ~uint64_t{0}) {
    PrefixCacheConfig c;
    c.page_size = kPs;
    c.model_id = 7;
    c.kv_format = 1;
    c.secret = kTestKey;
    c.test_hash_mask = mask;
    return c;
}

// Independent model of what a page holds: FNV-1a of the scope tag and every token up to the
// end of the page (the K/V of a page depends on all of them). Written into the page's bytes
// by whoever computes the page; an attached page must carry the attacher's own fingerprint.
uint64_t fingerprint(const std::string& tag, std::span<const int32_t> tokens, size_t end) {
    uint64_t h = 1469598103934665603ULL;
    auto mix = [&](const void* p, size_t n) {
        for (size_t i = 0; i < n; ++i)
            h = (h ^ static_cast<const uint8_t*>(p)[i]) * 1099511628211ULL;
    };
    mix(tag.data(), tag.size());
    mix(tokens.data(), end * sizeof(int32_t));
    return h;
}

struct Seq {
    Seq() = default;
    Seq(CacheScope sc, std::vector<int32_t> t) : scope(std::move(sc)), tokens(std::move(t)) {}
    CacheScope scope;
    std::vector<int32_t> tokens;
    PageTable table;
    int64_t cached = 0;
};

// A small harness: a pool whose page bytes carry fingerprints, a cache, declared prefixes
// known to the test independently.
struct Harness {
    PagePool pool;
    PrefixCache cache;
    std::vector<std::vector<int32_t>> declared;

    explicit Harness(int32_t pages, uint64_t mask = ~uint64_t{0})
        : pool(pages, kPs, 16), cache(pool, cfg(mask)) {}

    void declare(const std::vector<int32_t>& d) {
        cache.declare_shared_prefix(d);
        declared.push_back(d);
    }
    // The test's own rule: page i is shared iff it lies within the common prefix with a
    // declared prefix, rounded down to whole pages of that prefix.
    std::string tag(const Seq& s, size_t page) const {
        size_t best = 0;
        for (const auto& d : declared) {
            const size_t full = d.size() / kPs * kPs;
            size_t c = 0;
            while (c < full && c < s.tokens.size() && d[c] == s.tokens[c]) ++c;
            best = std::max(best, c / kPs * kPs);
        }
        if ((page + 1) * kPs <= best) return "shared";
        return s.scope.tenant + "\x1f" + s.scope.cache_salt;
    }
    uint64_t expected_fp(const Seq& s, size_t page) const {
        return fingerprint(tag(s, page), s.tokens, (page + 1) * kPs);
    }
    uint64_t stored_fp(PageId p) const {
        uint64_t v;
        std::memcpy(&v, pool.data(p), 8);
        return v;
    }

    // Admission + "prefill": attach what the cache has, compute (allocate + fingerprint) the
    // rest, evicting cached pages when the pool runs dry. False when even eviction cannot make
    // room (nothing is held then).
    bool admit(Seq& s) {
        s.cached = cache.attach(s.scope, s.tokens, s.table).cached_tokens;
        for (size_t i = 0; i < s.table.pages.size(); ++i)
            if (stored_fp(s.table.pages[i].page) != expected_fp(s, i)) {
                ADD_FAILURE() << "attached page " << i << " holds someone else's KV";
                return false;
            }
        return grow(s, static_cast<int64_t>(s.tokens.size()));
    }
    bool grow(Seq& s, int64_t n_tokens) {
        const int64_t need_pages = (n_tokens + kPs - 1) / kPs;
        while (static_cast<int64_t>(s.table.pages.size()) < need_pages) {
            auto r = pool.allocate();
            if (!r && cache.evict(1) == 1) r = pool.allocate();
            if (!r) {
                release(s);
                return false;
            }
            std::memset(pool.data(r->page), 0, 16);
            s.table.pages.push_back(*r);
        }
        for (int64_t i = s.table.n_tokens / kPs; i < n_tokens / kPs;
             ++i) {  // pages that became full
            const uint64_t fp = expected_fp(s, static_cast<size_t>(i));
            std::memcpy(pool.data(s.table.pages[static_cast<size_t>(i)].page), &fp, 8);
        }
        s.table.n_tokens = n_tokens;
        return true;
    }
    // Returns the releases the pool refused (stale entries).
    int64_t release(Seq& s) {
        int64_t refused = 0;
        for (const PageRef& r : s.table.pages) refused += pool.release(r) != PoolStatus::Ok;
        s.table = PageTable{};
        return refused;
    }
    void finish(Seq& s) {
        const OfferResult o = cache.offer(s.scope, s.tokens, s.table);
        EXPECT_FALSE(o.violation.has_value());
        EXPECT_EQ(release(s), 0);
    }
    void check() {
        ASSERT_EQ(pool.check_integrity(), "");
        ASSERT_EQ(cache.check_integrity(), "");
    }
};

std::vector<int32_t> seq_of(std::initializer_list<int32_t> v) {
    return v;
}
std::vector<int32_t> range(int32_t from, int32_t n) {
    std::vector<int32_t> v;
    for (int32_t i = 0; i < n; ++i) v.push_back(from + i);
    return v;
}
std::vector<int32_t> cat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

}  // namespace

TEST(KeyedHash, SipHash24ReferenceVectors) {
    // Reference vectors of the SipHash paper (key 00..0f, message 00 01 .. of length n).
    const std::map<size_t, uint64_t> want = {
        {0, 0x726fdb47dd0e0e31ULL}, {1, 0x74f839c593dc67fdULL},  {7, 0xab0200f58b01d137ULL},
        {8, 0x93f5f5799a932462ULL}, {15, 0xa129ca6149be45e5ULL}, {16, 0x3f2acc7f57c29bdbULL},
        {63, 0x958a324ceb064572ULL}};
    std::vector<uint8_t> msg(64);
    for (size_t i = 0; i < msg.size(); ++i) msg[i] = static_cast<uint8_t>(i);
    for (const auto& [n, h] : want) {
        EXPECT_EQ(siphash24(kTestKey, std::span<const uint8_t>(msg.data(), n)), h)
            << "length " << n;
        // Incremental feeding in every split of 1..9 bytes gives the same result.
        for (size_t step = 1; step <= 9; ++step) {
            SipHasher inc(kTestKey);
            for (size_t off = 0; off < n; off += step)
                inc.update(msg.data() + off, std::min(step, n - off));
            EXPECT_EQ(inc.finish(), h) << "length " << n << " fed " << step << " at a time";
        }
    }
    EXPECT_NE(random_hash_key(), random_hash_key());
}

TEST(PrefixCache, HitMissAndPartialPage) {
    Harness h(32);
    const CacheScope t{"tenant-a", ""};
    Seq a{t, range(100, 10)};  // 2 full pages + 2 tokens
    ASSERT_TRUE(h.admit(a));
    EXPECT_EQ(a.cached, 0);
    const auto a_pages = a.table.pages;
    const OfferResult o = h.cache.offer(a.scope, a.tokens, a.table);
    EXPECT_EQ(o.inserted, 2) << "only full pages are cached";
    EXPECT_EQ(h.release(a), 0);
    EXPECT_EQ(h.pool.cached_pages(), 2);
    EXPECT_EQ(h.pool.used_pages(), 0);
    EXPECT_EQ(h.pool.free_pages(), 30);
    EXPECT_EQ(h.cache.cached_pages(), 2);
    h.check();

    // Same first 8 tokens then different: both full pages hit, with their generations.
    Seq b{t, cat(range(100, 8), seq_of({7, 7, 7}))};
    ASSERT_TRUE(h.admit(b));
    EXPECT_EQ(b.cached, 8);
    EXPECT_EQ(b.table.pages[0], a_pages[0]);
    EXPECT_EQ(b.table.pages[1], a_pages[1]);
    EXPECT_EQ(h.pool.refcount(a_pages[0].page), 2);
    // A prompt that is exactly the cached pages: the last token must still be computed, so
    // only the first page attaches (the full-prefix-hit regression).
    Seq c{t, range(100, 8)};
    ASSERT_TRUE(h.admit(c));
    EXPECT_EQ(c.cached, 4);
    // Diverges inside page 1: one page.
    Seq d{t, cat(range(100, 5), seq_of({1, 2, 3, 4, 5}))};
    ASSERT_TRUE(h.admit(d));
    EXPECT_EQ(d.cached, 4);
    // Diverges at token 0: miss. Shorter than a page: miss.
    Seq e{t, cat(seq_of({5}), range(101, 9))};
    ASSERT_TRUE(h.admit(e));
    EXPECT_EQ(e.cached, 0);
    Seq f{t, seq_of({100, 101})};
    ASSERT_TRUE(h.admit(f));
    EXPECT_EQ(f.cached, 0);
    EXPECT_EQ(h.cache.probe(t, b.tokens), 8);
    h.check();

    const auto& st = h.cache.stats();
    EXPECT_EQ(st.lookups, 6);
    EXPECT_EQ(st.hit_requests, 3);
    EXPECT_EQ(st.hit_tokens, 16);
    EXPECT_EQ(st.miss_tokens, 10 + (11 - 8) + (8 - 4) + (10 - 4) + 10 + 2);
    EXPECT_EQ(st.collisions_rejected, 0);
    for (Seq* s : {&b, &c, &d, &e, &f}) h.finish(*s);
    h.check();
    EXPECT_EQ(h.pool.used_pages(), 0);
    PageTable not_empty;
    not_empty.pages.push_back(PageRef{PageId{1}, 1});
    EXPECT_THROW(h.cache.attach(t, b.tokens, not_empty), warden::util::Error);
}

TEST(PrefixCache, TenantIsolationSaltNarrowsSharedPrefixForAll) {
    Harness h(64);
    const auto sys = range(1000, 10);  // declared: 2 full pages shared (tokens 8, 9 are not)
    h.declare(sys);
    const auto prompt = cat(sys, range(5000, 9));  // 19 tokens: 4 full pages
    Seq a{{"A", ""}, prompt};
    ASSERT_TRUE(h.admit(a));
    h.finish(a);
    EXPECT_EQ(h.cache.cached_pages(), 4);
    EXPECT_EQ(h.cache.pinned_pages(), 2);

    // Tenant B, the very same prompt: only the two declared pages; everything after stays A's.
    Seq b{{"B", ""}, prompt};
    ASSERT_TRUE(h.admit(b));
    EXPECT_EQ(b.cached, 8);
    // Tenant A with a client cache_salt: narrowed, so it does not see its own unsalted
    // pages beyond the shared prefix.
    Seq as{{"A", "client-salt"}, prompt};
    ASSERT_TRUE(h.admit(as));
    EXPECT_EQ(as.cached, 8);
    // Tenant A unsalted: all four.
    Seq a2{{"A", ""}, prompt};
    ASSERT_TRUE(h.admit(a2));
    EXPECT_EQ(a2.cached, 16);
    // A salt can never widen: ("A", "") vs ("", "A") vs ("A" + "\0", "") are distinct scopes.
    for (const CacheScope& sc :
         {CacheScope{"", "A"}, CacheScope{std::string("A\0", 2), ""}, CacheScope{"A\x1f", ""}}) {
        Seq x{sc, prompt};
        ASSERT_TRUE(h.admit(x));
        EXPECT_EQ(x.cached, 8);
        h.finish(x);
    }
    const auto a2_pages = a2.table.pages;
    h.finish(b);
    h.finish(as);
    h.finish(a2);
    // B's own chain continues after the shared pages: B now hits its own pages.
    Seq b2{{"B", ""}, prompt};
    ASSERT_TRUE(h.admit(b2));
    EXPECT_EQ(b2.cached, 16);
    EXPECT_EQ(b2.table.pages[0], a2_pages[0]);                 // shared
    EXPECT_FALSE(b2.table.pages[2].page == a2_pages[2].page);  // B's own
    EXPECT_FALSE(b2.table.pages[3].page == a2_pages[3].page);
    h.finish(b2);
    // A prompt that shares only the first declared page hits that page, for anyone.
    Seq p{{"C", ""}, cat(range(1000, 4), range(7000, 6))};
    ASSERT_TRUE(h.admit(p));
    EXPECT_EQ(p.cached, 4);
    h.finish(p);
    h.check();
    // Shared pages are pinned: eviction frees every tenant page and none of them.
    const int64_t evictable = h.cache.evictable_pages();
    EXPECT_EQ(h.cache.evict(1000), evictable);
    EXPECT_EQ(h.cache.cached_pages(), 2);
    EXPECT_EQ(h.cache.pinned_pages(), 2);
    Seq z{{"Z", ""}, prompt};
    ASSERT_TRUE(h.admit(z));
    EXPECT_EQ(z.cached, 8);
    h.finish(z);
    EXPECT_EQ(h.cache.stats().collisions_rejected, 0);
    h.check();
}

TEST(PrefixCache, ForcedCollisionsAreRejectedByTokenComparison) {
    Harness h(64, /*mask=*/0);  // every key is 0: every lookup sees every entry as a candidate
    const CacheScope a{"A", ""}, b{"B", ""};
    Seq x{a, cat(range(10, 4), range(20, 5))};  // pages [10..13] [20..23]
    Seq z{a, cat(range(30, 4), seq_of({1}))};   // page [30..33]
    ASSERT_TRUE(h.admit(x));
    ASSERT_TRUE(h.admit(z));
    h.finish(x);
    h.finish(z);
    // Other tokens: all candidates rejected.
    Seq m{a, range(40, 9)};
    ASSERT_TRUE(h.admit(m));
    EXPECT_EQ(m.cached, 0);
    EXPECT_GT(h.cache.stats().collisions_rejected, 0);
    // Same tokens, other tenant: rejected by the scope comparison.
    Seq o{b, x.tokens};
    ASSERT_TRUE(h.admit(o));
    EXPECT_EQ(o.cached, 0);
    // [30..33][20..23]: page 1 has the same tokens and scope as x's page 1, but its parent is
    // z's page, not x's: rejected by the parent comparison (its KV saw other tokens).
    Seq q{a, cat(range(30, 4), range(20, 5))};
    ASSERT_TRUE(h.admit(q));
    EXPECT_EQ(q.cached, 4);
    // The right tokens still hit, with the right pages (admit checked the fingerprints).
    Seq r{a, x.tokens};
    ASSERT_TRUE(h.admit(r));
    EXPECT_EQ(r.cached, 8);
    for (Seq* s : {&m, &o, &q, &r}) h.finish(*s);
    h.check();
}

TEST(PrefixCache, RefcountsLruAndLeafFirstEviction) {
    Harness h(16);
    const CacheScope t{"A", ""};
    Seq p1{t, cat(range(100, 12), seq_of({0}))};  // 3 full pages
    Seq p2{t, cat(range(200, 8), seq_of({0}))};   // 2
    Seq p3{t, cat(range(300, 8), seq_of({0}))};   // 2
    for (Seq* s : {&p1, &p2, &p3}) ASSERT_TRUE(h.admit(*s));
    const auto pages1 = p1.table.pages, pages2 = p2.table.pages, pages3 = p3.table.pages;
    for (Seq* s : {&p1, &p2, &p3}) h.finish(*s);
    EXPECT_EQ(h.cache.cached_pages(), 7);
    EXPECT_EQ(h.pool.cached_pages(), 7);
    // Use p1 again (it becomes most recent), and keep p3 attached (referenced).
    Seq u1{t, p1.tokens};
    ASSERT_TRUE(h.admit(u1));
    EXPECT_EQ(u1.cached, 12);
    h.finish(u1);
    Seq hold{t, p3.tokens};
    ASSERT_TRUE(h.admit(hold));
    EXPECT_EQ(hold.cached, 8);
    EXPECT_EQ(h.pool.cached_pages(), 5);  // p3's two pages are in use now
    EXPECT_EQ(h.cache.evictable_pages(), 5);
    h.check();
    // LRU: p2 is the oldest unreferenced chain; its leaf goes first, then its root.
    EXPECT_EQ(h.cache.evict(1), 1);
    EXPECT_FALSE(h.pool.is_live(pages2[1]));
    EXPECT_EQ(h.pool.generation(pages2[1].page), pages2[1].gen + 1);
    EXPECT_TRUE(h.pool.is_live(pages2[0]));
    EXPECT_EQ(h.cache.evict(1), 1);
    EXPECT_FALSE(h.pool.is_live(pages2[0]));
    // Then p1, leaf first. p3 is referenced and stays whatever we ask for.
    EXPECT_EQ(h.cache.evict(2), 2);
    EXPECT_FALSE(h.pool.is_live(pages1[2]));
    EXPECT_FALSE(h.pool.is_live(pages1[1]));
    EXPECT_TRUE(h.pool.is_live(pages1[0]));
    EXPECT_EQ(h.cache.evict(100), 1);
    EXPECT_EQ(h.cache.cached_pages(), 2);
    EXPECT_TRUE(h.pool.is_live(pages3[0]) && h.pool.is_live(pages3[1]));
    EXPECT_EQ(h.cache.stats().evicted_pages, 5);
    h.check();
    // Evicted chains miss; the held one still hits after its holder leaves.
    Seq m2{t, p2.tokens};
    ASSERT_TRUE(h.admit(m2));
    EXPECT_EQ(m2.cached, 0);
    h.finish(hold);
    Seq u3{t, p3.tokens};
    ASSERT_TRUE(h.admit(u3));
    EXPECT_EQ(u3.cached, 8);
    h.finish(u3);
    h.finish(m2);
    // Branches: [a][b][c] and [a][b][d] share two pages; evicting one page takes a leaf.
    Seq br1{t, cat(range(500, 12), seq_of({0}))};
    Seq br2{t, cat(cat(range(500, 8), range(900, 4)), seq_of({0}))};
    h.cache.evict(100);
    ASSERT_TRUE(h.admit(br1));
    h.finish(br1);
    ASSERT_TRUE(h.admit(br2));
    EXPECT_EQ(br2.cached, 8);
    h.finish(br2);
    EXPECT_EQ(h.cache.cached_pages(), 4);
    EXPECT_EQ(h.cache.evict(1), 1);
    EXPECT_EQ(h.cache.probe(t, br1.tokens), 8);  // br1's leaf went (older); root and middle stay
    EXPECT_EQ(h.cache.probe(t, br2.tokens), 12);
    h.check();
}

TEST(PrefixCache, PreemptedSequenceKeepsItsPagesCachedAndResumes) {
    Harness h(16);
    const CacheScope t{"A", ""};
    Seq s{t, range(100, 9)};
    ASSERT_TRUE(h.admit(s));
    h.finish(s);
    // A sequence attaches 2 cached pages, computes its own, decodes a few tokens...
    Seq r{t, cat(range(100, 9), seq_of({1, 2, 3}))};
    ASSERT_TRUE(h.admit(r));
    EXPECT_EQ(r.cached, 8);
    r.tokens.push_back(4);
    r.tokens.push_back(5);
    ASSERT_TRUE(h.grow(r, static_cast<int64_t>(r.tokens.size())));  // 14 tokens: 3 full pages
    // ... and is preempted: its full pages are offered, its table released.
    const OfferResult o = h.cache.offer(r.scope, r.tokens, r.table);
    EXPECT_EQ(o.already_cached, 2);
    EXPECT_EQ(o.inserted, 1);
    EXPECT_EQ(h.release(r), 0);
    h.check();
    // Re-admitted with prompt + generated tokens: recomputes only the partial page.
    Seq back{t, r.tokens};
    ASSERT_TRUE(h.admit(back));
    EXPECT_EQ(back.cached, 12);
    h.finish(back);
    // A stale entry (its page freed under the cache and reused) is never handed out.
    PageTable probe_table;
    ASSERT_EQ(h.cache.attach(t, back.tokens, probe_table).cached_tokens, 12);
    const auto fx = apply_shared_fault(SharedFaultKind::ReuseAfterEvict, h.pool, probe_table, 1);
    ASSERT_TRUE(fx.reused.has_value());
    EXPECT_TRUE(verify_table(h.pool, SeqId{1}, probe_table.pages).has_value());
    Seq again{t, back.tokens};
    ASSERT_TRUE(h.admit(again));  // admit also checks the fingerprints of what it got
    EXPECT_EQ(again.cached, 4);
    EXPECT_EQ(h.cache.stats().stale_dropped, 2);  // the stale entry and its child
    h.finish(again);
    for (const PageRef& p : probe_table.pages) (void)h.pool.release(p);
    ASSERT_EQ(h.pool.release(*fx.reused), PoolStatus::Ok);
    h.check();
}

// Bounded random operations against the fingerprint model: after every operation the pool
// and the cache are consistent, every live table verifies, every attached page carries the
// attacher's own fingerprint (never another tenant's or other tokens' KV), and the pool's
// used/cached counts match the test's own bookkeeping.
TEST(PrefixCache, RandomOperationsKeepPoolAndCacheConsistent) {
#if defined(__SANITIZE_ADDRESS__)
    constexpr int64_t kOps = 40'000;
#else
    constexpr int64_t kOps = 200'000;
#endif
    Harness h(48);
    std::mt19937_64 rng(2024);
    auto rnd = [&](uint64_t n) { return static_cast<int64_t>(rng() % n); };
    // A few prefix families so that hits, branches and shared prefixes are common.
    std::vector<std::vector<int32_t>> bases;
    for (int b = 0; b < 6; ++b)
        bases.push_back(range(1000 * (b + 1), 4 + static_cast<int32_t>(rnd(14))));
    h.declare(bases[0]);
    h.declare(cat(bases[1], range(77, 3)));
    const std::vector<CacheScope> scopes = {{"A", ""}, {"B", ""}, {"A", "s1"}, {"C", ""}};
    std::vector<Seq> live;
    int64_t hits = 0, evicted = 0, offers = 0, refused_admit = 0;
    for (int64_t op = 0; op < kOps; ++op) {
        const int64_t k = rnd(100);
        if (k < 30 && live.size() < 10) {  // admit
            Seq s;
            s.scope = scopes[static_cast<size_t>(rnd(scopes.size()))];
            s.tokens = bases[static_cast<size_t>(rnd(bases.size()))];
            s.tokens.resize(static_cast<size_t>(rnd(static_cast<uint64_t>(s.tokens.size())) + 1));
            const int64_t extra = rnd(12);
            for (int64_t i = 0; i < extra; ++i) s.tokens.push_back(static_cast<int32_t>(rnd(3)));
            if (h.admit(s)) {
                hits += s.cached > 0;
                live.push_back(std::move(s));
            } else {
                ++refused_admit;
            }
        } else if (k < 50 && !live.empty()) {  // decode a few tokens
            const size_t i = static_cast<size_t>(rnd(live.size()));
            const int64_t n = 1 + rnd(5);
            for (int64_t j = 0; j < n; ++j) live[i].tokens.push_back(static_cast<int32_t>(rnd(3)));
            if (!h.grow(live[i], static_cast<int64_t>(live[i].tokens.size())))
                live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
        } else if (k < 60 && !live.empty()) {  // offer mid-flight (idempotent)
            Seq& s = live[static_cast<size_t>(rnd(live.size()))];
            ASSERT_FALSE(h.cache.offer(s.scope, s.tokens, s.table).violation.has_value());
            ++offers;
        } else if (k < 80 && !live.empty()) {  // finish (offer + release) or abort (release only)
            const size_t i = static_cast<size_t>(rnd(live.size()));
            if (rnd(4) != 0)
                h.finish(live[i]);
            else
                ASSERT_EQ(h.release(live[i]), 0);
            live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
        } else if (k < 88) {  // memory pressure
            const int64_t before = h.pool.free_pages();
            const int64_t can = h.cache.evictable_pages();
            const int64_t want = rnd(6);
            const int64_t got = h.cache.evict(want);
            ASSERT_EQ(got, std::min(want, can));
            ASSERT_EQ(h.pool.free_pages(), before + got);
            evicted += got;
        } else if (k < 95 && !live.empty()) {  // probe never changes anything it reports
            const Seq& s = live[static_cast<size_t>(rnd(live.size()))];
            const int64_t a = h.cache.probe(s.scope, s.tokens),
                          b = h.cache.probe(s.scope, s.tokens);
            ASSERT_EQ(a, b);
        } else if (!live.empty()) {  // an attach's pages are exactly the cached chain
            const Seq& s = live[static_cast<size_t>(rnd(live.size()))];
            Seq t{s.scope, s.tokens};
            const int64_t pr = h.cache.probe(t.scope, t.tokens);
            ASSERT_TRUE(h.admit(t) || t.table.pages.empty());
            if (!t.table.pages.empty()) {
                ASSERT_EQ(t.cached, pr);
                h.finish(t);
            }
        }
        h.check();
        std::set<int32_t> held;
        for (const Seq& s : live) {
            ASSERT_FALSE(verify_table(h.pool, SeqId{0}, s.table.pages).has_value());
            for (const PageRef& r : s.table.pages) held.insert(r.page.v);
        }
        ASSERT_EQ(h.pool.used_pages(), static_cast<int32_t>(held.size()));
        ASSERT_EQ(h.pool.free_pages() + h.pool.used_pages() + h.pool.cached_pages(),
                  h.pool.capacity());
    }
    for (Seq& s : live) h.finish(s);
    h.check();
    EXPECT_EQ(h.pool.used_pages(), 0);
    EXPECT_EQ(h.cache.clear(), h.pool.cached_pages());
    EXPECT_EQ(h.pool.free_pages(), h.pool.capacity());
    h.check();
    EXPECT_GT(hits, kOps / 100);
    EXPECT_GT(evicted, kOps / 200);
    EXPECT_GT(offers, kOps / 50);
    EXPECT_GT(h.cache.stats().duplicate_pages, 0);
    EXPECT_EQ(h.cache.stats().collisions_rejected, 0);
    (void)refused_admit;
}

// Shared-page faults: each is detected by verify_table on every holder of the stale
// reference and on nobody else; the cache never hands the broken page out again; the pool
// and the cache stay consistent after the holders are aborted.
TEST(PrefixCache, SharedPageFaultsDetectedOnHoldersOnly) {
#if defined(__SANITIZE_ADDRESS__)
    constexpr int kRounds = 600;
#else
    constexpr int kRounds = 3000;
#endif
    Harness h(96);
    FaultInjector fi(
        FaultSpec::parse("evict_while_referenced=1,reuse_after_evict=1,stale_attach=1,seed=5"));
    std::mt19937_64 rng(99);
    auto rnd = [&](uint64_t n) { return static_cast<int64_t>(rng() % n); };
    const auto sys = range(1, 8);
    h.declare(sys);
    const std::vector<CacheScope> scopes = {{"A", ""}, {"B", ""}, {"C", "x"}};
    std::array<int64_t, kSharedFaultKinds> detected{}, injected{};
    int64_t holders_total = 0, bystanders = 0;
    std::vector<Seq> live;
    std::vector<PageRef> foreign;  // pages reused by a "new owner"
    for (int round = 0; round < kRounds; ++round) {
        // Keep 6..12 sequences alive, most of them sharing cached pages.
        while (live.size() < 6 + static_cast<size_t>(rnd(7))) {
            Seq s;
            s.scope = scopes[static_cast<size_t>(rnd(scopes.size()))];
            s.tokens = cat(
                sys, range(100 * static_cast<int32_t>(rnd(3)), static_cast<int32_t>(4 + rnd(8))));
            s.tokens.push_back(static_cast<int32_t>(rnd(50)));
            if (!h.admit(s)) break;
            h.cache.offer(s.scope, s.tokens, s.table);
            live.push_back(std::move(s));
        }
        // Pick a victim entry that is a cached (shared) page.
        std::vector<std::pair<size_t, size_t>> cand;
        for (size_t i = 0; i < live.size(); ++i)
            for (size_t j = 0; j < live[i].table.pages.size(); ++j)
                if (h.pool.is_cache_held(live[i].table.pages[j].page)) cand.push_back({i, j});
        ASSERT_FALSE(cand.empty());
        const auto [vi, vj] = cand[static_cast<size_t>(rnd(cand.size()))];
        const auto kind = static_cast<SharedFaultKind>(rnd(kSharedFaultKinds));
        ASSERT_TRUE(fi.roll(kind));
        const PageRef before = live[vi].table.pages[vj];
        const SharedFaultEffect fx = apply_shared_fault(kind, h.pool, live[vi].table, vj);
        ++injected[static_cast<size_t>(kind)];
        if (fx.reused) {  // the new owner writes its own data into the page
            const uint64_t junk = 0xdeadbeefULL ^ static_cast<uint64_t>(round);
            std::memcpy(h.pool.data(fx.reused->page), &junk, 8);
            foreign.push_back(*fx.reused);
        }
        // Holders of the stale reference: for stale_attach only the victim; for evictions
        // everyone whose table names the evicted allocation.
        std::vector<char> holder(live.size(), 0);
        for (size_t i = 0; i < live.size(); ++i)
            for (const PageRef& r : live[i].table.pages)
                if (r == fx.broken || (kind != SharedFaultKind::StaleAttach && r == before))
                    holder[i] = 1;
        ASSERT_TRUE(holder[vi]);
        bool all_detected = true;
        for (size_t i = 0; i < live.size(); ++i) {
            const auto v =
                verify_table(h.pool, SeqId{static_cast<int64_t>(i)}, live[i].table.pages);
            ASSERT_EQ(v.has_value(), static_cast<bool>(holder[i]))
                << shared_fault_kind_name(kind) << ": sequence " << i
                << (holder[i] ? " holds" : " does not hold") << " the stale reference";
            if (holder[i]) all_detected = all_detected && v->page == fx.broken.page;
            holders_total += holder[i];
            bystanders += !holder[i];
        }
        detected[static_cast<size_t>(kind)] += all_detected;
        // Abort the holders (their release of the stale entry is refused), finish a couple of
        // the others normally.
        for (size_t i = live.size(); i-- > 0;) {
            if (holder[i]) {
                EXPECT_GE(h.release(live[i]), 1);
                live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
            } else if (rnd(3) == 0) {
                h.finish(live[i]);
                live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
            }
        }
        if (foreign.size() > 4) {
            for (const PageRef& p : foreign) ASSERT_EQ(h.pool.release(p), PoolStatus::Ok);
            foreign.clear();
        }
        // Whatever is attached next carries the right fingerprint (admit checks it).
        Seq again;
        again.scope = scopes[static_cast<size_t>(rnd(scopes.size()))];
        again.tokens = cat(sys, range(100 * static_cast<int32_t>(rnd(3)), 12));
        if (h.admit(again)) h.finish(again);
        h.check();
        if (rnd(10) == 0) h.cache.evict(static_cast<int64_t>(rnd(20)));
    }
    for (Seq& s : live) h.finish(s);
    for (const PageRef& p : foreign) ASSERT_EQ(h.pool.release(p), PoolStatus::Ok);
    h.check();
    EXPECT_EQ(h.pool.used_pages(), 0);
    for (int k = 0; k < kSharedFaultKinds; ++k) {
        EXPECT_GT(injected[static_cast<size_t>(k)], kRounds / 5)
            << shared_fault_kind_name(static_cast<SharedFaultKind>(k));
        EXPECT_EQ(detected[static_cast<size_t>(k)], injected[static_cast<size_t>(k)])
            << shared_fault_kind_name(static_cast<SharedFaultKind>(k)) << " not always detected";
    }
    EXPECT_EQ(fi.injected_shared(), injected);
    EXPECT_GT(bystanders, kRounds);
    EXPECT_GT(h.cache.stats().stale_dropped, 0);
    std::printf(
        "[ shared   ] %lld faults, %lld holder checks failed as required, %lld bystanders verified "
        "clean\n",
        static_cast<long long>(injected[0] + injected[1] + injected[2]),
        static_cast<long long>(holders_total), static_cast<long long>(bystanders));
}

TEST(PrefixCache, FaultSpecParsesSharedKinds) {
    const FaultSpec s = FaultSpec::parse("stale_attach=0.5,reuse_after_evict=0.25");
    EXPECT_EQ(s.shared_probability[static_cast<size_t>(SharedFaultKind::StaleAttach)], 0.5);
    EXPECT_EQ(s.shared_probability[static_cast<size_t>(SharedFaultKind::ReuseAfterEvict)], 0.25);
    EXPECT_EQ(s.shared_probability[static_cast<size_t>(SharedFaultKind::EvictWhileReferenced)],
              0.0);
    EXPECT_TRUE(s.any());
    const FaultSpec all = FaultSpec::parse("all=0.1");
    for (double p : all.shared_probability) EXPECT_EQ(p, 0.1);
    EXPECT_THROW(FaultSpec::parse("evict_while=0.1"), warden::util::Error);
}

TEST(PrefixCache, RejectsMismatchedPageSize) {
    PagePool pool(4, 8, 0);
    EXPECT_THROW(PrefixCache(pool, cfg()), warden::util::Error);
}

// Copy-on-write of a partially matching page (copy_partial_pages): after the full-page chain,
// the cached continuation sharing the most leading tokens with the prompt is copied into a
// fresh private page; candidates of another scope are never used; the last token is always
// left to compute; without a free page nothing is copied.
TEST(PrefixCache, PartiallyMatchingPageIsCopiedNeverShared) {
    PagePool pool(8, kPs, 64);
    PrefixCacheConfig c;
    c.page_size = kPs;
    c.secret = kTestKey;
    c.copy_partial_pages = true;
    PrefixCache cache(pool, c);
    const CacheScope a{"a", ""}, b{"b", ""};
    // Tenant a computes 12 tokens (3 full pages) and offers them; page bytes = a pattern per page.
    auto compute = [&](const CacheScope& s, const std::vector<int32_t>& toks, uint8_t fill) {
        PageTable t;
        for (size_t i = 0; i < toks.size() / kPs; ++i) {
            auto r = pool.allocate();
            EXPECT_TRUE(r.has_value());
            std::memset(pool.data(r->page), fill + static_cast<int>(i), 64);
            t.pages.push_back(*r);
        }
        t.n_tokens = static_cast<int64_t>(toks.size());
        EXPECT_FALSE(cache.offer(s, toks, t).violation.has_value());
        for (const PageRef& r : t.pages) EXPECT_EQ(pool.release(r), PoolStatus::Ok);
    };
    compute(a, range(100, 12), 10);
    compute(b, cat(range(100, 4), seq_of({104, 105, 0, 0})),
            50);  // b's page 1 matches 2 tokens too
    ASSERT_EQ(pool.cached_pages(), 5);

    // a's prompt: page 0 full match, page 1 matches 3 tokens (104 105 106), then differs.
    PageTable t;
    const auto prompt = cat(range(100, 7), seq_of({9, 9, 9}));
    const AttachResult r = cache.attach(a, prompt, t);
    EXPECT_EQ(r.cached_pages, 1);
    EXPECT_EQ(r.copied_tokens, 3);
    EXPECT_EQ(r.cached_tokens, 7);
    EXPECT_EQ(t.n_tokens, 7);
    ASSERT_EQ(t.pages.size(), 2u);
    EXPECT_EQ(pool.refcount(t.pages[1].page), 1) << "the copy is private";
    EXPECT_FALSE(pool.is_cache_held(t.pages[1].page));
    EXPECT_EQ(pool.data(t.pages[1].page)[0], 11) << "a's page 1 was copied, not b's (fill 51)";
    EXPECT_EQ(pool.data(t.pages[1].page)[63], 11);
    EXPECT_EQ(cache.stats().copied_tokens, 3);
    for (const PageRef& p : t.pages) EXPECT_EQ(pool.release(p), PoolStatus::Ok);

    // b never gets a's continuation: b's own page 1 matches only 2 tokens (104 105).
    PageTable tb;
    const AttachResult rb = cache.attach(b, prompt, tb);
    EXPECT_EQ(rb.cached_tokens, 4 + 2);
    EXPECT_EQ(pool.data(tb.pages[1].page)[0], 51);
    for (const PageRef& p : tb.pages) EXPECT_EQ(pool.release(p), PoolStatus::Ok);

    // The last token is always computed: a prompt of exactly 8 cached tokens copies 3, not 4.
    PageTable t8;
    EXPECT_EQ(cache.attach(a, range(100, 8), t8).cached_tokens, 7);
    // No free page: no copy (only the full pages attach).
    std::vector<PageRef> hog;
    while (auto h = pool.allocate()) hog.push_back(*h);
    PageTable t9;
    const AttachResult r9 = cache.attach(a, prompt, t9);
    EXPECT_EQ(r9.cached_tokens, 4);
    EXPECT_EQ(r9.copied_tokens, 0);
    for (PageTable* x : {&t8, &t9})
        for (const PageRef& p : x->pages) EXPECT_EQ(pool.release(p), PoolStatus::Ok);
    for (const PageRef& p : hog) EXPECT_EQ(pool.release(p), PoolStatus::Ok);
    EXPECT_EQ(pool.check_integrity(), "");
    EXPECT_EQ(cache.check_integrity(), "");
}
