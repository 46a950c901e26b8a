#include "kv/prefix_cache.h"

#include <algorithm>
#include <cstring>

#include "util/error.h"

namespace warden::kv {

namespace {
const std::string kSharedScope = "S";  // tenant scopes start with 'T'

void put_u32(std::string& s, uint32_t v) {
    char b[4];
    std::memcpy(b, &v, 4);
    s.append(b, 4);
}
}  // namespace

PrefixCache::PrefixCache(PagePool& pool, const PrefixCacheConfig& cfg) : pool_(pool), cfg_(cfg) {
    util::check(cfg.page_size == pool.page_size(),
                "prefix cache: page size " + std::to_string(cfg.page_size) +
                    " differs from the pool's " + std::to_string(pool.page_size()));
    secret_ = cfg.secret ? *cfg.secret : random_hash_key();
}

PrefixCache::~PrefixCache() {
    clear();
}

std::string PrefixCache::scope_id(const CacheScope& s) const {
    // Length-prefixed, so (tenant, salt) pairs map to distinct strings: a salt can never make
    // one tenant's scope equal to another's.
    std::string id = "T";
    put_u32(id, static_cast<uint32_t>(s.tenant.size()));
    id += s.tenant;
    put_u32(id, static_cast<uint32_t>(s.cache_salt.size()));
    id += s.cache_salt;
    return id;
}

uint64_t PrefixCache::scope_digest(const std::string& scope) const {
    SipHasher h(secret_);
    h.u64(scope.size());
    h.update(scope.data(), scope.size());
    return h.finish();
}

uint64_t PrefixCache::page_key(uint64_t parent_key, uint64_t scope_dig,
                               std::span<const int32_t> page) const {
    SipHasher h(secret_);
    h.u64(parent_key);
    h.u64(scope_dig);
    h.u64(cfg_.model_id);
    h.u32(cfg_.kv_format);
    h.u32(static_cast<uint32_t>(cfg_.page_size));
    h.update(page.data(), page.size() * sizeof(int32_t));
    return h.finish() & cfg_.test_hash_mask;
}

int64_t PrefixCache::declare_shared_prefix(std::span<const int32_t> tokens) {
    const auto ps = static_cast<size_t>(cfg_.page_size);
    const size_t n_full = tokens.size() / ps;
    if (n_full == 0) return 0;
    std::vector<int32_t> full(tokens.begin(),
                              tokens.begin() + static_cast<std::ptrdiff_t>(n_full * ps));
    if (std::find(shared_prefixes_.begin(), shared_prefixes_.end(), full) == shared_prefixes_.end())
        shared_prefixes_.push_back(std::move(full));
    return static_cast<int64_t>(n_full);
}

int64_t PrefixCache::shared_tokens(std::span<const int32_t> tokens) const {
    size_t best = 0;
    for (const auto& d : shared_prefixes_) {
        const size_t n = std::min(d.size(), tokens.size());
        size_t common = 0;
        while (common < n && d[common] == tokens[common]) ++common;
        best = std::max(best, common);
    }
    return static_cast<int64_t>(best - best % static_cast<size_t>(cfg_.page_size));
}

int32_t PrefixCache::find(uint64_t key, int32_t parent, const std::string& scope,
                          std::span<const int32_t> page, bool count_stats) {
    int32_t found = -1;
    auto [b, e] = index_.equal_range(key);
    for (auto it = b; it != e; ++it) {
        const Entry& en = entries_[static_cast<size_t>(it->second)];
        if (en.parent == parent && en.scope == scope &&
            std::equal(page.begin(), page.end(), en.tokens.begin())) {
            found = it->second;
            break;
        }
        if (count_stats) ++stats_.collisions_rejected;
    }
    if (found < 0) return -1;
    const Entry& en = entries_[static_cast<size_t>(found)];
    if (!pool_.is_live(en.page) || !pool_.is_cache_held(en.page.page)) {
        // The page was freed (or reused) under the cache: never hand it out again.
        remove_subtree(found, /*evicted=*/false);
        return -1;
    }
    return found;
}

std::vector<int32_t> PrefixCache::match(const CacheScope& scope, std::span<const int32_t> tokens,
                                        int64_t max_pages, bool count_stats) {
    std::vector<int32_t> chain;
    if (max_pages <= 0 || n_entries_ == 0) return chain;
    const std::string own = scope_id(scope);
    const uint64_t own_digest = scope_digest(own), shared_digest = scope_digest(kSharedScope);
    const int64_t shared_len = shared_tokens(tokens);
    const int64_t ps = cfg_.page_size;
    uint64_t parent_key = 0;
    int32_t parent = -1;
    for (int64_t i = 0; i < max_pages; ++i) {
        const auto page = tokens.subspan(static_cast<size_t>(i * ps), static_cast<size_t>(ps));
        const bool shared = (i + 1) * ps <= shared_len;
        const uint64_t key = page_key(parent_key, shared ? shared_digest : own_digest, page);
        const int32_t e = find(key, parent, shared ? kSharedScope : own, page, count_stats);
        if (e < 0) break;
        chain.push_back(e);
        parent = e;
        parent_key = key;
    }
    return chain;
}

void PrefixCache::touch_chain(std::span<const int32_t> chain) {
    for (size_t j = chain.size(); j-- > 0;) {
        Entry& en = entries_[static_cast<size_t>(chain[j])];
        lru_.erase({en.last_use, chain[j]});
        en.last_use = ++clock_;
        lru_.insert({en.last_use, chain[j]});
    }
}

int32_t PrefixCache::new_entry() {
    if (!free_slots_.empty()) {
        const int32_t e = free_slots_.back();
        free_slots_.pop_back();
        return e;
    }
    entries_.emplace_back();
    return static_cast<int32_t>(entries_.size() - 1);
}

void PrefixCache::remove_subtree(int32_t root, bool evicted) {
    // Detach the root from its parent; its descendants go with it (they are reachable only
    // through it).
    if (const int32_t p = entries_[static_cast<size_t>(root)].parent; p >= 0) {
        auto& sib = entries_[static_cast<size_t>(p)].children;
        sib.erase(std::find(sib.begin(), sib.end(), root));
    }
    std::vector<int32_t> todo{root};
    while (!todo.empty()) {
        const int32_t e = todo.back();
        todo.pop_back();
        Entry& en = entries_[static_cast<size_t>(e)];
        todo.insert(todo.end(), en.children.begin(), en.children.end());
        if (pool_.is_live(en.page) && pool_.is_cache_held(en.page.page))
            (void)pool_.cache_drop(en.page);
        auto [b, end] = index_.equal_range(en.key);
        for (auto it = b; it != end; ++it)
            if (it->second == e) {
                index_.erase(it);
                break;
            }
        lru_.erase({en.last_use, e});
        if (en.pinned) --n_pinned_;
        --n_entries_;
        if (evicted)
            ++stats_.evicted_pages;
        else
            ++stats_.stale_dropped;
        en = Entry{};
        free_slots_.push_back(e);
    }
}

AttachResult PrefixCache::attach(const CacheScope& scope, std::span<const int32_t> tokens,
                                 PageTable& table) {
    util::check(table.pages.empty() && table.n_tokens == 0,
                "prefix cache: attach needs an empty page table");
    ++stats_.lookups;
    const int64_t n = static_cast<int64_t>(tokens.size());
    const int64_t max_pages = n > 0 ? (n - 1) / cfg_.page_size : 0;  // leave >= 1 token to compute
    const std::vector<int32_t> chain = match(scope, tokens, max_pages, true);
    for (const int32_t e : chain) {
        const PageRef ref = entries_[static_cast<size_t>(e)].page;
        if (pool_.retain(ref) != PoolStatus::Ok) break;  // cannot happen: find() checked it is live
        table.pages.push_back(ref);
    }
    AttachResult r;
    r.cached_pages = static_cast<int64_t>(table.pages.size());
    r.cached_tokens = r.cached_pages * cfg_.page_size;
    std::vector<int32_t> touched = chain;
    // Copy-on-write of a partially matching page: positions [0, k) of the copy hold exactly the
    // K/V this sequence would compute there (same tokens, same positions, batch-invariant
    // kernels); the copy is the sequence's own (refcount 1), so its writes from position k on
    // never touch the cached page. The page is one the sequence needs anyway (admission sized
    // it); without a free page, no copy.
    int64_t k = 0;
    const int32_t src = cfg_.copy_partial_pages && !chain.empty() &&
                                r.cached_pages == static_cast<int64_t>(chain.size())
                            ? partial_match(scope, tokens, chain.back(), r.cached_tokens, k)
                            : -1;
    if (const std::optional<PageRef> fresh = src >= 0 ? pool_.allocate() : std::nullopt) {
        if (pool_.bytes_per_page() > 0)
            std::memcpy(pool_.data(fresh->page),
                        pool_.data(entries_[static_cast<size_t>(src)].page.page),
                        static_cast<size_t>(pool_.bytes_per_page()));
        table.pages.push_back(*fresh);
        r.copied_tokens = k;
        r.cached_tokens += k;
        touched.push_back(src);  // the child is touched before its parents (leaf first)
    }
    touch_chain(touched);
    table.n_tokens = r.cached_tokens;
    stats_.hit_requests += r.cached_tokens > 0;
    stats_.copied_tokens += r.copied_tokens;
    stats_.hit_tokens += r.cached_tokens;
    stats_.miss_tokens += n - r.cached_tokens;
    return r;
}

int32_t PrefixCache::partial_match(const CacheScope& scope, std::span<const int32_t> tokens,
                                   int32_t parent, int64_t pos, int64_t& k_out) const {
    // The next page of the prompt, up to the last token (always computed).
    const int64_t ps = cfg_.page_size, n = static_cast<int64_t>(tokens.size());
    const int64_t room = std::min(ps, n - 1 - pos);
    k_out = 0;
    if (room <= 0) return -1;
    // The children of `parent` in the scope this page would have: only that scope's entries are
    // candidates (a shared page's children belong to every tenant).
    const std::string want = pos + ps <= shared_tokens(tokens) ? kSharedScope : scope_id(scope);
    int32_t best = -1;
    for (const int32_t c : entries_[static_cast<size_t>(parent)].children) {
        const Entry& ce = entries_[static_cast<size_t>(c)];
        if (ce.scope != want || !pool_.is_live(ce.page)) continue;
        int64_t k = 0;
        while (k < room &&
               ce.tokens[static_cast<size_t>(k)] == tokens[static_cast<size_t>(pos + k)])
            ++k;
        if (k > k_out) {
            k_out = k;
            best = c;
        }
    }
    return best;
}

int64_t PrefixCache::probe(const CacheScope& scope, std::span<const int32_t> tokens) {
    const int64_t n = static_cast<int64_t>(tokens.size());
    const int64_t max_pages = n > 0 ? (n - 1) / cfg_.page_size : 0;
    return static_cast<int64_t>(match(scope, tokens, max_pages, false).size()) * cfg_.page_size;
}

OfferResult PrefixCache::offer(const CacheScope& scope, std::span<const int32_t> tokens,
                               const PageTable& table) {
    OfferResult r;
    const int64_t ps = cfg_.page_size;
    const int64_t n_tok = std::min(static_cast<int64_t>(tokens.size()), table.n_tokens);
    const int64_t n_full = std::min(n_tok / ps, static_cast<int64_t>(table.pages.size()));
    if (n_full <= 0) return r;
    // A table with a stale entry never feeds the cache: its KV may have been computed on
    // pages someone else owned.
    r.violation =
        verify_table(pool_, SeqId{-1},
                     std::span<const PageRef>(table.pages.data(), static_cast<size_t>(n_full)));
    if (r.violation) return r;

    const std::string own = scope_id(scope);
    const uint64_t own_digest = scope_digest(own), shared_digest = scope_digest(kSharedScope);
    const int64_t shared_len = shared_tokens(tokens);
    std::vector<int32_t> chain;
    uint64_t parent_key = 0;
    int32_t parent = -1;
    for (int64_t i = 0; i < n_full; ++i) {
        const auto page = tokens.subspan(static_cast<size_t>(i * ps), static_cast<size_t>(ps));
        const bool shared = (i + 1) * ps <= shared_len;
        const std::string& sc = shared ? kSharedScope : own;
        const uint64_t key = page_key(parent_key, shared ? shared_digest : own_digest, page);
        const PageRef mine = table.pages[static_cast<size_t>(i)];
        int32_t e = find(key, parent, sc, page, true);
        if (e >= 0) {
            if (entries_[static_cast<size_t>(e)].page == mine)
                ++r.already_cached;
            else
                ++r.duplicates;
        } else {
            // Our page already caches other content (the caller changed scope or tokens between
            // calls): it cannot be cached twice; stop here.
            if (pool_.is_cache_held(mine.page) || pool_.cache_hold(mine) != PoolStatus::Ok) break;
            e = new_entry();
            Entry& en = entries_[static_cast<size_t>(e)];
            en.used = true;
            en.pinned = shared;
            en.key = key;
            en.parent = parent;
            en.page = mine;
            en.scope = sc;
            en.tokens.assign(page.begin(), page.end());
            en.last_use = ++clock_;  // re-stamped by touch_chain below
            lru_.insert({en.last_use, e});
            index_.emplace(key, e);
            if (parent >= 0) entries_[static_cast<size_t>(parent)].children.push_back(e);
            ++n_entries_;
            n_pinned_ += shared;
            ++r.inserted;
        }
        chain.push_back(e);
        parent = e;
        parent_key = key;
    }
    touch_chain(chain);
    stats_.inserted_pages += r.inserted;
    stats_.duplicate_pages += r.duplicates;
    return r;
}

int64_t PrefixCache::evict(int64_t n_pages) {
    int64_t freed = 0;
    // Ascending last_use; children always precede their parents, so a parent whose last child
    // goes is reached later in the same pass.
    for (auto it = lru_.begin(); it != lru_.end() && freed < n_pages;) {
        const int32_t e = it->second;
        ++it;
        const Entry& en = entries_[static_cast<size_t>(e)];
        if (en.pinned || !en.children.empty()) continue;
        const bool live = pool_.is_live(en.page) && pool_.is_cache_held(en.page.page);
        if (live && pool_.refcount(en.page.page) != 1) continue;  // a sequence holds it
        remove_subtree(e, live);
        freed += live;
    }
    return freed;
}

int64_t PrefixCache::evictable_pages() const {
    std::vector<char> ok(entries_.size(), 0);
    int64_t n = 0;
    for (const auto& [tick, e] : lru_) {
        const Entry& en = entries_[static_cast<size_t>(e)];
        bool can = !en.pinned && pool_.is_live(en.page) && pool_.is_cache_held(en.page.page) &&
                   pool_.refcount(en.page.page) == 1;
        for (const int32_t c : en.children) can = can && ok[static_cast<size_t>(c)];
        ok[static_cast<size_t>(e)] = can;
        n += can;
    }
    return n;
}

int64_t PrefixCache::clear() {
    const int64_t n = n_entries_;
    for (size_t e = 0; e < entries_.size(); ++e)
        if (entries_[e].used && entries_[e].parent < 0)
            remove_subtree(static_cast<int32_t>(e), true);
    return n;
}

std::string PrefixCache::check_integrity() const {
    int64_t used = 0, pinned = 0, live = 0;
    std::vector<char> page_seen(static_cast<size_t>(pool_.capacity()) + 1, 0);
    for (size_t i = 0; i < entries_.size(); ++i) {
        const Entry& en = entries_[i];
        if (!en.used) continue;
        const auto e = static_cast<int32_t>(i);
        const std::string at = "prefix cache entry " + std::to_string(e) + ": ";
        ++used;
        pinned += en.pinned;
        if (static_cast<int32_t>(en.tokens.size()) != cfg_.page_size)
            return at + "wrong token count";
        bool indexed = false;
        auto [b, end] = index_.equal_range(en.key);
        for (auto it = b; it != end; ++it) indexed = indexed || it->second == e;
        if (!indexed) return at + "missing from the index";
        if (!lru_.count({en.last_use, e})) return at + "missing from the LRU order";
        if (en.parent >= 0) {
            const Entry& p = entries_[static_cast<size_t>(en.parent)];
            if (!p.used) return at + "parent is gone";
            if (std::count(p.children.begin(), p.children.end(), e) != 1)
                return at + "not among its parent's children";
            if (p.last_use <= en.last_use) return at + "used more recently than its parent";
        }
        for (const int32_t c : en.children)
            if (!entries_[static_cast<size_t>(c)].used ||
                entries_[static_cast<size_t>(c)].parent != e)
                return at + "bad child " + std::to_string(c);
        if (pool_.is_live(en.page)) {
            if (!pool_.is_cache_held(en.page.page))
                return at + "live page " + std::to_string(en.page.page.v) + " not cache-held";
            if (page_seen[static_cast<size_t>(en.page.page.v)]++) return at + "page cached twice";
            ++live;
        }
        // An entry whose page is no longer live is stale; it is dropped at its next lookup
        // and is never handed out.
    }
    if (used != n_entries_ || pinned != n_pinned_) return "prefix cache: entry counts disagree";
    if (static_cast<int64_t>(index_.size()) != used || static_cast<int64_t>(lru_.size()) != used)
        return "prefix cache: index or LRU size disagrees with the entries";
    int64_t held = 0;
    for (int32_t p = 1; p <= pool_.capacity(); ++p) held += pool_.is_cache_held(PageId{p});
    if (held != live)
        return "prefix cache: the pool has " + std::to_string(held) + " cache-held pages but " +
               std::to_string(live) + " live entries";
    return {};
}

}  // namespace warden::kv
