#include "kv/fault_injector.h"

#include <charconv>
#include <map>
#include <numeric>
#include <sstream>

#include "util/assert.h"
#include "util/error.h"

namespace warden::kv {

const char* fault_kind_name(FaultKind k) {
    static const char* names[] = {"stale",       "early_free", "double_free", "free_in_flight",
                                  "cancel_race", "reorder",    "reuse"};
    return names[static_cast<int>(k)];
}

const char* shared_fault_kind_name(SharedFaultKind k) {
    static const char* names[] = {"evict_while_referenced", "reuse_after_evict", "stale_attach"};
    return names[static_cast<int>(k)];
}

FaultSpec FaultSpec::parse(const std::string& spec) {
    FaultSpec s;
    std::stringstream ss(spec);
    std::string item;
    while (std::getline(ss, item, ',')) {
        if (item.empty()) continue;
        const auto eq = item.find('=');
        util::check(eq != std::string::npos, "--fault-inject: '" + item + "' is not KIND=VALUE");
        const std::string key = item.substr(0, eq), val = item.substr(eq + 1);
        if (key == "seed" || key == "max") {
            int64_t v = 0;
            auto [p, ec] = std::from_chars(val.data(), val.data() + val.size(), v);
            util::check(ec == std::errc() && p == val.data() + val.size(),
                        "--fault-inject: bad " + key + " '" + val + "'");
            if (key == "seed")
                s.seed = static_cast<uint64_t>(v);
            else
                s.max_faults = v;
            continue;
        }
        double prob = 0;
        try {
            size_t used = 0;
            prob = std::stod(val, &used);
            util::check(used == val.size(), "");
        } catch (...) {
            throw util::Error("--fault-inject: bad probability '" + val + "' for " + key);
        }
        util::check(prob >= 0.0 && prob <= 1.0,
                    "--fault-inject: probability of " + key + " must be in [0, 1]");
        bool known = false;
        for (int k = 0; k < kFaultKinds; ++k) {
            if (key == "all" || key == fault_kind_name(static_cast<FaultKind>(k))) {
                s.probability[static_cast<size_t>(k)] = prob;
                known = true;
            }
        }
        for (int k = 0; k < kSharedFaultKinds; ++k) {
            if (key == "all" || key == shared_fault_kind_name(static_cast<SharedFaultKind>(k))) {
                s.shared_probability[static_cast<size_t>(k)] = prob;
                known = true;
            }
        }
        util::check(known, "--fault-inject: unknown fault kind '" + key + "'");
    }
    return s;
}

bool FaultSpec::any() const {
    for (double p : probability)
        if (p > 0) return true;
    for (double p : shared_probability)
        if (p > 0) return true;
    return false;
}

bool FaultInjector::roll(FaultKind kind) {
    if (spec_.max_faults >= 0 && total_injected() >= spec_.max_faults) return false;
    const double p = spec_.probability[static_cast<size_t>(kind)];
    if (p <= 0) return false;
    const double u = static_cast<double>(rng_() >> 11) * (1.0 / 9007199254740992.0);
    if (u >= p) return false;
    ++injected_[static_cast<size_t>(kind)];
    return true;
}

bool FaultInjector::roll(SharedFaultKind kind) {
    if (spec_.max_faults >= 0 && total_injected() >= spec_.max_faults) return false;
    const double p = spec_.shared_probability[static_cast<size_t>(kind)];
    if (p <= 0) return false;
    const double u = static_cast<double>(rng_() >> 11) * (1.0 / 9007199254740992.0);
    if (u >= p) return false;
    ++injected_shared_[static_cast<size_t>(kind)];
    return true;
}

int64_t FaultInjector::total_injected() const {
    return std::accumulate(injected_.begin(), injected_.end(), int64_t{0}) +
           std::accumulate(injected_shared_.begin(), injected_shared_.end(), int64_t{0});
}

SharedFaultEffect apply_shared_fault(SharedFaultKind kind, PagePool& pool, PageTable& holder,
                                     size_t entry) {
    util::check(entry < holder.pages.size() && pool.is_live(holder.pages[entry]),
                "fault injector: shared fault needs a live table entry");
    SharedFaultEffect fx;
    PageRef& e = holder.pages[entry];
    switch (kind) {
        case SharedFaultKind::EvictWhileReferenced:
        case SharedFaultKind::ReuseAfterEvict: {
            fx.broken = e;
            while (pool.refcount(e.page) > 0)
                WARDEN_ASSERT(pool.release(e) == PoolStatus::Ok,
                              "fault injector: forced eviction refused");
            if (kind == SharedFaultKind::ReuseAfterEvict) {
                fx.reused = pool.allocate();  // LIFO free list: the page just freed comes back
                WARDEN_ASSERT(fx.reused && fx.reused->page == e.page,
                              "fault injector: the evicted page was not reused");
            }
            break;
        }
        case SharedFaultKind::StaleAttach:
            WARDEN_ASSERT(pool.release(e) == PoolStatus::Ok,
                          "fault injector: stale attach release refused");
            e.gen -= 1;  // generation 0 (page never allocated before) is never live either
            fx.broken = e;
            break;
    }
    return fx;
}

}  // namespace warden::kv
