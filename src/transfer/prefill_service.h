#pragma once
// `warden serve --role prefill`: computes prompts for decode servers. Each PrefillRequest
// becomes an engine request (one token long) whose pages, once the prompt is computed, are held
// (a pool reference) and offered to the decode server for RMA gets; they are let go on the
// scheduler thread when the decode server is done, its connection dies, or the lease expires.
// When the decode server's KV format differs from this server's, the pages are rewritten into
// it on the scheduler thread (a staging copy registered for that transfer) and this server's
// own pages are let go at once.
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
    // `kv` is the engine's cache (its storage is registered for remote reads); model_id names
    // the checkpoint (kv::kv_model_fingerprint): requests from a decode server of another model
    // or attention shape are refused. A decode server with another KV format (type, scales,
    // page size) gets the prompt's pages converted into its format (kv::convert_kv_pages).
    PrefillService(engine::Engine& eng, kv::KvCache& kv, std::string model_id,
                   const PrefillServiceOptions& o);
    ~PrefillService();
    uint16_t port() const { return node_.port(); }
    const SourceStats& stats() const { return source_.stats(); }

  private:
    void handle(PrefillRequest&& req, KvSourceServer::Reply reply);

    engine::Engine& eng_;
    kv::KvCache& kv_;
    std::string model_id_;
    uint64_t fingerprint_;  // of this server's own pages
    UcxNode node_;
    KvSourceServer source_;
};

}  // namespace warden::transfer
