#include "kv/page_table.h"

#include "util/error.h"

namespace warden::kv {

const char* integrity_mode_name(IntegrityMode m) {
    switch (m) {
        case IntegrityMode::Off:
            return "off";
        case IntegrityMode::Step:
            return "step";
        case IntegrityMode::Layer:
            return "layer";
    }
    return "?";
}

IntegrityMode parse_integrity_mode(const std::string& s) {
    if (s == "off") return IntegrityMode::Off;
    if (s == "step") return IntegrityMode::Step;
    if (s == "layer") return IntegrityMode::Layer;
    throw util::Error("--kv-integrity must be step, layer or off (got '" + s + "')");
}

std::string IntegrityViolation::describe() const {
    return "kv integrity violation: seq " + std::to_string(seq.v) + " entry " +
           std::to_string(entry) + " page " + std::to_string(page.v) + " expected generation " +
           std::to_string(expected) + " found " + std::to_string(found) + " (" +
           pool_status_name(status) + ")";
}

std::optional<IntegrityViolation> verify_table(const PagePool& pool, SeqId seq,
                                               std::span<const PageRef> table) {
    for (size_t i = 0; i < table.size(); ++i) {
        const PageRef r = table[i];
        if (pool.is_live(r)) [[likely]]
            continue;
        IntegrityViolation v;
        v.seq = seq;
        v.entry = static_cast<int64_t>(i);
        v.page = r.page;
        v.expected = r.gen;
        const bool in_range = r.page.v > 0 && r.page.v <= pool.capacity();
        v.found = in_range ? pool.generation(r.page) : 0;
        v.status = !in_range          ? PoolStatus::BadPageId
                   : v.found != r.gen ? PoolStatus::StaleGeneration
                                      : PoolStatus::NotAllocated;
        return v;
    }
    return std::nullopt;
}

}  // namespace warden::kv
