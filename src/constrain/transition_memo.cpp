#include "constrain/transition_memo.h"

namespace warden::constrain {

uint32_t TransitionMemo::intern(const MatchState& s) {
    std::string key = s.key();
    auto it = ids_.find(key);
    if (it != ids_.end()) return it->second;
    const size_t width = s.need ? 64 : 256;
    if (trans_.size() + width > max_entries_) return kFull;
    const auto id = static_cast<uint32_t>(states_.size());
    states_.push_back(s);
    row_.push_back(static_cast<uint32_t>(trans_.size() << 1) | (s.need ? 1u : 0u));
    trans_.resize(trans_.size() + width, kUnknown);
    ids_.emplace(std::move(key), id);
    return id;
}

uint32_t TransitionMemo::compute(uint32_t id, uint8_t b, size_t at) {
    uint32_t t = kDead;
    if (prog_.advance_byte(states_[id], b, scratch_)) {
        t = intern(scratch_);
        if (t == kFull) return kFull;  // not recorded: the memo cannot name the state
    }
    trans_[at] = t;  // interning did not move `at`: it only appends
    return t;
}

void TransitionMemo::clear() {
    states_.clear();
    row_.clear();
    trans_.clear();
    ids_.clear();
}

}  // namespace warden::constrain
