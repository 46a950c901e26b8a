// Property tests of the KV page pool against a simple model of ownership: millions of random
// alloc / share / free / stale-free / double-free / verify operations.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <vector>

#include "kv/page_pool.h"
#include "kv/page_table.h"

using namespace warden::kv;

namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr int64_t kOps = 400'000;  // ASan is ~10x slower; the Release run does the millions
#else
constexpr int64_t kOps = 3'000'000;
#endif

// The reference model: which allocation (page, generation) each page currently holds and how
// many holders it has.
struct ModelPage {
    Generation gen = 1;
    int32_t holders = 0;
};

}  // namespace

TEST(KvPagePool, RandomOperationsMatchOwnershipModel) {
    constexpr int32_t kPages = 64;
    PagePool pool(kPages, 16, 0);
    std::vector<ModelPage> model(kPages + 1);
    std::vector<PageRef> live;   // one entry per holder
    std::vector<PageRef> stale;  // references to allocations that have ended
    std::mt19937_64 rng(12345);
    int64_t stale_checked = 0, valid_checked = 0, refused = 0;

    auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
    for (int64_t op = 0; op < kOps; ++op) {
        const int kind = static_cast<int>(rng() % 100);
        if (kind < 25) {  // allocate
            auto r = pool.allocate();
            int32_t free_in_model = 0;
            for (int32_t p = 1; p <= kPages; ++p)
                free_in_model += model[static_cast<size_t>(p)].holders == 0;
            if (free_in_model == 0) {
                ASSERT_FALSE(r.has_value());
                continue;
            }
            ASSERT_TRUE(r.has_value());
            ModelPage& m = model[static_cast<size_t>(r->page.v)];
            ASSERT_EQ(m.holders, 0) << "page " << r->page.v << " handed out while owned";
            ASSERT_EQ(r->gen, m.gen);
            m.holders = 1;
            live.push_back(*r);
        } else if (kind < 35 && !live.empty()) {  // share
            const PageRef r = live[pick(live.size())];
            ASSERT_EQ(pool.retain(r), PoolStatus::Ok);
            ++model[static_cast<size_t>(r.page.v)].holders;
            live.push_back(r);
        } else if (kind < 60 && !live.empty()) {  // valid release
            const size_t i = pick(live.size());
            const PageRef r = live[i];
            live[i] = live.back();
            live.pop_back();
            ASSERT_EQ(pool.release(r), PoolStatus::Ok);
            ModelPage& m = model[static_cast<size_t>(r.page.v)];
            if (--m.holders == 0) {
                ++m.gen;
                stale.push_back(r);
                if (stale.size() > 4096) stale.erase(stale.begin(), stale.begin() + 2048);
            }
        } else if (kind < 70 && !stale.empty()) {  // stale release / double free / stale share
            const PageRef r = stale[pick(stale.size())];
            const auto before_free = pool.free_pages();
            const PoolStatus s = (rng() & 1) ? pool.release(r) : pool.retain(r);
            ASSERT_NE(s, PoolStatus::Ok) << "stale reference to page " << r.page.v << " accepted";
            ASSERT_EQ(pool.free_pages(), before_free);
            ++refused;
        } else if (kind < 85) {  // verify a holder's reference or a stale one
            if (!live.empty()) {
                ASSERT_TRUE(pool.is_live(live[pick(live.size())])) << "valid access rejected";
                ++valid_checked;
            }
            if (!stale.empty()) {
                const PageRef r = stale[pick(stale.size())];
                ASSERT_FALSE(pool.is_live(r))
                    << "stale access to page " << r.page.v << " not detected";
                ++stale_checked;
            }
        } else {  // forged reference: the pool must agree with the model exactly
            const PageRef r{PageId{static_cast<int32_t>(rng() % (kPages + 3)) - 1}, 1 + rng() % 8};
            const bool in_range = r.page.v >= 1 && r.page.v <= kPages;
            const bool expect_live = in_range && model[static_cast<size_t>(r.page.v)].holders > 0 &&
                                     model[static_cast<size_t>(r.page.v)].gen == r.gen;
            ASSERT_EQ(pool.is_live(r), expect_live);
        }
        if (op % 4096 == 0) {
            ASSERT_EQ(pool.check_integrity(), "");
        }
    }
    ASSERT_EQ(pool.check_integrity(), "");
    for (const PageRef& r : live) ASSERT_EQ(pool.release(r), PoolStatus::Ok);
    EXPECT_EQ(pool.free_pages(), kPages);
    EXPECT_EQ(pool.check_integrity(), "");
    EXPECT_GT(stale_checked, kOps / 20);
    EXPECT_GT(valid_checked, kOps / 20);
    EXPECT_GT(refused, kOps / 50);
    EXPECT_EQ(pool.stats().refused, refused);
}

TEST(KvPagePool, DoubleFreeAndForeignFreeAreRefusedWithoutCorruption) {
    PagePool pool(4, 16, 64);
    const PageRef a = *pool.allocate();
    const PageRef b = *pool.allocate();
    EXPECT_EQ(pool.release(a), PoolStatus::Ok);
    EXPECT_EQ(pool.release(a), PoolStatus::StaleGeneration);                // double free
    EXPECT_EQ(pool.release(PageRef{PageId{0}, 1}), PoolStatus::BadPageId);  // the null page
    EXPECT_EQ(pool.release(PageRef{PageId{99}, 1}), PoolStatus::BadPageId);
    EXPECT_EQ(pool.release(PageRef{b.page, b.gen + 1}), PoolStatus::StaleGeneration);  // forged
    EXPECT_EQ(pool.free_pages(), 3);
    EXPECT_EQ(pool.check_integrity(), "");
    // Reuse: the new owner gets a new generation; the old reference stays stale.
    const PageRef a2 = *pool.allocate();
    EXPECT_EQ(a2.page, a.page);
    EXPECT_EQ(a2.gen, a.gen + 1);
    EXPECT_FALSE(pool.is_live(a));
    EXPECT_TRUE(pool.is_live(a2));
}

TEST(KvPagePool, ScrubOnFreeZeroesThePage) {
    PagePool pool(2, 4, 128, /*scrub_on_free=*/true);
    const PageRef a = *pool.allocate();
    for (int i = 0; i < 128; ++i) pool.data(a.page)[i] = 0xAB;
    ASSERT_EQ(pool.release(a), PoolStatus::Ok);
    for (int i = 0; i < 128; ++i) ASSERT_EQ(pool.data(a.page)[i], 0);
    EXPECT_EQ(pool.stats().scrubbed_bytes, 128);
}

TEST(KvPagePool, VerifierReportsFirstBadEntry) {
    PagePool pool(8, 16, 0);
    std::vector<PageRef> table;
    for (int i = 0; i < 5; ++i) table.push_back(*pool.allocate());
    EXPECT_FALSE(verify_table(pool, SeqId{7}, table).has_value());
    // Another owner frees page 3 early and it is reused: the table entry is now stale.
    ASSERT_EQ(pool.release(table[3]), PoolStatus::Ok);
    const PageRef reused = *pool.allocate();
    ASSERT_EQ(reused.page, table[3].page);
    auto v = verify_table(pool, SeqId{7}, table);
    ASSERT_TRUE(v.has_value());
    EXPECT_EQ(v->entry, 3);
    EXPECT_EQ(v->page, table[3].page);
    EXPECT_EQ(v->expected, table[3].gen);
    EXPECT_EQ(v->found, table[3].gen + 1);
    EXPECT_EQ(v->status, PoolStatus::StaleGeneration);
    EXPECT_NE(v->describe().find("seq 7"), std::string::npos);
}

TEST(KvPagePool, RejectsBadConstruction) {
    EXPECT_ANY_THROW(PagePool(0, 16, 0));
    EXPECT_ANY_THROW(PagePool(4, 0, 0));
    EXPECT_ANY_THROW(parse_integrity_mode("sometimes"));
    EXPECT_EQ(parse_integrity_mode("layer"), IntegrityMode::Layer);
}
