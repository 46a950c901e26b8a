#pragma once
// A memo of the recognizer's byte transitions, so that the token-mask walk (token_mask.h) does
// the matcher's work once per distinct (state, byte) instead of once per trie node.
//
// The walk visits every node of the vocabulary trie that the state does not refuse (about
// 150,000 for a 49k vocabulary inside a JSON string), but those nodes lead to few distinct
// recognizer states: inside a string every ordinary character leads back to the same state,
// inside a string with maxLength to the state one position further. States are interned by
// their full identity (MatchState::key) and each has a row of 256 next-state ids filled as the
// walk needs them, so a transition seen before, in this walk or an earlier one of the same
// grammar, costs one array read. The memo is exact: it stores what Program::advance_byte
// returned for that very state and byte.
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "constrain/matcher.h"

namespace warden::constrain {

class TransitionMemo {
  public:
    static constexpr uint32_t kDead = UINT32_MAX;         // the byte is refused
    static constexpr uint32_t kFull = UINT32_MAX - 1;     // the memo holds max_states already
    static constexpr uint32_t kUnknown = UINT32_MAX - 2;  // not computed yet (internal)
    static constexpr size_t kDefaultMaxStates = 4096;     // about 1 KiB each

    explicit TransitionMemo(const Program& p, size_t max_states = kDefaultMaxStates)
        : prog_(p), max_states_(max_states) {}

    // The id of `s`, interning it if new; kFull when it is new and the memo is full.
    uint32_t intern(const MatchState& s);
    // The state after reading `b` in state `id`: its id, kDead, or kFull.
    uint32_t next(uint32_t id, uint8_t b) {
        const uint32_t t = trans_[static_cast<size_t>(id) * 256 + b];
        return t != kUnknown ? t : compute(id, b);
    }
    const MatchState& state(uint32_t id) const { return states_[id]; }
    size_t size() const { return states_.size(); }
    void clear();

  private:
    uint32_t compute(uint32_t id, uint8_t b);

    const Program& prog_;
    size_t max_states_;
    std::vector<MatchState> states_;
    std::vector<uint32_t> trans_;  // states_.size() rows of 256
    std::unordered_map<std::string, uint32_t> ids_;
    MatchState scratch_;
};

}  // namespace warden::constrain
