// The KV hand-off protocol over UCX on loopback, two nodes in one process: a prefill node
// (KvSourceServer over its own KvCache) and a decode node (KvFetchClient over another). Thousands
// of transfers, each with one fault of every kind in turn: every transfer whose pages are not
// exactly what was sent is refused (by the transport or by the decode side's verify), every
// clean one delivers the exact bytes, and after each the decode pool has every page back.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <random>
#include <string>
#include <thread>

#include "kv/kv_handoff.h"
#include "transfer/kv_fetch.h"
#include "transfer/kv_source.h"

using namespace warden;
using namespace std::chrono_literals;

namespace {

kv::KvCacheConfig config() {
    auto c = kv::KvCacheConfig::shaped(2, 2, 16, kernels::KvType::BF16, 16);
    c.budget_bytes = kv::kv_budget_for_tokens(c, 16 * 64);
    return c;
}

// The bytes the prefill side computes for page i of a transfer: a function of (transfer, i),
// so the decode side can check them independently of the manifest.
void expected_page(uint64_t transfer, size_t i, uint8_t* out, size_t n) {
    std::mt19937_64 r(transfer * 1000003 + i);
    for (size_t b = 0; b < n; b += 8) {
        const uint64_t v = r();
        std::memcpy(out + b, &v, std::min<size_t>(8, n - b));
    }
}

// The prefill side: pages of its own pool, filled deterministically, leased to the peer.
struct PrefillSide {
    kv::KvCache cache{config()};
    uint64_t fingerprint = kv::kv_layout_fingerprint(config(), "test-model");
    transfer::UcxNode node{transfer::UcxNodeOptions{true, "127.0.0.1", 0}};
    transfer::KvSourceServer server{
        node, cache.pool().data(kv::kNullPage),
        static_cast<size_t>((cache.pool().capacity() + 1) * cache.bytes_per_page()),
        [this](transfer::PrefillRequest&& req, transfer::KvSourceServer::Reply reply) {
            handle(std::move(req), std::move(reply));
        }};
    bool hold = false;  // never answer (a prefill server that hangs)
    std::vector<transfer::KvSourceServer::Reply> held;

    PrefillSide() { node.start(); }
    ~PrefillSide() { node.stop(); }

    void handle(transfer::PrefillRequest&& req, transfer::KvSourceServer::Reply reply) {
        if (hold) {
            held.push_back(std::move(reply));
            return;
        }
        auto table = std::make_shared<kv::PageTable>();
        transfer::PrefilledPages p;
        if (!cache.reserve(*table, static_cast<int64_t>(req.prompt.size()))) {
            p.error = "prefill pool full";
            reply(std::move(p));
            return;
        }
        const auto n = static_cast<size_t>(cache.bytes_per_page());
        for (size_t i = 0; i < table->pages.size(); ++i) {
            expected_page(req.transfer_id, i, cache.pool().data(table->pages[i].page), n);
            p.pages.push_back(cache.pool().data(table->pages[i].page));
        }
        p.page_bytes = n;
        p.fingerprint = fingerprint;
        p.n_tokens = static_cast<int64_t>(req.prompt.size());
        p.checksums = kv::page_checksums(cache, table->pages);
        p.logits = {1.0f, 2.0f, static_cast<float>(req.prompt.size())};
        p.release = [this, table] { cache.free(*table); };
        reply(std::move(p));
    }
};

struct DecodeSide {
    kv::KvCache cache{config()};
    uint64_t fingerprint = kv::kv_layout_fingerprint(config(), "test-model");
    transfer::TransferFaultInjector faults{42};
    transfer::UcxNode node{transfer::UcxNodeOptions{}};
    transfer::KvFetchClient client{node, &faults};
    DecodeSide() { node.start(); }
    ~DecodeSide() { node.stop(); }
};

// One transfer: reserve, poison, fetch, verify, release. Accepted means the decode side would
// decode from these pages; bytes_exact compares them with the independent expectation.
struct Outcome {
    bool accepted = false;
    bool bytes_exact = false;
    transfer::FetchStatus status = transfer::FetchStatus::Ok;
    kv::HandoffStatus check = kv::HandoffStatus::Ok;
};

Outcome one_transfer(DecodeSide& d, uint16_t port, uint64_t id, int64_t n_tokens,
                     std::chrono::milliseconds timeout) {
    auto h = kv::KvHandoff::reserve(d.cache, n_tokens, id, d.fingerprint);
    EXPECT_TRUE(h.has_value());
    const auto n = static_cast<size_t>(d.cache.bytes_per_page());
    std::vector<uint8_t*> dest;
    for (const kv::PageRef& r : h->pages()) {
        std::memset(d.cache.pool().data(r.page), 0xa5, n);
        dest.push_back(d.cache.pool().data(r.page));
    }
    transfer::PrefillRequest req;
    req.transfer_id = id;
    req.fingerprint = d.fingerprint;
    req.prompt.assign(static_cast<size_t>(n_tokens), 7);
    std::promise<transfer::FetchResult> pr;
    auto fut = pr.get_future();
    d.client.start("127.0.0.1", port, req, dest, n, timeout,
                   [&pr](transfer::FetchResult&& r) { pr.set_value(std::move(r)); });
    EXPECT_EQ(fut.wait_for(20s), std::future_status::ready);
    transfer::FetchResult r = fut.get();
    Outcome o;
    o.status = r.status;
    if (r.ok()) {
        const kv::HandoffCheck c = h->verify(d.cache, r.ready.manifest);
        o.check = c.status;
        o.accepted = c.ok();
        if (o.accepted) {
            std::vector<uint8_t> want(n);
            o.bytes_exact = true;
            for (size_t i = 0; i < h->pages().size(); ++i) {
                expected_page(id, i, want.data(), n);
                o.bytes_exact &=
                    std::memcmp(want.data(), d.cache.pool().data(h->pages()[i].page), n) == 0;
            }
            o.bytes_exact &=
                r.ready.logits.size() == 3 && r.ready.logits[2] == static_cast<float>(n_tokens);
        }
    }
    EXPECT_EQ(h->release(d.cache), 0);
    return o;
}

}  // namespace

TEST(KvTransfer, EveryFaultKindIsDetectedAndNoPageLeaks) {
    auto p = std::make_unique<PrefillSide>();
    DecodeSide d;
    std::atomic<bool> killed{false};
    d.client.on_kill_peer([&] {
        p.reset();  // the prefill process dies half-way through the fetch
        killed = true;
    });
    d.faults.set_delay(60ms);
    const int32_t cap = d.cache.pool().capacity();
    constexpr int kTransfers = 1400;
    std::array<int64_t, transfer::kTransferFaultKinds> injected{}, detected{}, clean{};
    std::mt19937_64 rng(3);
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kTransfers; ++i) {
        const auto fault = static_cast<transfer::TransferFault>(i % transfer::kTransferFaultKinds);
        // At least two pages, so that Reorder has a pair to swap and KillPeer a middle.
        const int64_t n_tokens = 17 + static_cast<int64_t>(rng() % 200);
        d.faults.arm(fault);
        const auto timeout = fault == transfer::TransferFault::Delay ? 20ms : 10000ms;
        const Outcome o =
            one_transfer(d, p->node.port(), static_cast<uint64_t>(i) + 1, n_tokens, timeout);
        const auto k = static_cast<size_t>(fault);
        ++injected[k];
        if (fault == transfer::TransferFault::None || fault == transfer::TransferFault::Duplicate) {
            ASSERT_TRUE(o.accepted) << transfer::transfer_fault_name(fault) << " transfer " << i
                                    << ": " << transfer::fetch_status_name(o.status) << " / "
                                    << kv::handoff_status_name(o.check);
            ASSERT_TRUE(o.bytes_exact) << "accepted pages differ from what was sent";
            ++clean[k];
        } else {
            ASSERT_FALSE(o.accepted)
                << transfer::transfer_fault_name(fault) << " transfer " << i << " was accepted";
            ++detected[k];
        }
        ASSERT_EQ(d.cache.pool().free_pages(), cap);
        ASSERT_EQ(d.cache.pool().check_integrity(), "");
        if (killed.exchange(false)) {
            p = std::make_unique<PrefillSide>();
        } else {
            // The prefill side's pages come back too (the release message, or the lease).
            for (int w = 0; w < 2000 && p->cache.pool().free_pages() != cap; ++w)
                std::this_thread::sleep_for(1ms);
            ASSERT_EQ(p->cache.pool().free_pages(), cap) << "prefill pages leaked";
        }
    }
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (int k = 0; k < transfer::kTransferFaultKinds; ++k)
        std::printf("fault %-10s injected %5lld detected %5lld clean %5lld\n",
                    transfer::transfer_fault_name(static_cast<transfer::TransferFault>(k)),
                    static_cast<long long>(injected[static_cast<size_t>(k)]),
                    static_cast<long long>(detected[static_cast<size_t>(k)]),
                    static_cast<long long>(clean[static_cast<size_t>(k)]));
    std::printf(
        "%d transfers in %.1f s; stale messages ignored: %lld; read over shared memory: "
        "%lld (UCX lanes: %s)\n",
        kTransfers, secs, static_cast<long long>(d.client.stats().stale_messages.load()),
        static_cast<long long>(d.client.stats().local_reads.load()),
        d.client.local_lanes().c_str());
    const auto seen = d.faults.injected();
    for (int k = 0; k < transfer::kTransferFaultKinds; ++k)
        EXPECT_EQ(seen[static_cast<size_t>(k)], injected[static_cast<size_t>(k)]);
    // Delayed Ready messages arrive after their transfer timed out and are ignored.
    EXPECT_GE(d.client.stats().stale_messages.load(), 1);
}

TEST(KvTransfer, HungThenDeadPrefillServerFailsClosed) {
    DecodeSide d;
    const int32_t cap = d.cache.pool().capacity();
    uint16_t port = 0;
    {
        auto p = std::make_unique<PrefillSide>();
        p->hold = true;  // the request arrives, the answer never comes
        port = p->node.port();
        const Outcome o = one_transfer(d, port, 9001, 40, 300ms);
        EXPECT_FALSE(o.accepted);
        EXPECT_EQ(o.status, transfer::FetchStatus::Timeout);
        EXPECT_EQ(p->server.stats().requests.load(), 1);
    }
    // Nobody listens any more: the next transfer fails at once or by its timeout, never hangs.
    const Outcome o = one_transfer(d, port, 9002, 40, 2000ms);
    EXPECT_FALSE(o.accepted);
    EXPECT_NE(o.status, transfer::FetchStatus::Ok);
    EXPECT_EQ(d.cache.pool().free_pages(), cap);
    EXPECT_EQ(d.cache.pool().check_integrity(), "");
}

TEST(KvTransfer, ProtocolMessagesRoundTripAndRefuseTruncation) {
    transfer::PrefillRequest q;
    q.transfer_id = 5;
    q.fingerprint = 6;
    q.n_pages = 3;
    q.prompt = {4, 5};
    const auto b = transfer::encode(q);
    auto back = transfer::decode_request(b);
    ASSERT_TRUE(back.has_value());
    EXPECT_EQ(back->n_pages, q.n_pages);
    EXPECT_EQ(back->prompt, q.prompt);
    for (size_t cut = 0; cut < b.size(); ++cut)
        EXPECT_FALSE(transfer::decode_request(std::span(b.data(), cut)).has_value());
    transfer::PrefillReady d;
    d.transfer_id = 5;
    d.error = "x";
    d.manifest.checksums = {1, 2};
    d.logits = {0.5f};
    d.addrs = {10, 20};
    d.rkey = {1, 2, 3};
    const auto e = transfer::encode(d);
    auto dd = transfer::decode_ready(e);
    ASSERT_TRUE(dd.has_value());
    EXPECT_EQ(dd->error, "x");
    EXPECT_EQ(dd->manifest.checksums, d.manifest.checksums);
    for (size_t cut = 0; cut < e.size(); ++cut)
        EXPECT_FALSE(transfer::decode_ready(std::span(e.data(), cut)).has_value());
    EXPECT_EQ(dd->addrs, d.addrs);
    EXPECT_FALSE(transfer::decode_request(e).has_value());  // one message is never the other
}

namespace {

// Whether this UCX offers a shared-memory transport at all, asked of UCX directly (its own
// description of a context), independently of the transfer code.
bool ucx_has_shared_memory() {
    ucp_params_t p{};
    p.field_mask = UCP_PARAM_FIELD_FEATURES;
    p.features = UCP_FEATURE_AM | UCP_FEATURE_RMA;
    ucp_config_t* cfg = nullptr;
    if (ucp_config_read(nullptr, nullptr, &cfg) != UCS_OK) return false;
    ucp_context_h ctx = nullptr;
    const ucs_status_t s = ucp_init(&p, cfg, &ctx);
    ucp_config_release(cfg);
    if (s != UCS_OK) return false;
    char* text = nullptr;
    size_t len = 0;
    FILE* f = open_memstream(&text, &len);
    ucp_context_print_info(ctx, f);
    std::fclose(f);
    const std::string info(text, len);
    std::free(text);
    ucp_cleanup(ctx);
    return info.find("sysv/") != std::string::npos || info.find("posix/") != std::string::npos;
}

}  // namespace

// On one host the pages are read over shared memory wherever UCX has it (a regression to the
// TCP-only path would show here as zero local reads), with the exact bytes; where it has none
// (UCX_TLS=tcp, as between hosts) they come over the connection, equally exact.
TEST(KvTransfer, SameHostReadsOverSharedMemoryWhereUcxHasIt) {
    const char* given = std::getenv("UCX_TLS");
    const std::string saved = given ? given : "";
    for (const bool tcp_only : {false, true}) {
        // First UCX's own choice (as the environment sets it), then TCP only; the nodes'
        // contexts below read UCX_TLS when they are made.
        if (tcp_only) setenv("UCX_TLS", "tcp", 1);
        const bool shm = !tcp_only && ucx_has_shared_memory();
        {
            PrefillSide p;
            DecodeSide d;
            constexpr int kTransfers = 8;
            for (int i = 0; i < kTransfers; ++i) {
                const Outcome o = one_transfer(d, p.node.port(), 100 + static_cast<uint64_t>(i),
                                               40 + i * 16, 10000ms);
                ASSERT_TRUE(o.accepted) << transfer::fetch_status_name(o.status);
                ASSERT_TRUE(o.bytes_exact);
            }
            const std::string lanes = d.client.local_lanes();
            std::printf("UCX_TLS=%s: %lld of %d transfers read over shared memory (lanes: %s)\n",
                        tcp_only ? "tcp"
                        : given  ? saved.c_str()
                                 : "(unset)",
                        static_cast<long long>(d.client.stats().local_reads.load()), kTransfers,
                        lanes.empty() ? "none" : lanes.c_str());
            if (shm) {
                // The first transfer may start before the shared-memory endpoint is made.
                EXPECT_GE(d.client.stats().local_reads.load(), kTransfers - 1) << lanes;
                EXPECT_EQ(d.client.stats().local_paths.load(), 1);
                EXPECT_GE(p.server.stats().staged_local.load(), kTransfers - 1);
            } else {
                EXPECT_EQ(d.client.stats().local_reads.load(), 0) << lanes;
                EXPECT_EQ(p.server.stats().staged_local.load(), 0);
            }
        }
    }
    if (given)
        setenv("UCX_TLS", saved.c_str(), 1);
    else
        unsetenv("UCX_TLS");
}

TEST(KvTransfer, LocalPathMessagesRoundTripAndRefuseTruncation) {
    transfer::LocalPath a;
    a.step = transfer::LocalPath::Address;
    a.worker_address = {1, 2, 3, 4};
    const auto b = transfer::encode(a);
    auto back = transfer::decode_local_path(b);
    ASSERT_TRUE(back.has_value());
    EXPECT_EQ(back->step, transfer::LocalPath::Address);
    EXPECT_EQ(back->worker_address, a.worker_address);
    for (size_t cut = 0; cut < b.size(); ++cut)
        EXPECT_FALSE(transfer::decode_local_path(std::span(b.data(), cut)).has_value());
    a.worker_address.clear();  // an address message without an address
    EXPECT_FALSE(transfer::decode_local_path(transfer::encode(a)).has_value());
    const auto ack = transfer::encode(transfer::ReleaseAck{7, true});
    auto k = transfer::decode_release_ack(ack);
    ASSERT_TRUE(k.has_value());
    EXPECT_EQ(k->transfer_id, 7u);
    EXPECT_TRUE(k->held);
    for (size_t cut = 0; cut < ack.size(); ++cut)
        EXPECT_FALSE(transfer::decode_release_ack(std::span(ack.data(), cut)).has_value());
    const auto rel = transfer::encode(transfer::PrefillRelease{9, true});
    auto r = transfer::decode_release(rel);
    ASSERT_TRUE(r.has_value());
    EXPECT_TRUE(r->confirm);
    EXPECT_FALSE(transfer::decode_release_ack(rel).has_value());  // never the other message
}
