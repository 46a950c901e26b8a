#pragma once
// Moving a prompt's KV pages between two servers (prefill/decode disaggregation), the KV side:
// the decode server reserves destination pages (its own allocations, with their generations),
// a remote writer fills their bytes, and before the first decode step the reservation is
// verified against what the sender claims it sent (a HandoffManifest): every page still live
// with the generation reserved, as many pages as reserved, each page's payload checksum equal,
// the same page layout, KV format and model. Anything else fails closed: the caller releases
// the reservation (release() frees every page through the pool; nothing leaks).
//
// Single-threaded like the pool: reserve/verify/release run on the thread that owns the
// KvCache (the scheduler's). Only the page bytes are touched from elsewhere, between reserve
// and verify: written by the transport, then checksummed (check_payload, the costly part of
// verify, a pass over every byte) on a worker so the scheduler keeps stepping meanwhile.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kv/kv_cache.h"

namespace warden::kv {

// Identifies the byte layout of a page (KV type, scale layout, page size, layers, heads, head
// size) and the model whose KV it is: two servers may exchange pages only when equal.
uint64_t kv_layout_fingerprint(const KvCacheConfig& c, std::string_view model_id);

// XXH3 (64-bit) of one page's payload (all layers). Detects accidental damage in transit.
// kPageChecksumAlgorithm names it inside kv_layout_fingerprint.
inline constexpr uint32_t kPageChecksumAlgorithm = 3;
uint64_t page_checksum(const uint8_t* data, size_t n);
// Checksums of the table's pages, in table order (the sender's side of the manifest).
std::vector<uint64_t> page_checksums(const KvCache& kv, std::span<const PageRef> pages);

// What the sender says it wrote.
struct HandoffManifest {
    uint64_t transfer_id = 0;
    uint64_t fingerprint = 0;
    int64_t n_tokens = 0;             // prompt positions the pages hold
    std::vector<uint64_t> checksums;  // one per page, in reservation order
};

// The payload part of the hand-off check: which reserved page, if any, differs from the
// manifest's checksums. Computed by check_payload from the page bytes alone (no pool metadata),
// so on any thread; verify() then trusts it only for the same transfer and page count.
struct PayloadCheck {
    uint64_t transfer_id = 0;  // the manifest's it was computed against
    int64_t n_pages = -1;      // pages compared; -1: not computed (verify refuses)
    int64_t first_bad = -1;    // the first page whose checksum differs; -1: none
};
// Thread-safe (reads `pages` only): each of n page_bytes-long pages against m.checksums. When
// the counts differ nothing is compared (n_pages stays -1; verify reports the count).
PayloadCheck check_payload(std::span<const uint8_t* const> pages, size_t page_bytes,
                           const HandoffManifest& m);

enum class HandoffStatus {
    Ok,
    PageNotLive,    // a reserved page was freed or reallocated meanwhile
    PageCount,      // the manifest names more or fewer pages than reserved
    TokenCount,     // the manifest's token count does not match the reservation
    Checksum,       // a page's payload differs from what was sent
    Fingerprint,    // layout, KV format or model differ
    WrongTransfer,  // the manifest is for another transfer
};
const char* handoff_status_name(HandoffStatus s);

struct HandoffCheck {
    HandoffStatus status = HandoffStatus::Ok;
    int64_t page_index = -1;  // the first page at fault, where one is
    bool ok() const { return status == HandoffStatus::Ok; }
    std::string describe() const;  // ids and counts only, never KV bytes
};

class KvHandoff {
  public:
    // Reserves pages for n_tokens positions (all or nothing). nullopt when the pool has too
    // few free pages (the caller answers it with "busy", not an error).
    static std::optional<KvHandoff> reserve(KvCache& kv, int64_t n_tokens, uint64_t transfer_id,
                                            uint64_t fingerprint);

    uint64_t transfer_id() const { return transfer_id_; }
    int64_t n_tokens() const { return table_.n_tokens == 0 ? n_tokens_ : table_.n_tokens; }
    std::span<const PageRef> pages() const { return table_.pages; }
    // Byte offsets of each reserved page from the start of the pool's storage (the remote
    // writer's targets, relative to the registered region).
    std::vector<uint64_t> page_offsets(const KvCache& kv) const;

    // The checks above, in order: transfer id, fingerprint, counts, liveness, checksums.
    HandoffCheck verify(const KvCache& kv, const HandoffManifest& m) const;
    // The same checks with the checksums already compared (check_payload over this
    // reservation's pages, elsewhere): only the cheap ones run here, the liveness and
    // generation of every page included. A payload check of another transfer or page count, or
    // none, is a Checksum failure (never trusted).
    HandoffCheck verify(const KvCache& kv, const HandoffManifest& m,
                        const PayloadCheck& payload) const;
    // The reserved pages' bytes, in reservation order (the transport's destinations and
    // check_payload's input). Valid while the reservation holds them.
    std::vector<uint8_t*> page_data(KvCache& kv) const;
    // After a successful verify: the page table (n_tokens set) for the sequence that will
    // decode from it; the reservation is empty afterwards (release() then frees nothing).
    PageTable take();
    // Frees every reserved page through the pool; returns how many frees the pool refused.
    int64_t release(KvCache& kv);
    bool empty() const { return table_.pages.empty(); }

  private:
    uint64_t transfer_id_ = 0;
    uint64_t fingerprint_ = 0;
    int64_t n_tokens_ = 0;
    PageTable table_;
};

}  // namespace warden::kv
