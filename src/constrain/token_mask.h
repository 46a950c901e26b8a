#pragma once
// Token masks: which vocabulary tokens may come next in a grammar state.
//
// Vocabulary (one per tokenizer): the raw bytes of every token, sorted, with the common-prefix
// length of each with its predecessor, which makes the sorted list a token trie walked in
// order: a grammar state is advanced once per trie node, and a refused prefix skips every token
// under it. Control tokens are never allowed by a grammar (stop tokens are handled by
// Constraint).
//
// CompiledGrammar (one per grammar and vocabulary; shared by every sequence using it, and
// thread-safe): the matcher Program plus a cache of masks by state, so a state seen before
// (the inside of a JSON string, the start of each array item, ...) costs one lookup, and a
// memo of the matcher's transitions (transition_memo.h) that the walk for a state not seen
// before runs on, so it costs array reads rather than matcher steps.
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "constrain/matcher.h"
#include "constrain/transition_memo.h"

namespace warden::tokenizer {
class Tokenizer;
}

namespace warden::constrain {

class Vocabulary {
  public:
    explicit Vocabulary(const tokenizer::Tokenizer& tok);
    // For tests: token i has bytes tokens[i]; `stop` are its stop tokens (never in a mask).
    Vocabulary(std::vector<std::string> tokens, std::vector<int32_t> stop);

    int32_t size() const { return static_cast<int32_t>(bytes_.size()); }
    const std::string& bytes(int32_t id) const { return bytes_[static_cast<size_t>(id)]; }
    const std::vector<int32_t>& stop_ids() const { return stop_; }
    // Tokens whose text differs when they start the output (SentencePiece drops the space
    // prefix there; see Tokenizer::token_piece): (id, bytes at the start).
    const std::vector<std::pair<int32_t, std::string>>& start_pieces() const {
        return start_pieces_;
    }

    // Sorted ids of the tokens a grammar never allows (control tokens, empty ones).
    const std::vector<int32_t>& unusable() const { return unusable_; }
    // Sorted grammar-usable tokens and lcp[i] = common prefix of sorted[i-1] and sorted[i].
    const std::vector<int32_t>& sorted() const { return sorted_; }
    const std::vector<uint16_t>& lcp() const { return lcp_; }
    // The bytes of sorted[i] after its common prefix with sorted[i-1] (the trie walk reads
    // nothing else), all in one buffer in sorted order, so the walk reads memory in sequence:
    // suffixes()[suffix_start()[i] .. suffix_start()[i+1]).
    const std::string& suffixes() const { return suffixes_; }
    const std::vector<uint32_t>& suffix_start() const { return suffix_start_; }
    size_t max_len() const { return max_len_; }

  private:
    void index(const std::vector<char>& usable);
    std::vector<std::string> bytes_;
    std::vector<int32_t> stop_;
    std::vector<std::pair<int32_t, std::string>> start_pieces_;
    std::vector<int32_t> sorted_;
    std::vector<int32_t> unusable_;
    std::vector<uint16_t> lcp_;
    std::string suffixes_;
    std::vector<uint32_t> suffix_start_;
    size_t max_len_ = 0;
};

// One bit per token id: set = allowed.
using TokenMask = std::vector<uint64_t>;
inline bool mask_has(const TokenMask& m, int32_t id) {
    return (m[static_cast<size_t>(id) >> 6] >> (id & 63)) & 1;
}

class CompiledGrammar {
  public:
    // g must be valid (Grammar::validate; the compilers and parse_gbnf do that).
    CompiledGrammar(const Grammar& g, std::shared_ptr<const Vocabulary> vocab,
                    size_t memo_entries = TransitionMemo::kDefaultMaxEntries);

    const Program& program() const { return program_; }
    const Vocabulary& vocab() const { return *vocab_; }
    // The tokens (stop tokens excluded) whose bytes keep `s` alive. Cached by state.
    std::shared_ptr<const TokenMask> mask(const MatchState& s) const;
    // The same computed by the trie walk on the transition memo (what a cache miss costs).
    TokenMask compute_mask(const MatchState& s) const;
    // The same computed by the trie walk running the matcher at every node, with neither cache
    // nor memo: the reference the others are tested against, and the fallback of a walk that
    // meets more distinct states than the memo holds.
    TokenMask reference_mask(const MatchState& s) const;

    struct Stats {
        uint64_t hits = 0, misses = 0;
    };
    Stats stats() const;

  private:
    // The walk on the memo; false (m unspecified) when the memo filled up on the way.
    bool memo_walk(const MatchState& s, TokenMask& m) const;

    Program program_;
    std::shared_ptr<const Vocabulary> vocab_;
    mutable std::mutex memo_mu_;
    mutable TransitionMemo memo_;
    mutable std::mutex mu_;
    mutable std::unordered_map<std::string, std::shared_ptr<const TokenMask>> cache_;
    mutable Stats stats_;
};

}  // namespace warden::constrain
