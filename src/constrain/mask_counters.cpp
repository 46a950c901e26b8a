#include "constrain/mask_counters.h"

#include <atomic>

namespace warden::constrain {

namespace {

std::atomic<uint64_t> g_hits{0};
std::atomic<uint64_t> g_misses{0};
std::atomic<uint64_t> g_miss_ns{0};

}  // namespace

MaskCounters mask_counters() {
    MaskCounters c;
    c.hits = g_hits.load(std::memory_order_relaxed);
    c.misses = g_misses.load(std::memory_order_relaxed);
    c.miss_seconds = static_cast<double>(g_miss_ns.load(std::memory_order_relaxed)) * 1e-9;
    return c;
}

void count_mask_hit() {
    g_hits.fetch_add(1, std::memory_order_relaxed);
}

void count_mask_miss(double seconds) {
    g_misses.fetch_add(1, std::memory_order_relaxed);
    g_miss_ns.fetch_add(static_cast<uint64_t>(seconds * 1e9), std::memory_order_relaxed);
}

}  // namespace warden::constrain
