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
#include <array>
#include <cstdint>
#include <random>
#include <string>

namespace warden::kv {

enum class FaultKind { Stale, EarlyFree, DoubleFree, FreeInFlight, CancelRace, Reorder, Reuse };
constexpr int kFaultKinds = 7;
const char* fault_kind_name(FaultKind k);

struct FaultSpec {
    std::array<double, kFaultKinds> probability{};  // per step
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
    uint64_t random(uint64_t n) { return n == 0 ? 0 : rng_() % n; }

    const std::array<int64_t, kFaultKinds>& injected() const { return injected_; }
    int64_t total_injected() const;
    // A refused double free / foreign free counts as detected at the pool.
    void note_refused() { ++refused_; }
    int64_t refused() const { return refused_; }

private:
    FaultSpec spec_;
    std::mt19937_64 rng_;
    std::array<int64_t, kFaultKinds> injected_{};
    int64_t refused_ = 0;
};

}  // namespace warden::kv
