#pragma once
// A memo of the recognizer's byte transitions, so that the token-mask walk (token_mask.h) does
// the matcher's work once per distinct (state, byte) instead of once per trie node.
//
// The walk visits every node of the vocabulary trie that the state does not refuse (about
// 150,000 for a 49k vocabulary inside a JSON string), but those nodes lead to few distinct
// recognizer states: inside a string every ordinary character leads back to the same state,
// inside a string with maxLength to the state one position further. States are interned by
// their full identity (MatchState::key) and each has a row of next-state ids, one per byte,
// filled as the walk needs them, so a transition seen before, in this walk or an earlier one of the
// same grammar, costs one array read. The memo is exact: it stores what Program::advance_byte
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
    static constexpr uint32_t kFull = UINT32_MAX - 1;     // no room for a new state
    static constexpr uint32_t kUnknown = UINT32_MAX - 2;  // not computed yet (internal)
    // Room, in row entries (4 bytes each): a state at a code point boundary takes 256, one
    // inside a multi-byte code point 64 (only continuation bytes can follow). Most states of a
    // JSON grammar on a byte-level BPE vocabulary are of the second kind (for each state at a
    // boundary, one per distinct prefix of a multi-byte character in the vocabulary).
    static constexpr size_t kDefaultMaxEntries = size_t{1} << 20;

    explicit TransitionMemo(const Program& p, size_t max_entries = kDefaultMaxEntries)
        : prog_(p), max_entries_(max_entries) {}

    // The id of `s`, interning it if new; kFull when it is new and there is no room.
    uint32_t intern(const MatchState& s);
    // The state after reading `b` in state `id`: its id, kDead, or kFull.
    uint32_t next(uint32_t id, uint8_t b) {
        const uint32_t r = row_[id];
        size_t at;
        if (r & 1) {  // inside a code point
            if ((b & 0xC0) != 0x80) return kDead;
            at = (r >> 1) + (b & 0x3F);
        } else {
            at = (r >> 1) + b;
        }
        const uint32_t t = trans_[at];
        return t != kUnknown ? t : compute(id, b, at);
    }
    const MatchState& state(uint32_t id) const { return states_[id]; }
    size_t size() const { return states_.size(); }
    void clear();

  private:
    uint32_t compute(uint32_t id, uint8_t b, size_t at);

    const Program& prog_;
    size_t max_entries_;
    std::vector<MatchState> states_;
    std::vector<uint32_t> row_;    // per state: offset of its row in trans_ * 2 | inside a cp
    std::vector<uint32_t> trans_;  // the rows
    std::unordered_map<std::string, uint32_t> ids_;
    MatchState scratch_;
};

}  // namespace warden::constrain
