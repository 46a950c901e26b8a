#pragma once
// Where a disaggregated decode server's prompts are computed: another server (transfer/ on
// UCX), behind this interface so the engine stays below the transport. The engine reserves the
// destination pages on its scheduler thread, asks the source to fill them, verifies what came
// (kv::KvHandoff) and only then decodes; on any failure it frees the pages itself.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kv/kv_handoff.h"

namespace warden::engine {

struct RemotePrefill {
    bool ok = false;
    bool retryable = false;  // failed before anything was accepted; another server may do it
    std::string error;       // ids and counts only, never prompt text
    kv::HandoffManifest manifest;
    std::vector<float> logits;  // of the last prompt position
    double transfer_ms = 0;
    double fetch_ms = 0;  // the page reads alone: first get issued -> last get completed
    int64_t bytes = 0;
};

class PrefillSource {
  public:
    virtual ~PrefillSource() = default;
    // Identifies this server's KV page layout, format and model (kv_layout_fingerprint).
    virtual uint64_t fingerprint() const = 0;
    // Starts computing `prompt` elsewhere and writing its KV pages into `dest` (page_bytes
    // each). `done` runs exactly once, on any thread, and only when nothing more will be
    // written into `dest`. `attempt` counts retries of the same request (0 first).
    // `hint`: the prefill server to use first (one that knows() accepts), empty: any.
    virtual void fetch(uint64_t transfer_id, const std::vector<int32_t>& prompt,
                       std::vector<uint8_t*> dest, size_t page_bytes, int attempt,
                       const std::string& hint, std::function<void(RemotePrefill&&)> done) = 0;
    // Whether `endpoint` (HOST:PORT) is one of this source's prefill servers.
    virtual bool knows(const std::string& endpoint) const = 0;
    virtual void cancel(uint64_t transfer_id) = 0;  // done still runs (not ok)
};

}  // namespace warden::engine
