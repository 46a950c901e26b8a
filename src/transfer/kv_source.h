#pragma once
// The prefill side of the KV hand-off: receives PrefillRequests, lets the application compute
// the prompt's KV (the handler), and answers PrefillReady: the manifest, the logits, and where
// the pages lie in its registered pool (plus the remote key), so the decode server can fetch
// them with RMA gets straight into its reserved pages (no staging copy). The pages stay held
// (a lease) until the decode server sends PrefillRelease, its connection dies, or the lease
// times out; then the application's release() runs.
// For a decode server on the same host that holds a shared-memory endpoint to this node (the
// LocalPath exchange, transfer/kv_protocol.h), the pages are copied into memory UCX allocated
// (shared memory, reused across transfers) and the application's pages are let go at once:
// UCX reads shared memory only from memory it allocated itself (transfer/ucx_node.h).
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "transfer/kv_protocol.h"
#include "transfer/ucx_node.h"

namespace warden::transfer {

// What the application hands back for one request: its pages (read by the peer until
// release() is called, on the progress thread) or an error.
struct PrefilledPages {
    std::string error;
    std::vector<const uint8_t*> pages;  // inside the registered region, or inside staging
    // Pages converted into the peer's KV format: registered for this transfer only and kept
    // until the lease ends. Null: the pages lie in the region given to the constructor.
    std::shared_ptr<std::vector<uint8_t>> staging;
    size_t page_bytes = 0;
    uint64_t fingerprint = 0;
    int64_t n_tokens = 0;
    std::vector<uint64_t> checksums;
    std::vector<float> logits;
    std::function<void()> release;
};

struct SourceStats {
    std::atomic<int64_t> requests{0}, served{0}, refused{0}, released{0}, lease_expired{0},
        peer_lost{0}, malformed{0}, bytes{0}, staged_local{0};
};

class KvSourceServer {
  public:
    using Reply = std::function<void(PrefilledPages&&)>;  // thread-safe, call exactly once
    // Runs on the progress thread; must not block (hand the work to another thread).
    using Handler = std::function<void(PrefillRequest&&, Reply)>;

    // Registers [region, region + length) for the peers' gets. Construct before node.start();
    // stop the node before destroying this.
    KvSourceServer(UcxNode& node, void* region, size_t length, Handler handler,
                   std::chrono::milliseconds lease = std::chrono::seconds(30));
    ~KvSourceServer();  // releases whatever is still leased
    const SourceStats& stats() const { return stats_; }
    // Leases outstanding (pages a decode server may still be reading). Progress thread or
    // after the node stopped.
    size_t leases() const { return leases_.size(); }

  private:
    void ready(ConnId conn, uint64_t transfer_id, uint64_t n_pages, PrefilledPages&& p);
    void release(ConnId conn, uint64_t transfer_id, bool confirm);
    // Copies the pages into a UCX-allocated region (shared memory) and lets the application's
    // pages go; false (p unchanged) when no such region can be had.
    bool stage_local(PrefilledPages& p, const UcxRegion*& region);

    struct Lease {
        std::chrono::steady_clock::time_point deadline;
        std::function<void()> release;
    };
    UcxNode& node_;
    UcxRegion region_;
    Handler handler_;
    std::chrono::milliseconds lease_;
    SourceStats stats_;
    std::map<std::pair<ConnId, uint64_t>, Lease> leases_;  // progress thread only
    std::set<ConnId> local_peers_;                         // progress thread only
    std::vector<UcxRegion> spare_;  // staging regions not leased (progress thread only)
};

}  // namespace warden::transfer
