#pragma once
// The KV page pool: N physical pages of `page_size` tokens (one page id across all layers),
// each with a 64-bit generation and a refcount. The generation starts at 1 and is incremented
// every time the page returns to the free list, so a (page, generation) pair names one
// *allocation* of a page, never the page in general: holding a stale pair is detectable.
//
// The pool is owned by one thread (the scheduler). Bad requests (double free, freeing or
// sharing a page through a stale reference, refcount underflow) are refused with a status and
// leave the pool unchanged: a bug in a caller can never corrupt the free list.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kv/kv_types.h"

namespace warden::kv {

enum class PoolStatus {
    Ok,
    StaleGeneration,  // reference names an earlier allocation of the page
    NotAllocated,     // page is on the free list (double free / use after free)
    BadPageId,        // out of range or the reserved null page
};
const char* pool_status_name(PoolStatus s);

struct PoolStats {
    int64_t allocations = 0;
    int64_t frees = 0;            // pages returned to the free list
    int64_t refused = 0;          // release/retain requests refused
    int64_t scrubbed_bytes = 0;
};

class PagePool {
public:
    // n_pages usable pages plus the reserved null page 0 (never handed out; padding slots of
    // page tables point at it). bytes_per_page is the KV storage of one page across all layers;
    // 0 means the pool tracks ownership only (tests).
    PagePool(int32_t n_pages, int32_t page_size, int64_t bytes_per_page, bool scrub_on_free = false);

    int32_t page_size() const { return page_size_; }
    int32_t capacity() const { return n_pages_; }
    int32_t free_pages() const { return static_cast<int32_t>(free_list_.size()); }
    int32_t used_pages() const { return n_pages_ - free_pages(); }
    int64_t bytes_per_page() const { return bytes_per_page_; }
    const PoolStats& stats() const { return stats_; }

    // Pops a free page with refcount 1. Returns nullopt when none is free (a normal outcome:
    // the scheduler answers it with preemption, not an exception).
    std::optional<PageRef> allocate();
    // Adds a holder (prefix sharing). Refused unless ref is the page's live allocation.
    PoolStatus retain(PageRef ref);
    // Drops a holder; at zero the generation is bumped and the page returns to the free list
    // (zeroed first with scrub_on_free). Refused unless ref is the live allocation.
    PoolStatus release(PageRef ref);

    // True iff ref names the page's live allocation. The integrity verifier's primitive.
    bool is_live(PageRef ref) const {
        const auto i = static_cast<size_t>(ref.page.v);
        return ref.page.v > 0 && ref.page.v <= n_pages_ && refcount_[i] > 0 && generation_[i] == ref.gen;
    }
    Generation generation(PageId p) const { return generation_[static_cast<size_t>(p.v)]; }
    int32_t refcount(PageId p) const { return refcount_[static_cast<size_t>(p.v)]; }

    // KV bytes of page p (all layers); the null page's bytes are all zero.
    uint8_t* data(PageId p) { return storage_.data() + static_cast<size_t>(p.v) * static_cast<size_t>(bytes_per_page_); }
    const uint8_t* data(PageId p) const {
        return storage_.data() + static_cast<size_t>(p.v) * static_cast<size_t>(bytes_per_page_);
    }

    // Free + used == total, free list without duplicates, refcounts consistent with it.
    // Returns an empty string when consistent, else a description of the first problem.
    std::string check_integrity() const;

private:
    PoolStatus validate(PageRef ref) const;

    int32_t n_pages_;
    int32_t page_size_;
    int64_t bytes_per_page_;
    bool scrub_on_free_;
    std::vector<Generation> generation_;  // [n_pages + 1]
    std::vector<int32_t> refcount_;       // [n_pages + 1]
    std::vector<int32_t> free_list_;      // stack of page ids
    std::vector<uint8_t> storage_;        // [(n_pages + 1) * bytes_per_page]
    PoolStats stats_;
};

}  // namespace warden::kv
