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
#include "util/huge_page_arena.h"

namespace warden::kv {

enum class PoolStatus {
    Ok,
    StaleGeneration,  // reference names an earlier allocation of the page
    NotAllocated,     // page is on the free list (double free / use after free)
    BadPageId,        // out of range or the reserved null page
    AlreadyCached,    // cache_hold of a page the prefix cache already holds
    NotCached,        // cache_drop of a page the prefix cache does not hold
};
const char* pool_status_name(PoolStatus s);

struct PoolStats {
    int64_t allocations = 0;
    int64_t frees = 0;    // pages returned to the free list
    int64_t refused = 0;  // release/retain requests refused
    int64_t scrubbed_bytes = 0;
    int64_t cache_holds = 0;  // cache_hold calls accepted
};

class PagePool {
  public:
    // n_pages usable pages plus the reserved null page 0 (never handed out; padding slots of
    // page tables point at it). bytes_per_page is the KV storage of one page across all layers;
    // 0 means the pool tracks ownership only (tests).
    PagePool(int32_t n_pages, int32_t page_size, int64_t bytes_per_page,
             bool scrub_on_free = false);

    int32_t page_size() const { return page_size_; }
    int32_t capacity() const { return n_pages_; }
    int32_t free_pages() const { return static_cast<int32_t>(free_list_.size()); }
    // Pages some sequence holds (free + used + cached == capacity). A page the prefix cache
    // holds counts as used while any sequence holds it too, as cached when only the cache does.
    int32_t used_pages() const { return n_pages_ - free_pages() - cached_pages(); }
    // Pages whose only holder is the prefix cache (reclaimable by evicting them).
    int32_t cached_pages() const { return cached_only_; }
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

    // The prefix cache's own hold on a page: one more refcount plus a flag, so the pool can
    // tell pages held only by the cache (cached) from pages in use. Refused unless ref is the
    // live allocation and the page is not already cache-held. cache_drop releases that hold
    // (at refcount zero the page is freed and its generation bumped, like release).
    PoolStatus cache_hold(PageRef ref);
    PoolStatus cache_drop(PageRef ref);
    bool is_cache_held(PageId p) const { return cache_held_[static_cast<size_t>(p.v)] != 0; }

    // True iff ref names the page's live allocation. The integrity verifier's primitive.
    bool is_live(PageRef ref) const {
        const auto i = static_cast<size_t>(ref.page.v);
        return ref.page.v > 0 && ref.page.v <= n_pages_ && refcount_[i] > 0 &&
               generation_[i] == ref.gen;
    }
    Generation generation(PageId p) const { return generation_[static_cast<size_t>(p.v)]; }
    int32_t refcount(PageId p) const { return refcount_[static_cast<size_t>(p.v)]; }

    // KV bytes of page p (all layers); the null page's bytes are all zero.
    uint8_t* data(PageId p) {
        return storage_.data() + static_cast<size_t>(p.v) * static_cast<size_t>(bytes_per_page_);
    }
    const uint8_t* data(PageId p) const {
        return storage_.data() + static_cast<size_t>(p.v) * static_cast<size_t>(bytes_per_page_);
    }

    // Free + used + cached == total, free list without duplicates, refcounts consistent with
    // it, every cache-held page held, the cached count matching the flags.
    // Returns an empty string when consistent, else a description of the first problem.
    std::string check_integrity() const;

  private:
    PoolStatus validate(PageRef ref) const;
    void drop_one(size_t i, PageId page);  // refcount - 1; frees at zero

    int32_t n_pages_;
    int32_t page_size_;
    int64_t bytes_per_page_;
    bool scrub_on_free_;
    std::vector<Generation> generation_;  // [n_pages + 1]
    std::vector<int32_t> refcount_;       // [n_pages + 1]
    std::vector<char> cache_held_;        // [n_pages + 1] the prefix cache holds one of the refs
    int32_t cached_only_ = 0;             // pages with cache_held_ and refcount 1
    std::vector<int32_t> free_list_;      // stack of page ids
    util::ArenaBuffer storage_;           // [(n_pages + 1) * bytes_per_page], on 2 MiB pages
    PoolStats stats_;
};

}  // namespace warden::kv
