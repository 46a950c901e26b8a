// Pages for a step, and giving them back: a sequence short of pages first takes unreferenced
// pages of the prefix cache (LRU eviction), then preempts the newest running sequence (its
// pages are freed and it re-queues at the front of the queue, to recompute later).
#include "engine/scheduler.h"
#include "engine/scheduler_seq.h"

namespace warden::engine {

// Reserves the pages running_[i] needs for `n_new` more tokens, evicting and preempting as
// needed. Returns whether the sequence takes part in this step (false: it was preempted itself,
// or ended with an integrity error).
bool Scheduler::reserve_or_preempt(size_t i, int64_t n_new) {
    Seq& s = *running_[i];
    while (!kv_.reserve(s.table, s.n_computed + n_new)) {
        // Unreferenced cached pages go before any running sequence is preempted.
        if (evict_for(kv_.pages_for(s.n_computed + n_new) -
                      static_cast<int64_t>(s.table.pages.size()) - kv_.pool().free_pages()) > 0)
            continue;
        // Preempt the newest other unfinished sequence, or this one if it is the newest.
        const size_t victim = newest_unfinished();
        Seq& v = *running_[victim];
        if (!release_pages(v, true)) {  // a corrupted table is never recomputed into health
            finish(v, FinishReason::IntegrityError);
            if (victim == i) return false;
            continue;
        }
        v.n_computed = 0;
        release_draft(v);
        ++v.res.preemptions;
        ++stats_.preemptions;
        waiting_.push_front(
            std::move(running_[victim]));  // leaves a null slot, erased after the step
        if (victim == i) return false;
    }
    return !s.finished && s.table.capacity(kv_.page_size()) >= s.n_computed + n_new;
}

// The index in running_ of the newest sequence still running (running_.size() if none).
size_t Scheduler::newest_unfinished() const {
    for (size_t j = running_.size(); j-- > 0;)
        if (running_[j] && !running_[j]->finished && !running_[j]->cancelled) return j;
    return running_.size();
}

// Releases a sequence's pages. Returns false when the pool refused an entry: the table was
// corrupted, and the sequence must end with an integrity error (fail closed).
bool Scheduler::release_pages(Seq& s, bool offer) {
    for (const kv::PageRef& p : s.displaced) (void)kv_.pool().release(p);
    s.displaced.clear();
    // Full pages are offered to the prefix cache before the sequence lets go of them.
    if (offer) this->offer(s);
    const int64_t refused = kv_.free(s.table);
    stats_.refused_frees += refused;
    return refused == 0;
}

// Offers the sequence's full, computed pages to the prefix cache (idempotent). The cache
// verifies the table first: a stale one offers nothing.
void Scheduler::offer(Seq& s) {
    if (!prefix_ || s.table.pages.empty()) return;
    (void)prefix_->offer(s.scope, s.tokens, s.table);
}

// Frees up to `pages_short` unreferenced cached pages (LRU). Returns how many were freed.
int64_t Scheduler::evict_for(int64_t pages_short) {
    if (!prefix_ || pages_short <= 0) return 0;
    return prefix_->evict(pages_short);
}

}  // namespace warden::engine
