// The fault injector's hooks in the scheduler (--fault-inject, tests): before a step is built,
// page-table faults on running sequences (stale mappings, early and double frees, frees while a
// step runs, a cancellation racing a step, pages reused by another owner); after it is built,
// the racing step's stale members and a shuffled batch order. Every fault must be caught by the
// integrity checks (executor.h) and end only its own sequence.
#include <algorithm>

#include "engine/scheduler.h"
#include "engine/scheduler_seq.h"
#include "util/error.h"

namespace warden::engine {

void Scheduler::inject_table_faults(std::vector<size_t>& stale_members) {
    using kv::FaultKind;
    // Victims are sequences that will certainly take part in a later step (so detection is
    // certain): running, with pages, and at least two tokens still to generate.
    auto pick_victim = [&]() -> Seq* {
        std::vector<size_t> c;
        for (size_t i = 0; i < running_.size(); ++i) {
            const Seq& s = *running_[i];
            if (!s.finished && !s.cancelled && !s.table.pages.empty() &&
                s.generated() + 2 <= s.req.max_new_tokens)
                c.push_back(i);
        }
        if (c.empty()) return nullptr;
        return running_[c[faults_->random(c.size())]].get();
    };
    kv::PagePool& pool = kv_.pool();
    for (int k = 0; k < kv::kFaultKinds; ++k) {
        const auto kind = static_cast<FaultKind>(k);
        if (kind == FaultKind::Reorder) continue;  // applied to the built batch
        // Each fault needs a victim with a live entry to break (an entry an earlier fault of
        // this step already broke does not count twice).
        Seq* v = pick_victim();
        if (!v) continue;
        std::vector<size_t> live;
        for (size_t j = 0; j < v->table.pages.size(); ++j)
            if (pool.is_live(v->table.pages[j])) live.push_back(j);
        if (live.empty() || !faults_->roll(kind)) continue;
        v->res.fault_target = true;
        kv::PageRef& e = v->table.pages[live[faults_->random(live.size())]];
        switch (kind) {
            case FaultKind::Stale: {  // the entry now names an earlier allocation of some page
                if (pool.is_live(e)) v->displaced.push_back(e);
                const kv::PageId q{static_cast<int32_t>(
                    1 + faults_->random(static_cast<uint64_t>(pool.capacity())))};
                e = kv::PageRef{q, pool.generation(q) - 1};
                break;
            }
            case FaultKind::EarlyFree:
                util::check(pool.release(e) == kv::PoolStatus::Ok,
                            "fault injector: early free refused");
                if (pool.refcount(e.page) > 0) {  // shared page: force it out of every holder
                    while (pool.refcount(e.page) > 0) (void)pool.release(e);
                }
                break;
            case FaultKind::DoubleFree:
                while (pool.release(e) == kv::PoolStatus::Ok) {
                }
                faults_->note_refused();  // the second release was refused
                break;
            case FaultKind::FreeInFlight:
                deferred_frees_.push_back(e);
                break;
            case FaultKind::CancelRace:
                // The cancellation is processed (pages freed, request finished) while a step built
                // from a stale snapshot still lists the sequence.
                v->cancelled = true;
                {
                    kv::PageTable stale = v->table;  // what the racing step still holds
                    for (const kv::PageRef& p : v->displaced) (void)pool.release(p);
                    v->displaced.clear();
                    (void)kv_.free(v->table);
                    v->table = stale;
                }
                v->res.finish = FinishReason::Cancelled;
                emit_finish(*v);
                for (size_t i = 0; i < running_.size(); ++i)
                    if (running_[i].get() == v) stale_members.push_back(i);
                break;
            case FaultKind::Reuse: {  // freed early and immediately handed to another owner
                const kv::PageId page = e.page;
                while (pool.refcount(page) > 0 &&
                       pool.release(kv::PageRef{page, pool.generation(page)}) ==
                           kv::PoolStatus::Ok) {
                }
                auto fresh = pool.allocate();  // LIFO free list: the page just freed comes back
                if (fresh) (void)pool.release(*fresh);
                break;
            }
            case FaultKind::Reorder:
                break;
        }
    }
}

void Scheduler::inject_batch_faults(StepPlan& plan, const std::vector<size_t>& stale_members) {
    StepBatch& batch = plan.batch;
    for (size_t i : stale_members) {  // the cancellation race: a stale snapshot still lists it
        Seq& s = *running_[i];
        StepSeq ss;
        ss.id = s.id;
        ss.tokens = std::span<const int32_t>(s.tokens.data() + s.tokens.size() - 1, 1);
        ss.pos0 = s.table.capacity(kv_.page_size()) - 1;  // inside its (stale) pages
        ss.table = &s.table;
        batch.seqs.push_back(ss);
        plan.member.push_back(i);
    }
    if (batch.seqs.size() > 1 && faults_->roll(kv::FaultKind::Reorder)) {
        for (size_t k = batch.seqs.size() - 1; k > 0; --k) {
            const size_t j = faults_->random(k + 1);
            std::swap(batch.seqs[k], batch.seqs[j]);
            std::swap(plan.member[k], plan.member[j]);
        }
    }
}

// Frees a FreeInFlight fault requested while the step ran take effect only now, on this thread.
void Scheduler::release_deferred_frees() {
    for (const kv::PageRef& p : deferred_frees_)
        if (kv_.pool().release(p) != kv::PoolStatus::Ok && faults_) faults_->note_refused();
    deferred_frees_.clear();
}

}  // namespace warden::engine
