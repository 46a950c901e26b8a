#pragma once
// Process-wide counters of the token-mask cache (every CompiledGrammar adds to them), for the
// server's /metrics: how often a constrained step needed a mask, how often that mask was
// cached, and the time spent computing the ones that were not.
#include <cstdint>

namespace warden::constrain {

struct MaskCounters {
    uint64_t hits = 0;
    uint64_t misses = 0;
    double miss_seconds = 0;  // computing the masks of the misses
};

MaskCounters mask_counters();
// Called by CompiledGrammar::mask.
void count_mask_hit();
void count_mask_miss(double seconds);

}  // namespace warden::constrain
