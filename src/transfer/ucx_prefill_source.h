#pragma once
// `warden serve --role decode`: where its prompts are computed. Prefill servers are reached
// over UCX (their --kv-listen addresses); each prompt goes to the one with the fewest transfers
// in flight, skipping for a while one that just failed, and its pages are fetched into the
// pages the engine reserved (KvFetchClient).
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/prefill_source.h"
#include "transfer/kv_fetch.h"
#include "transfer/ucx_node.h"

namespace warden::transfer {

class UcxPrefillSource : public engine::PrefillSource {
  public:
    // endpoints: "HOST:PORT" of each prefill server (throws util::Error when malformed).
    // fingerprint: this server's kv_layout_fingerprint; format: its KV format and model, in
    // which the prefill servers send the pages.
    UcxPrefillSource(const std::vector<std::string>& endpoints, uint64_t fingerprint,
                     const kv::KvWireFormat& format, std::chrono::milliseconds timeout);
    ~UcxPrefillSource() override;

    uint64_t fingerprint() const override { return fingerprint_; }
    void fetch(uint64_t transfer_id, const std::vector<int32_t>& prompt, std::vector<uint8_t*> dest,
               size_t page_bytes, int attempt, const std::string& hint,
               std::function<void(engine::RemotePrefill&&)> done) override;
    bool knows(const std::string& endpoint) const override;
    void cancel(uint64_t transfer_id) override;
    const FetchStats& stats() const { return client_.stats(); }

  private:
    struct Endpoint {
        std::string host;
        uint16_t port = 0;
        int in_flight = 0;
        std::chrono::steady_clock::time_point down_until{};
        std::string name;  // HOST:PORT as given
    };
    // The server for this attempt: the hinted one first (unless marked down), else the fewest
    // in flight; a retry avoids the previous attempt's server where there is another.
    size_t choose(int attempt, const std::string& hint);
    std::optional<size_t> find(const std::string& endpoint) const;

    uint64_t fingerprint_;
    kv::KvWireFormat format_;
    std::chrono::milliseconds timeout_;
    mutable std::mutex mu_;
    std::vector<Endpoint> endpoints_;
    UcxNode node_;
    KvFetchClient client_;
};

// "HOST:PORT" -> (host, port); throws util::Error naming `what` when malformed. Port 0 (any
// free port) only with allow_any_port.
std::pair<std::string, uint16_t> parse_host_port(const std::string& s, const std::string& what,
                                                 bool allow_any_port = false);

}  // namespace warden::transfer
