#include "kv/page_pool.h"

#include <cstring>
#include <string>

#include "util/error.h"

namespace warden::kv {

const char* pool_status_name(PoolStatus s) {
    switch (s) {
        case PoolStatus::Ok:
            return "ok";
        case PoolStatus::StaleGeneration:
            return "stale generation";
        case PoolStatus::NotAllocated:
            return "page not allocated";
        case PoolStatus::BadPageId:
            return "bad page id";
        case PoolStatus::AlreadyCached:
            return "page already held by the prefix cache";
        case PoolStatus::NotCached:
            return "page not held by the prefix cache";
    }
    return "?";
}

PagePool::PagePool(int32_t n_pages, int32_t page_size, int64_t bytes_per_page, bool scrub_on_free)
    : n_pages_(n_pages),
      page_size_(page_size),
      bytes_per_page_(bytes_per_page),
      scrub_on_free_(scrub_on_free) {
    util::check(n_pages > 0, "KV pool: need at least one page (raise the KV byte budget)");
    util::check(page_size > 0 && page_size <= 4096, "KV pool: page size must be in [1, 4096]");
    util::check(bytes_per_page >= 0, "KV pool: negative page size in bytes");
    const auto slots = static_cast<size_t>(n_pages) + 1;
    generation_.assign(slots, 1);
    refcount_.assign(slots, 0);
    cache_held_.assign(slots, 0);
    free_list_.reserve(static_cast<size_t>(n_pages));
    // Pop order 1, 2, 3, ...: deterministic placement makes runs reproducible.
    for (int32_t p = n_pages; p >= 1; --p) free_list_.push_back(p);
    // Attention walks a sequence's pages in a scattered order; 2 MiB pages keep that walk's TLB
    // misses (nested page walks in a VM) down. The pool is made resident (zeroed) so that decode
    // steps do not pay for first-touch page faults (MADV_POPULATE_WRITE faults the zero pages in
    // without writing them: util/huge_page_arena.h): its first 16 MiB (the pages handed out first,
    // hundreds of tokens for the first requests) here, the rest by a background thread at the
    // lowest priority, since zeroing a pool of a GB or more was most of a server's start-up time
    // (first touching memory is slow in a VM: ~0.25-1 GB/s on a 2-core one).
    const size_t bytes = slots * static_cast<size_t>(bytes_per_page);
    try {
        storage_ = util::HugePageArena::map_populating(bytes, size_t{16} << 20);
    } catch (const util::Error& e) {
        throw util::Error(std::string("KV pool: ") + e.what() + " (lower the KV byte budget)");
    }
}

std::optional<PageRef> PagePool::allocate() {
    if (free_list_.empty()) return std::nullopt;
    const int32_t p = free_list_.back();
    free_list_.pop_back();
    refcount_[static_cast<size_t>(p)] = 1;
    ++stats_.allocations;
    return PageRef{PageId{p}, generation_[static_cast<size_t>(p)]};
}

PoolStatus PagePool::validate(PageRef ref) const {
    if (ref.page.v <= 0 || ref.page.v > n_pages_) return PoolStatus::BadPageId;
    const auto i = static_cast<size_t>(ref.page.v);
    if (generation_[i] != ref.gen) return PoolStatus::StaleGeneration;
    if (refcount_[i] <= 0) return PoolStatus::NotAllocated;
    return PoolStatus::Ok;
}

PoolStatus PagePool::retain(PageRef ref) {
    const PoolStatus s = validate(ref);
    if (s != PoolStatus::Ok) {
        ++stats_.refused;
        return s;
    }
    const auto i = static_cast<size_t>(ref.page.v);
    if (cache_held_[i] && refcount_[i] == 1) --cached_only_;  // a sequence joins the cache
    ++refcount_[i];
    return s;
}

void PagePool::drop_one(size_t i, PageId page) {
    if (cache_held_[i] && refcount_[i] == 1) --cached_only_;
    if (--refcount_[i] == 0) {
        cache_held_[i] =
            0;  // only by a forced release (fault injection): the cache's entry is stale now
        ++generation_[i];  // every outstanding reference to this allocation is now stale
        if (scrub_on_free_ && bytes_per_page_ > 0) {
            std::memset(data(page), 0, static_cast<size_t>(bytes_per_page_));
            stats_.scrubbed_bytes += bytes_per_page_;
        }
        free_list_.push_back(page.v);
        ++stats_.frees;
    } else if (cache_held_[i] && refcount_[i] == 1) {
        ++cached_only_;  // the last sequence left; the cache's hold remains
    }
}

PoolStatus PagePool::cache_hold(PageRef ref) {
    PoolStatus s = validate(ref);
    const auto i = static_cast<size_t>(ref.page.v);
    if (s == PoolStatus::Ok && cache_held_[i]) s = PoolStatus::AlreadyCached;
    if (s != PoolStatus::Ok) {
        ++stats_.refused;
        return s;
    }
    ++refcount_[i];
    cache_held_[i] = 1;
    ++stats_.cache_holds;
    return s;
}

PoolStatus PagePool::cache_drop(PageRef ref) {
    PoolStatus s = validate(ref);
    const auto i = static_cast<size_t>(ref.page.v);
    if (s == PoolStatus::Ok && !cache_held_[i]) s = PoolStatus::NotCached;
    if (s != PoolStatus::Ok) {
        ++stats_.refused;
        return s;
    }
    if (refcount_[i] == 1) --cached_only_;
    cache_held_[i] = 0;
    if (--refcount_[i] == 0) {
        ++generation_[i];
        if (scrub_on_free_ && bytes_per_page_ > 0) {
            std::memset(data(ref.page), 0, static_cast<size_t>(bytes_per_page_));
            stats_.scrubbed_bytes += bytes_per_page_;
        }
        free_list_.push_back(ref.page.v);
        ++stats_.frees;
    }
    return s;
}

PoolStatus PagePool::release(PageRef ref) {
    const PoolStatus s = validate(ref);
    if (s != PoolStatus::Ok) {
        ++stats_.refused;
        return s;
    }
    drop_one(static_cast<size_t>(ref.page.v), ref.page);
    return s;
}

std::string PagePool::check_integrity() const {
    std::vector<char> on_free(static_cast<size_t>(n_pages_) + 1, 0);
    for (int32_t p : free_list_) {
        if (p <= 0 || p > n_pages_) return "free list holds invalid page " + std::to_string(p);
        if (on_free[static_cast<size_t>(p)])
            return "page " + std::to_string(p) + " is on the free list twice";
        on_free[static_cast<size_t>(p)] = 1;
        if (refcount_[static_cast<size_t>(p)] != 0)
            return "free page " + std::to_string(p) + " has refcount " +
                   std::to_string(refcount_[static_cast<size_t>(p)]);
    }
    int32_t cached_only = 0, held = 0;
    for (int32_t p = 1; p <= n_pages_; ++p) {
        const auto i = static_cast<size_t>(p);
        if (!on_free[i] && refcount_[i] <= 0)
            return "page " + std::to_string(p) + " is neither free nor held";
        if (generation_[i] == 0) return "page " + std::to_string(p) + " has generation 0";
        if (cache_held_[i] && refcount_[i] <= 0)
            return "page " + std::to_string(p) + " is cache-held but free";
        cached_only += cache_held_[i] && refcount_[i] == 1;
        held += refcount_[i] > 0;
    }
    if (refcount_[0] != 0 || cache_held_[0]) return "the null page is held";
    if (cached_only != cached_only_)
        return "cached page count " + std::to_string(cached_only_) + " but " +
               std::to_string(cached_only) + " pages are held by the prefix cache alone";
    if (free_pages() + used_pages() + cached_pages() != n_pages_ || held != n_pages_ - free_pages())
        return "free + used + cached != total";
    return {};
}

}  // namespace warden::kv
