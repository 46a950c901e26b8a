// Byte-level BPE (GPT-2 family): pre-tokenize with the model's regexes, map each byte to
// its bytes_to_unicode character, then apply merges lowest rank first (leftmost on ties).
#include <array>
#include <cstring>
#include <optional>

#include "tokenizer/bpe_merge.h"
#include "tokenizer/regex_split.h"
#include "tokenizer/unicode.h"
#include "tokenizer/vocab.h"
#include "util/error.h"

namespace warden::tokenizer::detail {
namespace {

class ByteLevelBpe final : public VocabTokenizer {
  public:
    ByteLevelBpe(Vocab vocab, const std::vector<std::pair<std::string, std::string>>& merges,
                 std::vector<std::string> patterns, bool ignore_merges, bool add_prefix_space,
                 std::string kind)
        : VocabTokenizer(std::move(vocab)),
          splitter_(std::move(patterns)),
          ignore_merges_(ignore_merges),
          add_prefix_space_(add_prefix_space),
          kind_(std::move(kind)) {
        util::check(!merges.empty(), "tokenizer: byte-level BPE vocabulary has no merges");
        merges_ = build_merges(vocab_, merges);
        const auto& table = byte_to_unicode();
        for (int b = 0; b < 256; ++b) byte_token_[b] = vocab_.find(table[b]);
    }

    std::string token_bytes(int32_t id) const override {
        check_id(id);
        const std::string& text = vocab_.tokens[id];
        const TokenType t = vocab_.types[id];
        if (t == TokenType::Control || t == TokenType::UserDefined || t == TokenType::Unknown)
            return text;
        std::string out;
        out.reserve(text.size());
        size_t i = 0;
        while (i < text.size()) {
            const Utf8Step st = utf8_next(text, i);
            const int b = st.status == Utf8Status::Valid ? unicode_to_byte(st.cp) : -1;
            if (b >= 0) {
                out += static_cast<char>(b);
            } else {
                out.append(text, i, st.len);  // not a byte character: keep the text as-is
            }
            i += st.len;
        }
        return out;
    }

    std::string kind() const override { return kind_; }

  protected:
    void encode_fragment(std::string_view text, bool after_special,
                         std::vector<int32_t>& out) const override {
        std::string prefixed;
        if (add_prefix_space_ && !text.empty() && text[0] != ' ') {
            // (built with memcpy: `" " + text` trips a GCC 12 -Wrestrict false positive at -O3)
            prefixed.assign(text.size() + 1, ' ');
            std::memcpy(prefixed.data() + 1, text.data(), text.size());
            text = prefixed;
        }
        std::string encoded;
        for (std::string_view piece : splitter_.split(text)) encode_piece(piece, encoded, out);
    }

  private:
    // Bytes without a token are dropped, as llama.cpp and HF tokenizers (BPE without
    // unk_token) do. No <unk> fallback: in byte-level vocabularies it is often the EOS token
    // (gpt-neox/mpt). Only rare bytes lack a token (falcon: some C0 controls and bytes that
    // never occur in valid UTF-8).
    void emit_bytes(std::string_view bytes, std::vector<int32_t>& out) const {
        for (char c : bytes) {
            const int32_t id = byte_token_[static_cast<uint8_t>(c)];
            if (id >= 0) out.push_back(id);
        }
    }

    void encode_piece(std::string_view piece, std::string& encoded,
                      std::vector<int32_t>& out) const {
        if (piece.empty()) return;
        const auto& table = byte_to_unicode();
        if (piece.size() == 1) {
            emit_bytes(piece, out);
            return;
        }
        if (ignore_merges_) {
            encoded.clear();
            for (char c : piece) encoded += table[static_cast<uint8_t>(c)];
            const int32_t id = vocab_.find(encoded);
            if (id >= 0) {
                out.push_back(id);
                return;
            }
        }
        std::vector<MergePart> syms =
            byte_parts(static_cast<int32_t>(piece.size()), [&](int32_t i) {
                return byte_token_[static_cast<uint8_t>(piece[static_cast<size_t>(i)])];
            });
        merge_lowest_rank(syms,
                          [&](const MergePart& l, const MergePart& r) -> std::optional<Merge> {
                              if (l.id < 0 || r.id < 0)
                                  return std::nullopt;  // a byte without a token never merges
                              const auto it = merges_.find(merge_key(l.id, r.id));
                              if (it == merges_.end()) return std::nullopt;
                              return Merge{it->second.rank, it->second.result};
                          });
        for (int32_t i = 0; i >= 0; i = syms[i].next) {
            if (syms[i].id >= 0) {
                out.push_back(syms[i].id);
            } else {
                emit_bytes(piece.substr(syms[i].start, syms[i].len), out);
            }
        }
    }

    RegexSplitter splitter_;
    bool ignore_merges_;
    bool add_prefix_space_;
    std::string kind_;
    MergeMap merges_;
    std::array<int32_t, 256> byte_token_{};
};

}  // namespace

std::unique_ptr<Tokenizer> make_byte_level_bpe(
    Vocab vocab, const std::vector<std::pair<std::string, std::string>>& merges,
    std::vector<std::string> patterns, bool ignore_merges, bool add_prefix_space,
    std::string kind) {
    return std::make_unique<ByteLevelBpe>(std::move(vocab), merges, std::move(patterns),
                                          ignore_merges, add_prefix_space, std::move(kind));
}

}  // namespace warden::tokenizer::detail
