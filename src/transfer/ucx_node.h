#pragma once
// One UCX (UCP) worker with its own progress thread: the transport under the KV hand-off.
// Control messages travel as UCP active messages, page payloads as RMA gets from memory the
// sender registered (ucp_mem_map) and whose remote key it sent. UCX picks the wire (shared
// memory on one host, TCP or RDMA between hosts); no socket code here.
//
// Shared memory on one host: UCX (1.13) selects its shared-memory transports for RMA only on
// endpoints without peer-failure handling, and reads through them only memory that UCX itself
// allocated (ucp_mem_map with UCP_MEM_MAP_ALLOCATE: SysV or POSIX shared memory, which the
// reader maps and copies from). Connections made with connect() handle peer failure and so run
// over TCP (or RDMA) even on one host. For page reads on one host a second endpoint is made with
// connect_local() from the peer's worker address: it is kept only when every lane it got is a
// shared-memory one, and reads through it are used only where maps_locally() holds, so they are
// plain copies that complete at once and cannot hang on a dead peer.
//
// Threading: every UCX call happens on the progress thread. Other threads hand it work with
// post(); message, disconnect and tick callbacks run on it too and must not block.
#include <sys/types.h>
#include <ucp/api/ucp.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace warden::transfer {

using ConnId = uint64_t;  // 0: none

struct UcxNodeOptions {
    bool listen = false;  // accept connections on host:port (port 0: any free port)
    std::string host = "127.0.0.1";
    uint16_t port = 0;
    // > 0: the progress thread runs that many nice steps below the process, so the copies and
    // message handling it does (shared-memory page reads are plain copies on this thread) take
    // a small share of a core that a latency-bound thread also runs on.
    int lower_priority_by = 0;
};

// A registered memory region and its packed remote key (what a peer needs to put into it).
struct UcxRegion {
    ucp_mem_h memh = nullptr;
    uint64_t base = 0;
    size_t length = 0;
    std::vector<uint8_t> rkey;
};

class UcxNode {
  public:
    using MessageFn = std::function<void(ConnId, std::vector<uint8_t>&&)>;
    explicit UcxNode(const UcxNodeOptions& opts);  // throws util::Error
    ~UcxNode();                                    // stops the thread, closes every endpoint
    UcxNode(const UcxNode&) = delete;
    UcxNode& operator=(const UcxNode&) = delete;

    // Set before start().
    void on_message(uint16_t am_id, MessageFn fn);
    void on_disconnect(std::function<void(ConnId)> fn);
    void on_tick(std::function<void()> fn);  // every loop turn, at least every 10 ms
    void start();
    // Stops and joins the progress thread (idempotent); the destructor calls it. Stop the node
    // before destroying objects its callbacks use.
    void stop();

    uint16_t port() const { return port_; }  // the listening port (after construction)
    // Thread-safe: runs fn on the progress thread.
    void post(std::function<void()> fn);

    // Progress thread only.
    ConnId connect(const std::string& host, uint16_t port);  // 0 on failure
    bool connected(ConnId c) const { return eps_.count(c) != 0; }
    // Sends a message; `done(ok)` (optional) when the local buffer is released.
    bool send(ConnId c, uint16_t am_id, std::vector<uint8_t> payload,
              std::function<void(bool)> done = {});
    // Remote key of the peer's region, unpacked on this connection (nullptr on failure). It
    // lives until release_rkey or until the connection closes, whichever comes first.
    ucp_rkey_h unpack_rkey(ConnId c, const std::vector<uint8_t>& packed);
    void release_rkey(ConnId c, ucp_rkey_h k);
    // Reads n bytes at the peer's remote_addr into dst; done(ok) once they are there (or the
    // operation failed: then dst may hold part of them).
    bool get(ConnId c, void* dst, size_t n, uint64_t remote_addr, ucp_rkey_h rkey,
             std::function<void(bool)> done);
    // done(ok) when every earlier operation on the connection completed at the peer.
    bool flush(ConnId c, std::function<void(bool)> done);
    // Closes the endpoint at once (no more traffic either way on it); no disconnect callback.
    void close(ConnId c);

    // This node's worker address (what connect_local() of a peer needs).
    std::vector<uint8_t> worker_address();
    // An endpoint to the peer with that worker address over shared memory only, without
    // peer-failure handling (the caller watches the peer through another connection and closes
    // this one when that fails). 0 when UCX would reach the peer by anything else (another
    // host, UCX_TLS without shared memory). *lanes: the transports UCX chose, e.g.
    // "sysv,posix,cma" (also when refused).
    ConnId connect_local(const std::vector<uint8_t>& worker_address, std::string* lanes);
    // Whether the peer's memory at addr (its remote key unpacked on a connect_local() endpoint)
    // is mapped here, so that a get from it is a local copy.
    static bool maps_locally(ucp_rkey_h rkey, uint64_t addr);

    // Any thread, before start() or from the progress thread: memory registration.
    UcxRegion map(void* base, size_t length);  // throws util::Error
    // length bytes allocated by UCX and registered: shared memory where UCX has it.
    UcxRegion allocate(size_t length);  // throws util::Error
    void unmap(UcxRegion& r);           // also frees what allocate() allocated

  private:
    static void on_conn_request(ucp_conn_request_h req, void* arg);
    static void on_ep_error(void* arg, ucp_ep_h ep, ucs_status_t status);
    static ucs_status_t on_am(void* arg, const void* header, size_t header_length, void* data,
                              size_t length, const ucp_am_recv_param_t* param);
    ConnId adopt(ucp_ep_h ep);
    UcxRegion register_region(const ucp_mem_map_params_t& mp);
    bool complete(ucs_status_ptr_t sp, std::function<void(bool)> done);
    // Starts one non-blocking operation on connection c: `issue(ep, rp)` with rp's completion
    // callback set (it may add flags). `done(ok)` runs on the progress thread when it completes;
    // false (and done(false) deferred) when there is no such connection, `can_start` is false or
    // the operation failed at once.
    bool start_op(ConnId c, bool can_start, std::function<void(bool)> done,
                  const std::function<ucs_status_ptr_t(ucp_ep_h, ucp_request_param_t&)>& issue);
    void loop();

    struct AmSlot {
        UcxNode* node;
        uint16_t id;
    };
    ucp_context_h ctx_ = nullptr;
    ucp_worker_h worker_ = nullptr;
    ucp_listener_h listener_ = nullptr;
    uint16_t port_ = 0;
    int lower_priority_by_ = 0;
    int wake_fd_ = -1;
    std::unordered_map<uint16_t, MessageFn> handlers_;
    std::vector<std::unique_ptr<AmSlot>> slots_;
    std::function<void(ConnId)> on_disconnect_;
    std::function<void()> on_tick_;

    std::mutex mu_;
    std::vector<std::function<void()>> inbox_;  // guarded by mu_
    std::atomic<bool> stop_{false};
    std::thread thread_;

    // Progress thread only.
    std::unordered_map<ConnId, ucp_ep_h> eps_;
    std::unordered_map<ucp_ep_h, ConnId> ids_;
    std::unordered_map<ConnId, std::vector<ucp_rkey_h>> rkeys_;
    ConnId next_conn_ = 1;
    std::vector<std::function<void()>> deferred_;  // work from inside UCX callbacks
};

}  // namespace warden::transfer
