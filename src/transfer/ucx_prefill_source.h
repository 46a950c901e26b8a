#pragma once
// `warden serve --role decode`: where its prompts are computed. Prefill servers are reached
// over UCX (their --kv-listen addresses); each prompt goes to the one with the fewest transfers
// in flight, skipping for a while one that just failed, and its pages are fetched into the
// pages the engine reserved (KvFetchClient).
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "engine/prefill_source.h"
#include "transfer/kv_fetch.h"
#include "transfer/ucx_node.h"

namespace warden::transfer {

class UcxPrefillSource : public engine::PrefillSource {
  public:
    // endpoints: "HOST:PORT" of each prefill server (throws util::Error when malformed).
    UcxPrefillSource(const std::vector<std::string>& endpoints, uint64_t fingerprint,
                     std::chrono::milliseconds timeout);
    ~UcxPrefillSource() override;

    uint64_t fingerprint() const override { return fingerprint_; }
    void fetch(uint64_t transfer_id, const std::vector<int32_t>& prompt, std::vector<uint8_t*> dest,
               size_t page_bytes, int attempt,
               std::function<void(engine::RemotePrefill&&)> done) override;
    void cancel(uint64_t transfer_id) override;
    const FetchStats& stats() const { return client_.stats(); }

  private:
    struct Endpoint {
        std::string host;
        uint16_t port = 0;
        int in_flight = 0;
        std::chrono::steady_clock::time_point down_until{};
    };
    size_t choose(int attempt);

    uint64_t fingerprint_;
    std::chrono::milliseconds timeout_;
    std::mutex mu_;
    std::vector<Endpoint> endpoints_;
    UcxNode node_;
    KvFetchClient client_;
};

// "HOST:PORT" -> (host, port); throws util::Error naming `what` when malformed. Port 0 (any
// free port) only with allow_any_port.
std::pair<std::string, uint16_t> parse_host_port(const std::string& s, const std::string& what,
                                                 bool allow_any_port = false);

}  // namespace warden::transfer
