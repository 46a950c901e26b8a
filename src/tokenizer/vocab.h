#pragma once
// Shared vocabulary data and the base class of the concrete tokenizers (byte-level BPE and
// SentencePiece BPE). Internal to the tokenizer folder; users see tokenizer.h only.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace warden::tokenizer::detail {

// GGUF tokenizer.ggml.token_type values (llama.cpp's llama_token_type).
enum class TokenType : int32_t {
    Undefined = 0,
    Normal = 1,
    Unknown = 2,
    Control = 3,
    UserDefined = 4,
    Unused = 5,
    Byte = 6,
};

struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

struct Vocab {
    std::vector<std::string> tokens;  // [n_vocab] token text (byte-level or "▁" form)
    std::vector<TokenType> types;     // [n_vocab]
    std::vector<float> scores;        // [n_vocab] SentencePiece scores (empty for BPE)
    std::vector<uint8_t> lstrip;      // [n_vocab] added token eats whitespace on its left
    std::vector<uint8_t> rstrip;      // [n_vocab] ... on its right
    TokenMap token_to_id;
    int32_t bos = -1, eos = -1, eot = -1, eom = -1, unk = -1;
    bool add_bos = false, add_eos = false;

    int32_t size() const { return static_cast<int32_t>(tokens.size()); }
    int32_t find(std::string_view text) const {
        auto it = token_to_id.find(text);
        return it == token_to_id.end() ? -1 : it->second;
    }
    // Fills token_to_id (a later duplicate keeps the first id) and checks sizes/ids.
    // `source` names the file for error messages.
    void finalize(const std::string& source);
};

// A merge table keyed by the ids of the two parts: (left << 32 | right) -> (rank, result id).
struct MergeInfo {
    int32_t rank;
    int32_t result;
};
using MergeMap = std::unordered_map<uint64_t, MergeInfo>;
inline uint64_t merge_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}
// Builds the table from "a b" pairs in rank order. Pairs whose parts or concatenation are
// not tokens are skipped (they can never fire). Throws on a malformed entry.
MergeMap build_merges(const Vocab& vocab,
                      const std::vector<std::pair<std::string, std::string>>& merges);
// Splits a GGUF / tokenizer.json merge string "a b" (first space after the first byte).
std::pair<std::string, std::string> split_merge(const std::string& m, size_t index,
                                                const std::string& source);

struct Fragment {
    std::string_view text;  // raw text when id < 0
    int32_t id = -1;        // matched special/added token
};

class VocabTokenizer : public Tokenizer {
  public:
    explicit VocabTokenizer(Vocab vocab);

    std::vector<int32_t> encode(std::string_view text, bool add_bos,
                                bool parse_special = true) const override;
    int32_t vocab_size() const override { return vocab_.size(); }
    int32_t bos_id() const override { return vocab_.bos; }
    int32_t eos_id() const override { return vocab_.eos; }
    bool add_bos_default() const override { return vocab_.add_bos; }
    std::vector<int32_t> stop_ids() const override;
    bool is_special(int32_t id) const override;
    bool is_special_or_added(int32_t id) const override;
    std::vector<std::pair<std::string, int32_t>> special_tokens() const override;

    const Vocab& vocab() const { return vocab_; }
    // Splits out special/added tokens: leftmost match, longest token first at a position.
    // Control/unknown tokens only when parse_special; user-defined (added, non-special)
    // tokens always, like llama.cpp and HF tokenizers.
    std::vector<Fragment> split_special(std::string_view text, bool parse_special) const;

  protected:
    void check_id(int32_t id) const;
    // Appends the ids of one raw-text fragment. `after_special` is true at the start of the
    // text and right after a special/added token.
    virtual void encode_fragment(std::string_view text, bool after_special,
                                 std::vector<int32_t>& out) const = 0;

    Vocab vocab_;

  private:
    // Candidate special tokens grouped by first byte, longest first.
    std::vector<std::vector<int32_t>> special_by_byte_;
};

std::unique_ptr<Tokenizer> make_byte_level_bpe(
    Vocab vocab, const std::vector<std::pair<std::string, std::string>>& merges,
    std::vector<std::string> patterns, bool ignore_merges, bool add_prefix_space, std::string kind);
// scores-based (GGUF "llama") when `merges` is empty, rank-based (HF BPE + byte_fallback)
// otherwise.
std::unique_ptr<Tokenizer> make_spm(Vocab vocab,
                                    const std::vector<std::pair<std::string, std::string>>& merges,
                                    bool add_space_prefix, std::string kind);

// llama.cpp's list of end-of-generation token texts.
bool is_eog_text(std::string_view text);

}  // namespace warden::tokenizer::detail
