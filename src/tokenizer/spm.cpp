// SentencePiece-style BPE (llama 2 / phi-3 vocabularies): spaces become "▁", a "▁" is
// prepended to text that starts a run (add_space_prefix), characters are merged greedily by
// the score of the resulting token (GGUF "llama") or by merge rank (HF BPE with
// byte_fallback), and characters that end up outside the vocabulary fall back to <0xNN>.
#include <array>
#include <cstdio>
#include <queue>

#include "tokenizer/unicode.h"
#include "tokenizer/vocab.h"
#include "util/error.h"

namespace warden::tokenizer::detail {
namespace {

int parse_byte_token(const std::string& t) {
    // "<0xNN>"
    if (t.size() != 6 || t[0] != '<' || t[1] != '0' || t[2] != 'x' || t[5] != '>') return -1;
    auto hex = [](char c) -> int {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'A' && c <= 'F') return c - 'A' + 10;
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        return -1;
    };
    const int hi = hex(t[3]), lo = hex(t[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

class SpmBpe final : public VocabTokenizer {
  public:
    SpmBpe(Vocab vocab, const std::vector<std::pair<std::string, std::string>>& merges,
           bool add_space_prefix, std::string kind)
        : VocabTokenizer(std::move(vocab)),
          add_space_prefix_(add_space_prefix),
          kind_(std::move(kind)) {
        byte_token_.fill(-1);
        token_byte_.assign(vocab_.tokens.size(), -1);
        for (int32_t id = 0; id < vocab_.size(); ++id) {
            const int b = parse_byte_token(vocab_.tokens[id]);
            if (b < 0) continue;
            if (vocab_.types[id] == TokenType::Normal || vocab_.types[id] == TokenType::Undefined)
                vocab_.types[id] = TokenType::Byte;  // HF vocabularies do not carry types
            if (vocab_.types[id] != TokenType::Byte) continue;
            token_byte_[id] = static_cast<int16_t>(b);
            if (byte_token_[b] < 0) byte_token_[b] = id;
        }
        if (!merges.empty()) {
            merges_ = build_merges(vocab_, merges);
            use_ranks_ = true;
        } else {
            util::check(
                vocab_.scores.size() == vocab_.tokens.size(),
                "tokenizer: SentencePiece vocabulary has no scores (tokenizer.ggml.scores)");
        }
    }

    std::string token_bytes(int32_t id) const override {
        check_id(id);
        const TokenType t = vocab_.types[id];
        const std::string& text = vocab_.tokens[id];
        if (t == TokenType::Byte && token_byte_[id] >= 0)
            return std::string(1, static_cast<char>(token_byte_[id]));
        if (t == TokenType::Control || t == TokenType::UserDefined || t == TokenType::Unknown)
            return text;
        std::string out;
        out.reserve(text.size());
        for (size_t i = 0; i < text.size();) {
            if (text.compare(i, kSpmSpace.size(), kSpmSpace) == 0) {
                out += ' ';
                i += kSpmSpace.size();
            } else {
                out += text[i++];
            }
        }
        return out;
    }

    std::string token_piece(int32_t id, bool at_text_start) const override {
        std::string s = token_bytes(id);
        const TokenType t = vocab_.types[id];
        const bool plain =
            t != TokenType::Control && t != TokenType::UserDefined && t != TokenType::Unknown;
        if (add_space_prefix_ && at_text_start && plain && !s.empty() && s[0] == ' ') s.erase(0, 1);
        return s;
    }

    std::string kind() const override { return kind_; }

  protected:
    void encode_fragment(std::string_view raw, bool after_special,
                         std::vector<int32_t>& out) const override {
        std::string text;
        text.reserve(raw.size() + 8);
        if (add_space_prefix_ && after_special) text += kSpmSpace;
        for (char c : raw) {
            if (c == ' ') {
                text += kSpmSpace;
            } else {
                text += c;
            }
        }
        if (text.empty()) return;

        // One symbol per UTF-8 character (ill-formed bytes are one symbol each).
        std::vector<Symbol> syms;
        for (size_t i = 0; i < text.size();) {
            const Utf8Step st = utf8_next(text, i);
            const size_t len = st.status == Utf8Status::Valid ? st.len : 1;
            const auto idx = static_cast<int32_t>(syms.size());
            syms.push_back({vocab_.find(std::string_view(text).substr(i, len)), idx - 1, -1,
                            static_cast<uint32_t>(i), static_cast<uint32_t>(len)});
            if (idx > 0) syms[idx - 1].next = idx;
            i += len;
        }

        std::priority_queue<Bigram> queue;
        auto consider = [&](int32_t l) {
            if (l < 0) return;
            const int32_t r = syms[l].next;
            if (r < 0) return;
            const uint32_t size = syms[l].len + syms[r].len;
            if (use_ranks_) {
                if (syms[l].id < 0 || syms[r].id < 0) return;
                auto it = merges_.find(merge_key(syms[l].id, syms[r].id));
                if (it == merges_.end()) return;
                queue.push({-static_cast<double>(it->second.rank), l, r, size, it->second.result});
            } else {
                const int32_t id = vocab_.find(std::string_view(text).substr(syms[l].start, size));
                if (id < 0) return;
                queue.push({vocab_.scores[id], l, r, size, id});
            }
        };
        for (int32_t i = 0; i + 1 < static_cast<int32_t>(syms.size()); ++i) consider(i);
        while (!queue.empty()) {
            const Bigram b = queue.top();
            queue.pop();
            Symbol& left = syms[b.left];
            Symbol& right = syms[b.right];
            if (left.len == 0 || right.len == 0 || left.len + right.len != b.size ||
                left.next != b.right)
                continue;
            left.len += right.len;
            left.id = b.result;
            right.len = 0;
            left.next = right.next;
            if (left.next >= 0) syms[left.next].prev = b.left;
            consider(left.prev);
            consider(b.left);
        }
        for (int32_t i = 0; i >= 0; i = syms[i].next) {
            const Symbol& s = syms[i];
            if (s.id >= 0) {
                out.push_back(s.id);
                continue;
            }
            for (uint32_t k = 0; k < s.len; ++k) {
                const auto byte = static_cast<uint8_t>(text[s.start + k]);
                if (byte_token_[byte] >= 0) {
                    out.push_back(byte_token_[byte]);
                } else if (vocab_.unk >= 0) {
                    out.push_back(vocab_.unk);
                    break;  // one <unk> per unknown character, like SentencePiece without byte
                            // fallback
                } else {
                    char hex[8];
                    std::snprintf(hex, sizeof(hex), "0x%02X", static_cast<unsigned>(byte));
                    throw util::Error(
                        std::string("tokenizer: byte ") + hex +
                        " has neither a <0xNN> token nor an <unk> token in this vocabulary");
                }
            }
        }
    }

  private:
    struct Symbol {
        int32_t id;  // token of the current text, -1 if none
        int32_t prev, next;
        uint32_t start, len;  // bytes of `text`
    };
    struct Bigram {
        double score;
        int32_t left, right;
        uint32_t size;
        int32_t result;
        // priority_queue top = highest score, then leftmost
        bool operator<(const Bigram& o) const {
            return score != o.score ? score < o.score : left > o.left;
        }
    };

    bool add_space_prefix_;
    std::string kind_;
    bool use_ranks_ = false;
    MergeMap merges_;
    std::array<int32_t, 256> byte_token_{};
    std::vector<int16_t> token_byte_;
};

}  // namespace

std::unique_ptr<Tokenizer> make_spm(Vocab vocab,
                                    const std::vector<std::pair<std::string, std::string>>& merges,
                                    bool add_space_prefix, std::string kind) {
    return std::make_unique<SpmBpe>(std::move(vocab), merges, add_space_prefix, std::move(kind));
}

}  // namespace warden::tokenizer::detail
