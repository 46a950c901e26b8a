#pragma once
// Bookkeeping shared by the proposers that run a model of their own (DraftProposer,
// MtpProposer): each sequence's KV lives in the target's paged pool under the proposer's own
// page table, with the same integrity check and budget as the target's.
//
// - pages are taken only while `keep_free` pages stay free (one per sequence in the step), so
//   drafting never forces a preemption: a sequence short of pages gets no draft that step;
// - whole pages past a table's length go back to the pool (trim_pages) after a rollback;
// - every table is freed when its sequence ends (release) or the proposer goes away;
// - before a step runs, each table must pass the cache's ownership check (check_pages).
//
// And the proposer's own sampler at temperature > 0 (prepare_sampler): seeded from the
// request's seed with a per-proposer salt, so its draws are its own.
#include <cstdint>
#include <map>
#include <memory>

#include "engine/sampler.h"
#include "kv/kv_cache.h"
#include "kv/page_table.h"

namespace warden::engine::speculative {

// The table-level steps ProposerKv applies to one sequence.
bool reserve_pages(kv::KvCache& kv, kv::PageTable& table, int64_t n_tokens, int64_t keep_free);
void trim_pages(kv::KvCache& kv, kv::PageTable& table);
bool check_pages(kv::KvCache& kv, kv::SeqId id, kv::PageTable& table, const char* what,
                 int64_t& violations);

// The proposer's sequences; `Seq` has a `kv::PageTable table` member.
template <class Seq>
class ProposerKv {
  public:
    explicit ProposerKv(kv::KvCache& kv) : kv_(kv) {}
    ProposerKv(const ProposerKv&) = delete;
    ProposerKv& operator=(const ProposerKv&) = delete;
    ~ProposerKv() {
        for (auto& [id, s] : seqs_) (void)kv_.free(s.table);
    }

    kv::KvCache& cache() { return kv_; }
    // The sequence's state, created empty on first use.
    Seq& at(kv::SeqId id) { return seqs_[id.v]; }
    Seq* find(kv::SeqId id) {
        const auto it = seqs_.find(id.v);
        return it == seqs_.end() ? nullptr : &it->second;
    }
    // Frees the sequence's pages and forgets it.
    void release(kv::SeqId id) {
        const auto it = seqs_.find(id.v);
        if (it == seqs_.end()) return;
        (void)kv_.free(it->second.table);
        seqs_.erase(it);
    }
    // Forgets the sequence without freeing (its pages are no longer its own).
    void forget(kv::SeqId id) { seqs_.erase(id.v); }

    int64_t pages_held() const {
        int64_t n = 0;
        for (const auto& [id, s] : seqs_) n += static_cast<int64_t>(s.table.pages.size());
        return n;
    }
    // Pages for n_tokens positions, taken only while keep_free pages stay free.
    bool reserve(Seq& s, int64_t n_tokens, int64_t keep_free) {
        return reserve_pages(kv_, s.table, n_tokens, keep_free);
    }
    // Whole pages past table.n_tokens go back to the pool.
    void trim_pages(Seq& s) { speculative::trim_pages(kv_, s.table); }
    // The cache's ownership check of the sequence's table before a step. On a violation: counted,
    // logged, and the table's pages dropped (not the sequence's to free any more); false.
    bool check_pages(kv::SeqId id, Seq& s, const char* what, int64_t& violations) {
        return speculative::check_pages(kv_, id, s.table, what, violations);
    }

  private:
    kv::KvCache& kv_;
    std::map<int64_t, Seq> seqs_;
};

// Greedy (no sampling params or temperature 0): no sampler. Otherwise one made from the
// request's params with seed ^ salt, kept while it exists.
void prepare_sampler(std::unique_ptr<Sampler>& sampler, const SamplingParams* sampling,
                     uint64_t salt);

}  // namespace warden::engine::speculative
