// The KV hand-off's decode-side checks: a reservation verifies only when every reserved page is
// still live with its generation, the manifest names exactly those pages and tokens, every
// payload checksum matches and the fingerprints agree; release() always returns every page.
// The same holds when the checksums are compared apart (check_payload, the decode server's
// verifier thread) and the rest is checked later on the pool's thread.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "kv/kv_handoff.h"

using namespace warden;
using namespace warden::kv;

namespace {

KvCacheConfig small_config(kernels::KvType t = kernels::KvType::BF16) {
    auto c = KvCacheConfig::shaped(2, 2, 16, t, 16);
    c.budget_bytes = kv_budget_for_tokens(c, 16 * 32);
    return c;
}

// Writes random bytes into the reserved pages (the remote writer) and returns the manifest a
// correct sender would send.
HandoffManifest fill(KvCache& kv, const KvHandoff& h, uint64_t fp, std::mt19937_64& rng) {
    for (const PageRef& r : h.pages()) {
        uint8_t* d = kv.pool().data(r.page);
        for (int64_t i = 0; i < kv.bytes_per_page(); ++i) d[i] = static_cast<uint8_t>(rng());
    }
    HandoffManifest m;
    m.transfer_id = h.transfer_id();
    m.fingerprint = fp;
    m.n_tokens = h.n_tokens();
    m.checksums = page_checksums(kv, h.pages());
    return m;
}

PayloadCheck payload_of(KvCache& kv, const KvHandoff& h, const HandoffManifest& m) {
    const std::vector<uint8_t*> data = h.page_data(kv);
    const std::vector<const uint8_t*> pages(data.begin(), data.end());
    return check_payload(pages, static_cast<size_t>(kv.bytes_per_page()), m);
}

}  // namespace

TEST(KvHandoff, FingerprintSeparatesLayoutsAndModels) {
    const auto a = small_config(kernels::KvType::BF16), b = small_config(kernels::KvType::FP8_E4M3);
    EXPECT_EQ(kv_layout_fingerprint(a, "m"), kv_layout_fingerprint(a, "m"));
    EXPECT_NE(kv_layout_fingerprint(a, "m"), kv_layout_fingerprint(b, "m"));
    EXPECT_NE(kv_layout_fingerprint(a, "m"), kv_layout_fingerprint(a, "other"));
    auto c = a;
    c.page_size = 32;
    EXPECT_NE(kv_layout_fingerprint(a, "m"), kv_layout_fingerprint(c, "m"));
}

TEST(KvHandoff, EveryFaultIsRefusedAndNothingLeaks) {
    KvCache kv(small_config());
    const uint64_t fp = kv_layout_fingerprint(small_config(), "model");
    std::mt19937_64 rng(7);
    const int32_t cap = kv.pool().capacity();
    int64_t accepted = 0, refused = 0;
    for (int iter = 0; iter < 3000; ++iter) {
        const int64_t n_tokens = 1 + static_cast<int64_t>(rng() % 120);
        auto h = KvHandoff::reserve(kv, n_tokens, static_cast<uint64_t>(iter) + 1, fp);
        ASSERT_TRUE(h.has_value());
        ASSERT_EQ(static_cast<int64_t>(h->pages().size()), kv.pages_for(n_tokens));
        HandoffManifest m = fill(kv, *h, fp, rng);
        const int fault = static_cast<int>(rng() % 7);
        HandoffStatus want = HandoffStatus::Ok;
        switch (fault) {
            case 1:  // one byte of one page flipped in transit
                kv.pool().data(h->pages()[rng() % h->pages().size()].page)[rng() % 64] ^= 0x10;
                want = HandoffStatus::Checksum;
                break;
            case 2:  // a page never arrived
                m.checksums.pop_back();
                want = HandoffStatus::PageCount;
                break;
            case 3:
                m.fingerprint ^= 1;
                want = HandoffStatus::Fingerprint;
                break;
            case 4:  // a replayed manifest of an earlier transfer
                m.transfer_id += 100000;
                want = HandoffStatus::WrongTransfer;
                break;
            case 5: {  // a reserved page was freed (and reallocated) behind the reservation
                const PageRef victim = h->pages()[rng() % h->pages().size()];
                ASSERT_EQ(kv.pool().release(victim), PoolStatus::Ok);
                want = HandoffStatus::PageNotLive;
                break;
            }
            case 6:
                m.n_tokens += 1;
                want = HandoffStatus::TokenCount;
                break;
            default:
                break;
        }
        const HandoffCheck c = h->verify(kv, m);
        ASSERT_EQ(c.status, want) << c.describe() << " fault " << fault;
        const HandoffCheck split = h->verify(kv, m, payload_of(kv, *h, m));
        ASSERT_EQ(split.status, want) << split.describe() << " fault " << fault;
        ASSERT_EQ(split.page_index, c.page_index);
        if (c.ok()) {
            ++accepted;
            PageTable t = h->take();
            EXPECT_EQ(t.n_tokens, n_tokens);
            EXPECT_EQ(h->release(kv), 0);  // empty after take
            EXPECT_EQ(kv.free(t), 0);
        } else {
            ++refused;
            EXPECT_EQ(h->release(kv), fault == 5 ? 1 : 0);
        }
        ASSERT_EQ(kv.pool().free_pages(), cap);
        ASSERT_EQ(kv.pool().check_integrity(), "");
    }
    EXPECT_GT(accepted, 300);
    EXPECT_GT(refused, 2000);
}

TEST(KvHandoff, ReserveIsAllOrNothing) {
    KvCache kv(small_config());
    const int32_t cap = kv.pool().capacity();
    EXPECT_FALSE(KvHandoff::reserve(kv, (cap + 1) * 16, 1, 0).has_value());
    EXPECT_FALSE(KvHandoff::reserve(kv, 0, 1, 0).has_value());
    EXPECT_EQ(kv.pool().free_pages(), cap);
    auto h = KvHandoff::reserve(kv, cap * 16, 2, 0);
    ASSERT_TRUE(h.has_value());
    EXPECT_EQ(kv.pool().free_pages(), 0);
    const auto off = h->page_offsets(kv);
    EXPECT_EQ(off[0], static_cast<uint64_t>(h->pages()[0].page.v * kv.bytes_per_page()));
    h->release(kv);
    EXPECT_EQ(kv.pool().free_pages(), cap);
}

TEST(KvHandoff, PayloadCheckIsTrustedOnlyForItsTransferAndLiveness) {
    KvCache kv(small_config());
    const uint64_t fp = kv_layout_fingerprint(small_config(), "model");
    std::mt19937_64 rng(11);
    auto h = KvHandoff::reserve(kv, 40, 5, fp);
    ASSERT_TRUE(h.has_value());
    const HandoffManifest m = fill(kv, *h, fp, rng);
    const PayloadCheck good = payload_of(kv, *h, m);
    EXPECT_EQ(good.n_pages, 3);
    EXPECT_EQ(good.first_bad, -1);
    EXPECT_TRUE(h->verify(kv, m, good).ok());

    // Not computed, computed for another transfer or page count: refused, never trusted.
    EXPECT_EQ(h->verify(kv, m, PayloadCheck{}).status, HandoffStatus::Checksum);
    PayloadCheck other = good;
    other.transfer_id += 1;
    EXPECT_EQ(h->verify(kv, m, other).status, HandoffStatus::Checksum);
    PayloadCheck fewer = good;
    fewer.n_pages -= 1;
    EXPECT_EQ(h->verify(kv, m, fewer).status, HandoffStatus::Checksum);
    // A count mismatch is reported as such, the payload left uncompared.
    HandoffManifest short_m = m;
    short_m.checksums.pop_back();
    EXPECT_EQ(payload_of(kv, *h, short_m).n_pages, -1);
    EXPECT_EQ(h->verify(kv, short_m, payload_of(kv, *h, short_m)).status, HandoffStatus::PageCount);

    // The payload was clean when compared; a page freed and reallocated afterwards (before the
    // first step) is still caught by the generation check at verify time.
    const PageRef victim = h->pages()[1];
    ASSERT_EQ(kv.pool().release(victim), PoolStatus::Ok);
    PageTable other_owner;
    ASSERT_TRUE(kv.reserve(other_owner, kv.page_size() * (kv.pool().free_pages())));
    const HandoffCheck c = h->verify(kv, m, good);
    EXPECT_EQ(c.status, HandoffStatus::PageNotLive);
    EXPECT_EQ(c.page_index, 1);
    EXPECT_EQ(kv.free(other_owner), 0);
    EXPECT_EQ(h->release(kv), 1);
    EXPECT_EQ(kv.pool().free_pages(), kv.pool().capacity());
    EXPECT_EQ(kv.pool().check_integrity(), "");
}
