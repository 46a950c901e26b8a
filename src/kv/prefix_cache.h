#pragma once
// The prefix cache: full KV pages kept after their sequence ends, found again by the tokens
// that produced them, and attached (refcounted, never copied) to later sequences whose prompt
// starts with the same tokens, so their prefill starts at pos0 = cached tokens.
//
// Index: a hash chain over FULL pages. The key of page i is SipHash-2-4 under a per-process
// random secret of (key of page i-1, scope digest, model id, KV format, page size, the page's
// page_size token ids). A key only finds candidates: a hit is confirmed by comparing the
// stored token ids, the scope and the parent entry exactly, so a hash collision can never hand
// anyone pages computed from other tokens or for another tenant.
//
// Scope (tenant isolation): every entry belongs to the server-side tenant of the request
// (from its API key, never from the client) combined with the client's optional cache_salt,
// which can only narrow sharing. The one exception are operator-declared shared prefixes
// (a common system prompt or tool list): their full pages live in a shared scope every tenant
// hits; the chain continues after them in the requester's own scope.
//
// Pages: the cache holds one reference to each cached page (PagePool::cache_hold); a
// sequence that attaches a page retains it and records its current generation in its page
// table, so the executor's verify_table checks shared pages like any other. Only full pages
// are cached; a sequence's partially filled last page is never cached or shared, and since
// attached pages are full and page tables are append-only, a sequence never writes a shared
// page. With copy_partial_pages, a cached page that matches the prompt only in its first k
// tokens is copied into a private page (copy-on-write), so those k tokens are not recomputed.
// Eviction (LRU over pages held by the cache alone, leaves of the chain first) releases the cache's
// hold: the page returns to the free list and its generation is bumped, so any reference that
// survived is stale and detected.
//
// Single-threaded: owned by the scheduler thread, like the pool. The pool must outlive it.
#include <cstdint>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "kv/keyed_hash.h"
#include "kv/page_pool.h"
#include "kv/page_table.h"

namespace warden::kv {

// Who may share cached pages. tenant is the server-side identity (from the API key);
// cache_salt is the client's optional narrowing (vLLM's `cache_salt`). Two requests share
// only when both are equal (byte-exact), or within an operator-declared shared prefix.
struct CacheScope {
    std::string tenant;
    std::string cache_salt;
};

struct PrefixCacheConfig {
    int32_t page_size = 16;  // must equal the pool's
    uint64_t model_id = 0;   // identifies the weights + runtime dtype (entries never cross models)
    uint32_t kv_format = 0;  // the KV storage format (tensor::KvType as an integer)
    // The SipHash key. Left unset, a random per-process secret is drawn from the OS.
    std::optional<HashKey> secret;
    // Tests only: AND-ed into every key (0 makes every page collide), to prove that a
    // collision is rejected by the token comparison.
    uint64_t test_hash_mask = ~uint64_t{0};
    // After the last fully matching page, copy the cached continuation page whose first k
    // tokens match the prompt's next ones into a fresh page of the sequence (copy-on-write of
    // a partially matching page), so up to page_size - 1 more tokens are not recomputed.
    // Needs the pool's page bytes to be the KV storage (a KvCache's pool).
    bool copy_partial_pages = false;
};

struct PrefixCacheStats {
    int64_t lookups = 0;              // attach calls (requests)
    int64_t hit_requests = 0;         // ... that attached at least one page
    int64_t hit_tokens = 0;           // prompt tokens served from the cache
    int64_t miss_tokens = 0;          // prompt tokens of lookups not served (to be computed)
    int64_t inserted_pages = 0;       // entries created by offer
    int64_t evicted_pages = 0;        // entries evicted (page freed, generation bumped)
    int64_t stale_dropped = 0;        // entries found pointing at a freed/reused page and dropped
    int64_t collisions_rejected = 0;  // key matched, but tokens / scope / parent differed
    int64_t duplicate_pages = 0;  // offered pages whose content was already cached in another page
    int64_t copied_tokens = 0;    // hit tokens served by copying a partially matching page
};

struct AttachResult {
    int64_t cached_tokens = 0;  // positions [0, cached_tokens) are in the table's pages: pos0
    int64_t cached_pages = 0;   // shared (retained) full pages
    int64_t copied_tokens =
        0;  // of cached_tokens, those in a private copy of a partially matching page
};

struct OfferResult {
    int64_t inserted = 0;        // new entries
    int64_t already_cached = 0;  // pages already in the cache (attached ones, or offered before)
    int64_t duplicates = 0;      // same content already cached in another page (ours not kept)
    std::optional<IntegrityViolation> violation;  // the table was stale: nothing was offered
};

class PrefixCache {
  public:
    PrefixCache(PagePool& pool,
                const PrefixCacheConfig& cfg);  // throws util::Error on a bad config
    ~PrefixCache();                             // drops every hold (the pool must still exist)
    PrefixCache(const PrefixCache&) = delete;
    PrefixCache& operator=(const PrefixCache&) = delete;

    // Operator-declared shared prefix (token ids). Only its full pages are shared; returns
    // how many. Entries under it are pinned (never evicted) so that their presence carries
    // no signal; warm them once at startup by prefilling the prefix and offering it.
    int64_t declare_shared_prefix(std::span<const int32_t> tokens);

    // Admission: finds the longest chain of cached full pages that prefixes `tokens`, leaving
    // at least one token to compute (the last token's logits are needed), retains each page
    // for the sequence and appends it, with its current generation, to `table`, which must
    // be empty. With copy_partial_pages, a partially matching next page is then copied into
    // one freshly allocated page (the only allocation; skipped when none is free).
    // table.n_tokens = result.cached_tokens; the first step runs at pos0 = cached_tokens.
    // Never fails (a miss attaches nothing).
    AttachResult attach(const CacheScope& scope, std::span<const int32_t> tokens, PageTable& table);
    // The same lookup without attaching, touching LRU order or counting stats (admission
    // sizing: pages needed = pages_for(len + 1) - probe / page_size).
    int64_t probe(const CacheScope& scope, std::span<const int32_t> tokens);

    // Finish / preemption / after any step: offers the table's full pages, i.e. pages covering
    // [0, floor(min(tokens.size(), table.n_tokens) / page_size) * page_size), for caching under
    // `scope` (the same scope as at attach). tokens are the sequence's tokens whose K/V are in
    // the table. Idempotent. The table is verified first; a stale table offers nothing. The
    // table keeps its own references: release them afterwards as usual (KvCache::free).
    OfferResult offer(const CacheScope& scope, std::span<const int32_t> tokens,
                      const PageTable& table);

    // Memory pressure: frees up to n pages held by the cache alone (no sequence holds them),
    // least recently used first, chain leaves before their parents, never pinned ones.
    // Returns how many were freed (their generations are bumped).
    int64_t evict(int64_t n_pages);
    // How many pages evict() could free right now (O(entries)).
    int64_t evictable_pages() const;
    // Drops every entry (pinned ones too). Returns the entries dropped.
    int64_t clear();

    // Entries consistent with the pool and the index (empty string when consistent).
    std::string check_integrity() const;

    const PrefixCacheStats& stats() const { return stats_; }
    int64_t cached_pages() const { return n_entries_; }  // entries (held pages), referenced or not
    int64_t pinned_pages() const { return n_pinned_; }
    int32_t page_size() const { return cfg_.page_size; }

  private:
    struct Entry {
        bool used = false;
        bool pinned = false;  // shared-prefix page
        uint64_t key = 0;
        int32_t parent = -1;  // entry index of page i-1; -1 at the root
        PageRef page;
        uint64_t last_use = 0;        // LRU tick; a parent's is always greater than its children's
        std::string scope;            // exact scope identity
        std::vector<int32_t> tokens;  // [page_size]
        std::vector<int32_t> children;  // entry indices
    };
    struct Walk {  // one step of a chain walk
        uint64_t key = 0;
        int32_t entry = -1;  // confirmed entry, or -1
    };

    std::string scope_id(const CacheScope& s) const;
    int64_t shared_tokens(
        std::span<const int32_t> tokens) const;  // full pages of a declared prefix
    uint64_t page_key(uint64_t parent_key, uint64_t scope_digest,
                      std::span<const int32_t> page) const;
    uint64_t scope_digest(const std::string& scope) const;
    // Finds the confirmed entry for (parent, scope, page tokens) under key. Drops it (and its
    // subtree) when its page is no longer live; returns -1 then.
    int32_t find(uint64_t key, int32_t parent, const std::string& scope,
                 std::span<const int32_t> page, bool count_stats);
    // The child of `parent` (in the scope of the page at token `pos`) sharing the longest run of
    // leading tokens with tokens[pos, len - 1); k_out = that run. -1 when none shares one.
    int32_t partial_match(const CacheScope& scope, std::span<const int32_t> tokens, int32_t parent,
                          int64_t pos, int64_t& k_out) const;
    // Walks the chain over the first n_pages full pages of tokens while entries confirm.
    std::vector<int32_t> match(const CacheScope& scope, std::span<const int32_t> tokens,
                               int64_t max_pages, bool count_stats);
    void touch_chain(std::span<const int32_t> chain);  // leaf first, so parents get later ticks
    void remove_subtree(int32_t e, bool evicted);
    int32_t new_entry();

    PagePool& pool_;
    PrefixCacheConfig cfg_;
    HashKey secret_{};
    std::vector<Entry> entries_;
    std::vector<int32_t> free_slots_;
    std::unordered_multimap<uint64_t, int32_t> index_;  // key -> entry
    std::set<std::pair<uint64_t, int32_t>> lru_;        // (last_use, entry)
    uint64_t clock_ = 0;
    int64_t n_entries_ = 0;
    int64_t n_pinned_ = 0;
    std::vector<std::vector<int32_t>> shared_prefixes_;  // full pages only
    PrefixCacheStats stats_;
};

}  // namespace warden::kv
