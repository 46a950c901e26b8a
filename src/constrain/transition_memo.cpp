#include "constrain/transition_memo.h"

namespace warden::constrain {

uint32_t TransitionMemo::intern(const MatchState& s) {
    std::string key = s.key();
    auto it = ids_.find(key);
    if (it != ids_.end()) return it->second;
    if (states_.size() >= max_states_) return kFull;
    const auto id = static_cast<uint32_t>(states_.size());
    states_.push_back(s);
    trans_.resize(trans_.size() + 256, kUnknown);
    ids_.emplace(std::move(key), id);
    return id;
}

uint32_t TransitionMemo::compute(uint32_t id, uint8_t b) {
    uint32_t t = kDead;
    if (prog_.advance_byte(states_[id], b, scratch_)) {
        t = intern(scratch_);
        if (t == kFull) return kFull;  // not recorded: the memo cannot name the state
    }
    trans_[static_cast<size_t>(id) * 256 + b] = t;
    return t;
}

void TransitionMemo::clear() {
    states_.clear();
    trans_.clear();
    ids_.clear();
}

}  // namespace warden::constrain
