#pragma once
// The roles of `warden serve` in a disaggregated deployment:
//   both     (default) one process computes prompts and generates tokens
//   prefill  also answers prompt requests of decode servers over UCX (--kv-listen)
//   decode   computes no prompt itself while a prefill server is reachable: each request's
//            prompt KV is fetched from one of --prefill-kv into pages reserved here, verified,
//            then decoded here
// RAII holders for the role's transport, owned by the serve command.
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "engine/engine.h"
#include "transfer/prefill_service.h"
#include "transfer/ucx_prefill_source.h"

namespace warden::transfer {

struct RoleOptions {
    std::string role = "both";              // both | prefill | decode
    std::string kv_listen = "127.0.0.1:0";  // prefill: where decode servers connect (UCX)
    std::string prefill_kv;                 // decode: HOST:PORT[,HOST:PORT...] of prefill servers
    double kv_timeout_s = 30;               // decode: one prompt fetch, request to last page
    double kv_lease_s = 30;                 // prefill: pages held for a decode server at most
    std::string kv_host() const;            // kv_listen's host
};

// Validates the combination (throws util::Error): decode needs --prefill-kv, which only decode
// takes; --kv-listen only with prefill.
void check_role_options(const RoleOptions& o);

// What a server's KV pages are: the model they belong to (model_id: formats::checkpoint_identity,
// a hash of the checkpoint's content, not of its weight format, so a prefill server may run other
// weights than its decode servers) and the pool's format. Pages travel in the decode server's
// format.
struct KvIdentity {
    std::string model_id;
    kv::KvCacheConfig config;
    uint64_t fingerprint() const { return kv::kv_layout_fingerprint(config, model_id); }
};

class DecodeRole {
  public:
    DecodeRole(const RoleOptions& o, const KvIdentity& id);
    engine::PrefillSource* source() { return source_.get(); }  // nullptr unless decode

  private:
    std::unique_ptr<UcxPrefillSource> source_;
};

class PrefillRole {
  public:
    PrefillRole(const RoleOptions& o, engine::Engine& eng, kv::KvCache& kv,
                const std::string& model_id);
    bool active() const { return service_ != nullptr; }
    uint16_t port() const { return service_ ? service_->port() : 0; }

  private:
    std::unique_ptr<PrefillService> service_;
};

}  // namespace warden::transfer
