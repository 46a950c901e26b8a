#pragma once
// The decode side of the KV hand-off: sends PrefillRequests to prefill servers, and on
// PrefillReady fetches every page with an RMA get straight into the pages the caller reserved,
// then tells the prefill server to release its copy. Each transfer's outcome is delivered
// exactly once, and only when no get of it is still in flight: whatever the outcome (refused,
// peer lost, timeout, cancel), nothing can write into the caller's pages after it, so the
// caller may free them at once. The outcome's manifest is what the caller verifies
// (kv::KvHandoff::verify): the transport does not judge the bytes.
// On one host the pages are read over a second, shared-memory endpoint to the prefill server
// (the LocalPath exchange, transfer/kv_protocol.h) when UCX has one: local copies, confirmed by
// a ReleaseAck before the transfer counts as done.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "transfer/kv_protocol.h"
#include "transfer/transfer_faults.h"
#include "transfer/ucx_node.h"

namespace warden::transfer {

enum class FetchStatus { Ok, Refused, PeerLost, Timeout, Cancelled, Unreachable, Malformed };
const char* fetch_status_name(FetchStatus s);

struct FetchResult {
    FetchStatus status = FetchStatus::Ok;
    std::string error;       // Refused: the prefill server's reason
    PrefillReady ready;      // Ok: manifest and logits (addrs/rkey consumed)
    double transfer_ms = 0;  // request sent -> last page fetched
    double fetch_ms = 0;     // first get issued -> last get completed
    int64_t bytes = 0;       // page bytes fetched
    bool local = false;      // read over the shared-memory endpoint
    bool ok() const { return status == FetchStatus::Ok; }
};

struct FetchStats {
    std::atomic<int64_t> started{0}, completed{0}, failed{0}, timeouts{0}, peer_lost{0},
        stale_messages{0}, bytes{0},
        local_paths{0},  // shared-memory endpoints made to prefill servers
        local_reads{0};  // transfers whose pages were read over one
};

class KvFetchClient {
  public:
    using Done = std::function<void(FetchResult&&)>;
    // Construct before node.start(); stop the node before destroying this. The injector (tests,
    // chaos runs) applies its faults to the fetches.
    explicit KvFetchClient(UcxNode& node, TransferFaultInjector* faults = nullptr);

    // Thread-safe. dest: the reserved pages (req.n_pages of page_bytes each), written only
    // until done runs (on the progress thread).
    void start(const std::string& host, uint16_t port, PrefillRequest req,
               std::vector<uint8_t*> dest, size_t page_bytes, std::chrono::milliseconds timeout,
               Done done);
    void cancel(uint64_t transfer_id);  // thread-safe; no-op once finished
    const FetchStats& stats() const { return stats_; }
    // The transports of the last shared-memory endpoint made or refused ("sysv,posix,cma";
    // empty before any): what UCX offers between the two servers on this host.
    std::string local_lanes() const;
    // Fault injection: what KillPeer does half-way through a transfer's gets (tests: destroy
    // the prefill node).
    void on_kill_peer(std::function<void()> fn) { kill_peer_ = std::move(fn); }

  private:
    struct Pending {
        ConnId conn = 0;
        std::chrono::steady_clock::time_point started, deadline, fetch_started;
        std::vector<uint8_t*> dest;
        size_t page_bytes = 0;
        Done done;
        bool fetching = false;    // gets issued
        bool local = false;       // ... over the shared-memory endpoint
        bool confirming = false;  // gets done, waiting for the ReleaseAck
        ConnId read_conn = 0;     // the connection the gets use
        std::chrono::steady_clock::time_point fetch_done;
        int64_t outstanding = 0;  // gets in flight
        bool get_failed = false;
        std::optional<FetchStatus> abandoned;  // timeout/cancel while fetching
        FetchResult result;
        ucp_rkey_h rkey = nullptr;
    };
    void on_ready(ConnId conn, std::vector<uint8_t>&& b, bool replay);
    void on_local_path(ConnId conn, const std::vector<uint8_t>& b);
    struct LocalKey {
        std::vector<uint8_t> packed;
        ucp_rkey_h key = nullptr;
        int users = 0;  // transfers reading through it now
    };
    // The remote key `packed` unpacked on the shared-memory endpoint `local` (cached), or null.
    LocalKey* local_key(ConnId local, const std::vector<uint8_t>& packed);
    void unuse_local_key(ConnId local, ucp_rkey_h key);
    void on_release_ack(ConnId conn, const std::vector<uint8_t>& b);
    void fetch(uint64_t id, Pending& p, PrefillReady&& m);
    void get_done(uint64_t id, bool ok);
    void finish(uint64_t id, FetchStatus s, std::string error = {});
    void release_remote(ConnId conn, uint64_t id);
    ConnId conn_to(const std::string& host, uint16_t port);

    UcxNode& node_;
    TransferFaultInjector* faults_;
    std::function<void()> kill_peer_;
    FetchStats stats_;
    // Progress thread only.
    std::unordered_map<uint64_t, Pending> pending_;
    std::unordered_map<std::string, ConnId> conns_;
    std::unordered_map<ConnId, ConnId> local_;  // connection -> its shared-memory endpoint
    std::unordered_map<ConnId, std::deque<LocalKey>> local_keys_;  // per such endpoint
    mutable std::mutex lanes_mu_;
    std::string local_lanes_;  // guarded by lanes_mu_
    struct Held {
        std::chrono::steady_clock::time_point at;
        ConnId conn;
        std::vector<uint8_t> msg;
    };
    std::vector<Held> held_;  // Delay fault: Ready messages held back
};

}  // namespace warden::transfer
