#pragma once
// `warden serve --role prefill`: computes prompts for decode servers. Each PrefillRequest
// becomes an engine request (one token long) whose pages, once the prompt is computed, are held
// (a pool reference) and offered to the decode server for RMA gets; they are let go on the
// scheduler thread when the decode server is done, its connection dies, or the lease expires.
#include <chrono>
#include <cstdint>
#include <string>

#include "engine/engine.h"
#include "transfer/kv_source.h"
#include "transfer/ucx_node.h"

namespace warden::transfer {

struct PrefillServiceOptions {
    std::string host = "127.0.0.1";
    uint16_t port = 0;  // 0: any free port (see port())
    std::chrono::milliseconds lease{std::chrono::seconds(30)};
};

class PrefillService {
  public:
    // `kv` is the engine's cache (its storage is registered for remote reads); fingerprint is
    // kv::kv_layout_fingerprint of this server: requests from a decode server with another
    // layout, format or model are refused.
    PrefillService(engine::Engine& eng, kv::KvCache& kv, uint64_t fingerprint,
                   const PrefillServiceOptions& o);
    ~PrefillService();
    uint16_t port() const { return node_.port(); }
    const SourceStats& stats() const { return source_.stats(); }

  private:
    void handle(PrefillRequest&& req, KvSourceServer::Reply reply);

    engine::Engine& eng_;
    kv::KvCache& kv_;
    uint64_t fingerprint_;
    UcxNode node_;
    KvSourceServer source_;
};

}  // namespace warden::transfer
