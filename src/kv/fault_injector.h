#pragma once
// Deliberate violations of the KV ownership rules, injected between (or, for in-flight frees,
// during) scheduler steps, so the integrity contract is tested under load. Each injected fault
// names the sequence it hits; the test then demands that exactly those sequences end with an
// integrity error and every other sequence produces exactly its fault-free output.
//
// Spec (the --fault-inject flag): comma-separated kind=probability per step, plus seed=N and
// max=N (stop after N faults), e.g. "stale=0.05,early_free=0.02,double_free=0.01,seed=7".
// Kinds: stale (stale mapping), early_free, double_free, free_in_flight, cancel_race,
// reorder (batch reordering), reuse (page reused by another sequence), all=P (every kind).
// Shared-page kinds (prefix cache): evict_while_referenced, reuse_after_evict, stale_attach.
// They live in their own enum so code that loops over FaultKind is unchanged.
#include <array>
#include <cstdint>
#include <optional>
#include <random>
#include <string>

#include "kv/page_pool.h"
#include "kv/page_table.h"

namespace warden::kv {

enum class FaultKind { Stale, EarlyFree, DoubleFree, FreeInFlight, CancelRace, Reorder, Reuse };
constexpr int kFaultKinds = 7;
const char* fault_kind_name(FaultKind k);

// Failure modes of pages shared through the prefix cache (see apply_shared_fault).
enum class SharedFaultKind { EvictWhileReferenced, ReuseAfterEvict, StaleAttach };
constexpr int kSharedFaultKinds = 3;
const char* shared_fault_kind_name(SharedFaultKind k);

struct FaultSpec {
    std::array<double, kFaultKinds> probability{};               // per step
    std::array<double, kSharedFaultKinds> shared_probability{};  // per step
    uint64_t seed = 1;
    int64_t max_faults = -1;  // < 0: unlimited

    static FaultSpec parse(const std::string& spec);  // throws util::Error on bad syntax
    bool any() const;
};

class FaultInjector {
  public:
    explicit FaultInjector(const FaultSpec& spec) : spec_(spec), rng_(spec.seed) {}

    // Decides whether to inject `kind` this step (and counts it if so).
    bool roll(FaultKind kind);
    bool roll(SharedFaultKind kind);
    uint64_t random(uint64_t n) { return n == 0 ? 0 : rng_() % n; }

    const std::array<int64_t, kFaultKinds>& injected() const { return injected_; }
    const std::array<int64_t, kSharedFaultKinds>& injected_shared() const {
        return injected_shared_;
    }
    int64_t total_injected() const;
    // A refused double free / foreign free counts as detected at the pool.
    void note_refused() { ++refused_; }
    int64_t refused() const { return refused_; }

  private:
    FaultSpec spec_;
    std::mt19937_64 rng_;
    std::array<int64_t, kFaultKinds> injected_{};
    std::array<int64_t, kSharedFaultKinds> injected_shared_{};
    int64_t refused_ = 0;
};

// Breaks the ownership of a page shared through the prefix cache, the way a buggy cache or
// scheduler would. `holder` is a sequence's table; `entry` indexes one of its live entries
// that is (or was) attached from the cache. Returns what changed, for the test's bookkeeping.
//  - EvictWhileReferenced: the page is evicted although sequences still hold it: every hold
//    (the cache's and every sequence's) is dropped, the page goes back to the free list and
//    its generation is bumped. Every table naming it is now stale.
//  - ReuseAfterEvict: the same, then the page is allocated to a new owner at once (returned
//    in `reused`; the caller releases it when that owner is done).
//  - StaleAttach: the attach recorded an earlier generation of the page: the holder's own
//    reference is released and its entry now names (page, generation - 1); the page stays
//    live for everyone else (the cache and other holders are unaffected).
struct SharedFaultEffect {
    PageRef broken;                 // the reference that is stale now
    std::optional<PageRef> reused;  // ReuseAfterEvict: the page's new allocation
};
SharedFaultEffect apply_shared_fault(SharedFaultKind kind, PagePool& pool, PageTable& holder,
                                     size_t entry);

}  // namespace warden::kv
