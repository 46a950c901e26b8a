#pragma once
// The KV hand-off's control messages (UCP active messages) and their byte encoding:
//   decode -> prefill  PrefillRequest  the prompt, how many pages the decode server reserved,
//                                      its KV format and model (the prefill server converts
//                                      its pages into that format when its own differs)
//   prefill -> decode  PrefillReady    the manifest (per-page checksums, fingerprint, token
//                                      count), the last prompt position's logits, and where the
//                                      pages lie in the prefill server's registered pool with
//                                      its remote key; or an error
//   decode -> prefill  PrefillRelease  the decode server has fetched the pages (RMA get into
//                                      its reserved pages) or given up: the prefill server may
//                                      free them
// On one host, a shared-memory path for the page reads (transfer/ucx_node.h):
//   decode -> prefill  LocalPath{Ask}      asks for the prefill server's worker address
//   prefill -> decode  LocalPath{Address}  its worker address
//   decode -> prefill  LocalPath{Ready}    the decode server holds a shared-memory endpoint to
//                                          it: stage this connection's pages in memory UCX
//                                          allocated (the reads through it are local copies)
//   prefill -> decode  ReleaseAck          answers a PrefillRelease that asked for it: whether
//                                          the pages were still held for the decode server.
//                                          Local copies cannot fail when the prefill server
//                                          dies, so a transfer read that way is accepted only
//                                          once this confirms the lease outlived the reads
// The decode server moves the bytes itself (RMA get), so no write into its pool can happen
// after it stopped waiting: it frees a failed transfer's pages only once every get it issued
// has completed or failed.
// Decoding is bounds-checked: a malformed message is refused (nullopt), never trusted.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kv/kv_convert.h"
#include "kv/kv_handoff.h"

namespace warden::transfer {

constexpr uint16_t kAmPrefillRequest = 11;
constexpr uint16_t kAmPrefillReady = 12;
constexpr uint16_t kAmPrefillRelease = 13;
constexpr uint16_t kAmLocalPath = 14;
constexpr uint16_t kAmReleaseAck = 15;

struct PrefillRequest {
    uint64_t transfer_id = 0;
    uint64_t fingerprint = 0;     // the decode server's KV layout + model
    kv::KvWireFormat format;      // the decode server's KV format: pages travel in it
    uint64_t n_pages = 0;         // pages the decode server reserved
    std::vector<int32_t> prompt;  // tokens (the pages hold prompt.size() positions)
};

struct PrefillReady {
    uint64_t transfer_id = 0;
    std::string error;  // non-empty: the prefill server refused or failed
    kv::HandoffManifest manifest;
    std::vector<float> logits;  // [vocab] of the last prompt position
    uint64_t page_bytes = 0;
    std::vector<uint64_t> addrs;  // each page's address in the prefill server's registered pool
    std::vector<uint8_t> rkey;    // packed remote key of that region
};

struct PrefillRelease {
    uint64_t transfer_id = 0;
    bool confirm = false;  // answer with a ReleaseAck
};

struct LocalPath {
    enum Step : uint8_t { Ask = 0, Address = 1, Ready = 2 };
    Step step = Ask;
    std::vector<uint8_t> worker_address;  // Address only
};

struct ReleaseAck {
    uint64_t transfer_id = 0;
    bool held = false;  // the lease was still in force when the release arrived
};

std::vector<uint8_t> encode(const PrefillRequest& m);
std::vector<uint8_t> encode(const PrefillReady& m);
std::vector<uint8_t> encode(const PrefillRelease& m);
std::vector<uint8_t> encode(const LocalPath& m);
std::vector<uint8_t> encode(const ReleaseAck& m);
std::optional<PrefillRequest> decode_request(std::span<const uint8_t> b);
std::optional<PrefillReady> decode_ready(std::span<const uint8_t> b);
std::optional<PrefillRelease> decode_release(std::span<const uint8_t> b);
std::optional<LocalPath> decode_local_path(std::span<const uint8_t> b);
std::optional<ReleaseAck> decode_release_ack(std::span<const uint8_t> b);

}  // namespace warden::transfer
