#include "transfer/disagg_roles.h"

#include <sstream>

#include "util/error.h"

namespace warden::transfer {

std::string RoleOptions::kv_host() const {
    return parse_host_port(kv_listen, "--kv-listen", true).first;
}

void check_role_options(const RoleOptions& o) {
    util::check(o.role == "both" || o.role == "prefill" || o.role == "decode",
                "--role must be both, prefill or decode (got '" + o.role + "')");
    util::check(o.role == "decode" || o.prefill_kv.empty(),
                "--prefill-kv is for --role decode only");
    util::check(o.role != "decode" || !o.prefill_kv.empty(),
                "--role decode needs --prefill-kv HOST:PORT[,HOST:PORT...]");
    util::check(o.kv_timeout_s > 0 && o.kv_lease_s > 0,
                "--kv-timeout and --kv-lease must be positive");
}

DecodeRole::DecodeRole(const RoleOptions& o, const KvIdentity& id) {
    check_role_options(o);
    if (o.role != "decode") return;
    std::vector<std::string> eps;
    std::stringstream ss(o.prefill_kv);
    for (std::string e; std::getline(ss, e, ',');)
        if (!e.empty()) eps.push_back(e);
    source_ = std::make_unique<UcxPrefillSource>(
        eps, id.fingerprint(), kv::kv_wire_format(id.config, id.model_id),
        std::chrono::milliseconds(static_cast<int64_t>(o.kv_timeout_s * 1000)));
}

PrefillRole::PrefillRole(const RoleOptions& o, engine::Engine& eng, kv::KvCache& kv,
                         const std::string& model_id) {
    if (o.role != "prefill") return;
    auto [host, port] = parse_host_port(o.kv_listen, "--kv-listen", true);
    PrefillServiceOptions so;
    so.host = host;
    so.port = port;
    so.lease = std::chrono::milliseconds(static_cast<int64_t>(o.kv_lease_s * 1000));
    service_ = std::make_unique<PrefillService>(eng, kv, model_id, so);
}

}  // namespace warden::transfer
