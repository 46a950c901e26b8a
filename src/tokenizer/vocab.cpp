#include "tokenizer/vocab.h"

#include <algorithm>
#include <cctype>
#include <set>

#include "util/error.h"

namespace warden::tokenizer::detail {

void Vocab::finalize(const std::string& source) {
    const size_t n = tokens.size();
    util::check(n > 0, source + ": tokenizer vocabulary is empty");
    util::check(n < static_cast<size_t>(INT32_MAX), source + ": tokenizer vocabulary too large");
    if (types.empty()) types.assign(n, TokenType::Normal);
    util::check(types.size() == n, source + ": token_type has " + std::to_string(types.size()) +
                                       " entries but the vocabulary has " + std::to_string(n));
    util::check(scores.empty() || scores.size() == n,
                source + ": scores has " + std::to_string(scores.size()) +
                    " entries but the vocabulary has " + std::to_string(n));
    lstrip.resize(n, 0);
    rstrip.resize(n, 0);
    token_to_id.clear();
    token_to_id.reserve(n * 2);
    for (size_t i = 0; i < n; ++i) token_to_id.emplace(tokens[i], static_cast<int32_t>(i));
    auto check_special = [&](int32_t& id, const char* what) {
        if (id < -1 || id >= static_cast<int32_t>(n)) {
            throw util::Error(source + ": " + what + " token id " + std::to_string(id) +
                              " is outside the vocabulary (size " + std::to_string(n) + ")");
        }
    };
    check_special(bos, "BOS");
    check_special(eos, "EOS");
    check_special(eot, "EOT");
    check_special(eom, "EOM");
    check_special(unk, "UNK");
}

std::pair<std::string, std::string> split_merge(const std::string& m, size_t index,
                                                const std::string& source) {
    const size_t pos = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
    if (pos == std::string::npos || pos + 1 >= m.size()) {
        throw util::Error(source + ": malformed merge #" + std::to_string(index) + " '" + m +
                          "' (expected \"left right\")");
    }
    return {m.substr(0, pos), m.substr(pos + 1)};
}

MergeMap build_merges(const Vocab& vocab,
                      const std::vector<std::pair<std::string, std::string>>& merges) {
    MergeMap map;
    map.reserve(merges.size() * 2);
    std::string joined;
    for (size_t r = 0; r < merges.size(); ++r) {
        const int32_t a = vocab.find(merges[r].first);
        const int32_t b = vocab.find(merges[r].second);
        if (a < 0 || b < 0) continue;
        joined = merges[r].first;
        joined += merges[r].second;
        const int32_t c = vocab.find(joined);
        if (c < 0) continue;
        map.emplace(merge_key(a, b), MergeInfo{static_cast<int32_t>(r), c});
    }
    return map;
}

bool is_eog_text(std::string_view t) {
    return t == "<|eot_id|>" || t == "<|im_end|>" || t == "<|end|>" || t == "<end_of_turn>" ||
           t == "<|endoftext|>" || t == "<|eom_id|>" || t == "<EOT>";
}

VocabTokenizer::VocabTokenizer(Vocab vocab) : vocab_(std::move(vocab)) {
    special_by_byte_.resize(256);
    for (int32_t id = 0; id < vocab_.size(); ++id) {
        const TokenType t = vocab_.types[id];
        if (t != TokenType::Control && t != TokenType::UserDefined && t != TokenType::Unknown)
            continue;
        const std::string& text = vocab_.tokens[id];
        if (text.empty()) continue;
        special_by_byte_[static_cast<uint8_t>(text[0])].push_back(id);
    }
    for (auto& list : special_by_byte_) {
        std::stable_sort(list.begin(), list.end(), [&](int32_t a, int32_t b) {
            return vocab_.tokens[a].size() > vocab_.tokens[b].size();
        });
    }
}

void VocabTokenizer::check_id(int32_t id) const {
    if (id < 0 || id >= vocab_.size()) {
        throw util::Error("tokenizer: token id " + std::to_string(id) +
                          " is out of range (vocabulary size " + std::to_string(vocab_.size()) +
                          ")");
    }
}

std::vector<Fragment> VocabTokenizer::split_special(std::string_view text,
                                                    bool parse_special) const {
    std::vector<Fragment> out;
    size_t start = 0;  // start of the pending raw text
    size_t i = 0;
    auto is_space = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };
    while (i < text.size()) {
        int32_t hit = -1;
        for (int32_t id : special_by_byte_[static_cast<uint8_t>(text[i])]) {
            const TokenType t = vocab_.types[id];
            if (!parse_special && t != TokenType::UserDefined) continue;
            const std::string& tok = vocab_.tokens[id];
            if (text.compare(i, tok.size(), tok) == 0) {
                hit = id;
                break;
            }
        }
        if (hit < 0) {
            ++i;
            continue;
        }
        size_t left_end = i;
        if (vocab_.lstrip[hit])
            while (left_end > start && is_space(text[left_end - 1])) --left_end;
        if (left_end > start) out.push_back({text.substr(start, left_end - start), -1});
        out.push_back({{}, hit});
        i += vocab_.tokens[hit].size();
        if (vocab_.rstrip[hit])
            while (i < text.size() && is_space(text[i])) ++i;
        start = i;
    }
    if (start < text.size()) out.push_back({text.substr(start), -1});
    return out;
}

std::vector<int32_t> VocabTokenizer::encode(std::string_view text, bool add_bos,
                                            bool parse_special) const {
    std::vector<int32_t> out;
    out.reserve(text.size() / 3 + 4);
    if (add_bos && vocab_.add_bos) {
        util::check(vocab_.bos >= 0, "tokenizer: the model asks for a BOS token but defines none");
        out.push_back(vocab_.bos);
    }
    bool after_special = true;
    for (const Fragment& f : split_special(text, parse_special)) {
        if (f.id >= 0) {
            out.push_back(f.id);
            after_special = true;
        } else {
            encode_fragment(f.text, after_special, out);
            after_special = false;
        }
    }
    if (add_bos && vocab_.add_eos) {
        util::check(vocab_.eos >= 0, "tokenizer: the model asks for an EOS token but defines none");
        out.push_back(vocab_.eos);
    }
    return out;
}

std::vector<int32_t> VocabTokenizer::stop_ids() const {
    std::set<int32_t> ids;
    for (int32_t id : {vocab_.eos, vocab_.eot, vocab_.eom})
        if (id >= 0) ids.insert(id);
    for (int32_t id = 0; id < vocab_.size(); ++id) {
        const TokenType t = vocab_.types[id];
        if ((t == TokenType::Control || t == TokenType::UserDefined) &&
            is_eog_text(vocab_.tokens[id]))
            ids.insert(id);
    }
    return {ids.begin(), ids.end()};
}

bool VocabTokenizer::is_special(int32_t id) const {
    if (id < 0 || id >= vocab_.size()) return false;
    const TokenType t = vocab_.types[id];
    return t == TokenType::Control || t == TokenType::Unknown;
}

bool VocabTokenizer::is_special_or_added(int32_t id) const {
    if (id < 0 || id >= vocab_.size()) return false;
    const TokenType t = vocab_.types[id];
    return t == TokenType::Control || t == TokenType::Unknown || t == TokenType::UserDefined;
}

std::vector<std::pair<std::string, int32_t>> VocabTokenizer::special_tokens() const {
    std::vector<std::pair<std::string, int32_t>> out;
    for (int32_t id = 0; id < vocab_.size(); ++id) {
        const TokenType t = vocab_.types[id];
        if (t == TokenType::Control || t == TokenType::UserDefined || t == TokenType::Unknown)
            out.emplace_back(vocab_.tokens[id], id);
    }
    return out;
}

}  // namespace warden::tokenizer::detail
