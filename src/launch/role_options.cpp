#include "launch/role_options.h"

namespace warden::cli {

void add_role_options(CLI::App& app, transfer::RoleOptions& o) {
    app.add_option("--role", o.role,
                   "both (default): compute prompts and generate here; prefill: also compute "
                   "prompts for decode servers (over UCX, --kv-listen); decode: fetch each "
                   "prompt's KV from a prefill server (--prefill-kv), then generate here")
        ->check(CLI::IsMember({"both", "prefill", "decode"}));
    app.add_option("--kv-listen", o.kv_listen,
                   "--role prefill: HOST:PORT decode servers fetch KV pages from (UCX; default "
                   "127.0.0.1:0, a free port, printed at start)");
    app.add_option("--prefill-kv", o.prefill_kv,
                   "--role decode: HOST:PORT[,HOST:PORT...] of the prefill servers' --kv-listen");
    app.add_option("--kv-timeout", o.kv_timeout_s,
                   "--role decode: seconds one prompt's KV fetch may take (default 30)")
        ->check(CLI::Range(0.01, 3600.0));
    app.add_option("--kv-lease", o.kv_lease_s,
                   "--role prefill: seconds computed pages are held for a decode server at most "
                   "(default 30)")
        ->check(CLI::Range(0.01, 3600.0));
}

}  // namespace warden::cli
