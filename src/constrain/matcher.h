#pragma once
// The recognizer of a Grammar over UTF-8 bytes: a pushdown automaton that keeps the set of live
// parse stacks (as llama.cpp's grammar sampler does). A stack holds grammar positions, top last;
// every stack's top is a character set waiting for the next code point. Reading a code point
// advances every stack whose top set matches it, and expands rule references (pushing the
// continuation, except where the reference ends its alternative: tail calls do not grow the
// stack, so right-recursive repetition runs in constant stack depth). Bytes of a multi-byte
// code point are held until it completes; a prefix is refused as soon as no stack's set can
// contain a code point starting with it.
//
// States are values (MatchState) so the token-mask walk can branch from a state per trie node.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "constrain/grammar.h"

namespace warden::constrain {

// One recognizer state. Stacks are stored sorted and deduplicated (flat: length, positions...)
// so that equal states compare equal and serve as cache keys.
struct MatchState {
    std::vector<uint32_t> stacks;
    uint32_t partial = 0;    // code point bits read so far of an incomplete UTF-8 sequence
    uint8_t need = 0;        // continuation bytes still expected (0: at a code point boundary)
    uint8_t len = 0;         // length of the sequence being read (for the overlong check)
    bool accepting = false;  // the text read so far is a complete sentence of the grammar
    bool can_accept() const { return accepting && need == 0; }
    bool can_continue() const { return !stacks.empty(); }
    bool alive() const { return can_accept() || can_continue(); }
    // The state's identity as bytes (cache key).
    std::string key() const;
};

class Program {
  public:
    // The grammar must have passed Grammar::validate().
    explicit Program(const Grammar& g);

    MatchState initial() const;
    // Reads one byte. False when the text would leave the grammar (`out` is then unspecified).
    bool advance_byte(const MatchState& in, uint8_t b, MatchState& out) const;
    // Reads a whole string; false as soon as a byte is refused.
    bool advance(MatchState& s, std::string_view bytes) const;

    size_t n_positions() const { return ops_.size(); }

  private:
    struct Op {
        enum Kind : uint8_t { Chars, Ref, End };
        Kind kind;
        uint32_t arg;  // Chars: set index; Ref: rule
    };
    struct Set {
        std::vector<CharRange> ranges;  // positive, sorted, merged
        uint64_t ascii[2] = {0, 0};
        bool matches(uint32_t cp) const;
        bool intersects(uint32_t lo, uint32_t hi) const;
    };
    // Scratch of one advance: the stacks produced, before deduplication.
    struct Builder {
        std::vector<std::vector<uint32_t>> stacks;
        size_t n = 0;
        bool accepting = false;
        bool overflow = false;
        void add(const std::vector<uint32_t>& st);
    };
    void expand(std::vector<uint32_t>& st, Builder& out, int depth) const;
    void finish(Builder& b, MatchState& out) const;
    bool advance_cp(const MatchState& in, uint32_t cp, MatchState& out) const;
    bool viable_prefix(const MatchState& s) const;

    std::vector<Op> ops_;
    std::vector<std::vector<uint32_t>> rule_starts_;
    std::vector<Set> sets_;
    uint32_t root_ = 0;
};

}  // namespace warden::constrain
