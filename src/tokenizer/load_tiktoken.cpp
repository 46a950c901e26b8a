// tiktoken vocabularies with Kimi's conventions (Kimi K2, Kimi-Linear, Moonlight ship
// tiktoken.model + tokenizer_config.json + tokenization_kimi.py and no tokenizer.json).
//
// What tokenization_kimi.py (TikTokenTokenizer) does, and what this file reproduces:
//  - mergeable ranks: tiktoken.model, one "base64(bytes) rank" line per token; the rank is the
//    token id. Tokens are raw bytes (no GPT-2 byte-to-unicode mapping).
//  - special tokens: ids len(ranks) .. len(ranks) + 256 + 2 - 1 (num_reserved_special_tokens =
//    256, plus 2), named from tokenizer_config.json added_tokens_decoder, the rest
//    "<|reserved_token_{id}|>". All are matched verbatim in text (tiktoken allowed_special="all").
//    bos/eos are bos_token/eos_token of tokenizer_config.json (defaults "[BOS]"/"[EOS]"). Kimi's
//    encode() adds neither; add_bos_token/add_eos_token in the config are honoured if present.
//  - before tiktoken, the text is cut into 400,000-character pieces and each piece wherever a run
//    of whitespace or of non-whitespace characters (Python str.isspace) exceeds 25,000
//    characters; the pieces are encoded independently (special tokens are matched per piece).
//  - pre-tokenizer: Kimi's pat_str (see kimi_pattern below), each pre-token encoded with
//    tiktoken's rank BPE: a pre-token that is itself a rank is one token; otherwise start from
//    single bytes and repeatedly merge the adjacent pair whose concatenation has the lowest rank
//    (leftmost on ties) until no adjacent concatenation is a rank.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <unordered_map>

#include "tokenizer/bpe_merge.h"
#include "tokenizer/regex_split.h"
#include "tokenizer/tiktoken.h"
#include "tokenizer/unicode.h"
#include "tokenizer/vocab.h"
#include "util/error.h"
#include "util/json_file.h"

namespace warden::tokenizer::detail {

using nlohmann::json;

namespace {

constexpr int32_t kNumReservedSpecial =
    256 + 2;                                // tokenization_kimi.py: num_reserved_special_tokens + 2
constexpr size_t kMaxChunkChars = 400'000;  // TIKTOKEN_MAX_ENCODE_CHARS
constexpr size_t kMaxRunChars = 25'000;     // MAX_NO_WHITESPACES_CHARS

// ---------------------------------------------------------------------------------------
// tiktoken.model parsing

int base64_value(char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

// Strict standard base64 with '=' padding (what base64.b64decode accepts from a file written
// by tiktoken; we reject stray characters instead of skipping them). Returns false when bad.
bool base64_decode(std::string_view in, std::string& out) {
    out.clear();
    if (in.empty() || in.size() % 4 != 0) return false;
    size_t pad = 0;
    if (in.back() == '=') pad = in[in.size() - 2] == '=' ? 2 : 1;
    for (size_t i = 0; i < in.size(); i += 4) {
        uint32_t v = 0;
        for (size_t k = 0; k < 4; ++k) {
            const char c = in[i + k];
            const bool padding = i + 4 == in.size() && k >= 4 - pad;
            int d = 0;
            if (padding) {
                if (c != '=') return false;
            } else {
                d = base64_value(c);
                if (d < 0) return false;
            }
            v = (v << 6) | static_cast<uint32_t>(d);
        }
        const size_t n = i + 4 == in.size() ? 3 - pad : 3;
        for (size_t k = 0; k < n; ++k) out += static_cast<char>((v >> (16 - 8 * k)) & 0xFF);
    }
    return true;
}

bool is_blank(char c) {
    return c == ' ' || c == '\t';
}

// ---------------------------------------------------------------------------------------
// Kimi's pat_str, from tokenization_kimi.py (Rust regex syntax, as tiktoken's fancy-regex
// reads it):
//   [\p{Han}]+
//   |[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//   |[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//   |\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
// PCRE2 differs in three places, each rewritten to mean exactly what the Rust regex crate means:
//  1. `[A&&[^B]]` is class intersection in Rust; PCRE2 (before 10.45's extended classes) has no
//     such syntax and would read `&&[^\p{Han}` as literal members. Since the general categories
//     partition all code points, "A and not Han" is one negated class: not any of the categories
//     outside A, and not Han. [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]] becomes
//     [^\p{Ll}\p{N}\p{P}\p{S}\p{Z}\p{C}\p{sc:Han}] and [\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]
//     becomes [^\p{Lu}\p{Lt}\p{N}\p{P}\p{S}\p{Z}\p{C}\p{sc:Han}]. (The obvious per-character
//     lookahead, (?:(?!\p{Han})[A])*, means the same but repeats a group once per character:
//     with PCRE2 10.42's JIT a 25,000-letter word then fails with "JIT stack limit reached".)
//  2. Rust's \p{Han} is the Script property; PCRE2 >= 10.40 reads a bare script name as Script
//     Extensions (which would add e.g. U+3001 IDEOGRAPHIC COMMA). Written \p{sc:Han}.
//  3. Rust's \s is Unicode White_Space; PCRE2's \s under UCP is \p{Z}, \h or \v, which also
//     matches U+180E MONGOLIAN VOWEL SEPARATOR (a format character, not White_Space). The
//     White_Space set is spelled out.
// (?i:'s|...) folds like Rust's simple case folding in PCRE2 UTF mode too ('ſ' U+017F matches s).
// Both sides use their own Unicode tables (PCRE2 10.42: Unicode 14): characters assigned later
// may be classified differently.
const char* const kWs =
    R"(\t-\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";
const char* const kUpperNotHan = R"([^\p{Ll}\p{N}\p{P}\p{S}\p{Z}\p{C}\p{sc:Han}])";
const char* const kLowerNotHan = R"([^\p{Lu}\p{Lt}\p{N}\p{P}\p{S}\p{Z}\p{C}\p{sc:Han}])";
const char* const kContractions = R"((?i:'s|'t|'re|'ve|'m|'ll|'d)?)";

// The eight alternatives as tokenization_kimi.py writes them (its r"""...""" strings), used to
// check that a shipped tokenization_kimi.py still has the pattern this file implements.
const char* const kKimiPatternSource[] = {
    R"([\p{Han}]+)",
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)",
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)",
    R"(\p{N}{1,3})",
    R"( ?[^\s\p{L}\p{N}]+[\r\n]*)",
    R"(\s*[\r\n]+)",
    R"(\s+(?!\S))",
    R"(\s+)",
};

// Python's str.isspace() (Unicode White_Space plus the bidi separators U+001C..U+001F).
bool py_isspace(uint32_t cp) {
    return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
           cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
           cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

// Kimi's encode() pre-split (see the top of the file). Characters are code points; an ill-formed
// UTF-8 subpart counts as one non-space character.
void kimi_chunks(std::string_view text, std::vector<std::string_view>& out) {
    size_t pos = 0;
    while (pos < text.size()) {
        // One chunk of at most kMaxChunkChars characters, then split its over-long runs.
        size_t chars = 0, slice_start = pos, run = 0;
        bool run_space = false;
        while (pos < text.size() && chars < kMaxChunkChars) {
            const Utf8Step st = utf8_next(text, pos);
            const bool space = st.status == Utf8Status::Valid && py_isspace(st.cp);
            if (chars == 0) run_space = space;
            if (space != run_space) {
                run = 1;
                run_space = space;
            } else if (++run > kMaxRunChars) {
                out.push_back(text.substr(slice_start, pos - slice_start));
                slice_start = pos;
                run = 1;
            }
            pos += st.len;
            ++chars;
        }
        out.push_back(text.substr(slice_start, pos - slice_start));
    }
}

std::string token_text(const json& j) {
    if (j.is_string()) return j.get<std::string>();
    if (j.is_object() && j.contains("content") && j["content"].is_string())
        return j["content"].get<std::string>();
    return {};
}

// ---------------------------------------------------------------------------------------

class TiktokenBpe final : public VocabTokenizer {
  public:
    TiktokenBpe(Vocab vocab, int32_t n_ranks, std::string kind)
        : VocabTokenizer(std::move(vocab)),
          splitter_({kimi_pattern()}),
          n_ranks_(n_ranks),
          kind_(std::move(kind)) {}

    std::vector<int32_t> encode(std::string_view text, bool add_bos,
                                bool parse_special) const override {
        std::vector<int32_t> out;
        out.reserve(text.size() / 3 + 4);
        if (add_bos && vocab_.add_bos) {
            util::check(vocab_.bos >= 0,
                        "tokenizer: the model asks for a BOS token but defines none");
            out.push_back(vocab_.bos);
        }
        std::vector<std::string_view> chunks;
        kimi_chunks(text, chunks);
        for (std::string_view chunk : chunks) {
            for (const Fragment& f : split_special(chunk, parse_special)) {
                if (f.id >= 0) {
                    out.push_back(f.id);
                } else {
                    encode_fragment(f.text, false, out);
                }
            }
        }
        if (add_bos && vocab_.add_eos) {
            util::check(vocab_.eos >= 0,
                        "tokenizer: the model asks for an EOS token but defines none");
            out.push_back(vocab_.eos);
        }
        return out;
    }

    std::string token_bytes(int32_t id) const override {
        check_id(id);
        return vocab_.tokens[id];  // raw bytes, or the text of a special token
    }

    std::string kind() const override { return kind_; }

  protected:
    void encode_fragment(std::string_view text, bool, std::vector<int32_t>& out) const override {
        for (std::string_view piece : splitter_.split(text)) encode_piece(piece, out);
    }

  private:
    int32_t rank_of(std::string_view bytes) const {
        const int32_t id = vocab_.find(bytes);
        return id >= 0 && id < n_ranks_ ? id : -1;
    }

    void encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
        if (piece.empty()) return;
        if (const int32_t whole = rank_of(piece); whole >= 0) {  // also every single byte
            out.push_back(whole);
            return;
        }
        // Every byte has a rank (checked at load).
        std::vector<MergePart> parts =
            byte_parts(static_cast<int32_t>(piece.size()),
                       [&](int32_t i) { return rank_of(piece.substr(static_cast<size_t>(i), 1)); });
        merge_lowest_rank(
            parts, [&](const MergePart& l, const MergePart& r) -> std::optional<Merge> {
                const int32_t rank =
                    rank_of(piece.substr(l.start, l.len + r.len));  // tiktoken: rank == token
                if (rank < 0) return std::nullopt;
                return Merge{rank, rank};
            });
        for (int32_t i = 0; i >= 0; i = parts[i].next) out.push_back(parts[i].id);
    }

    RegexSplitter splitter_;
    int32_t n_ranks_;
    std::string kind_;
};

// Whether the directory is a Kimi tokenizer: tokenization_kimi.py is there, or the config's
// auto_map names it (the only tiktoken pre-tokenizer warden implements is Kimi's).
void check_kimi(const std::filesystem::path& base, const json& cfg) {
    const std::filesystem::path py = base / "tokenization_kimi.py";
    if (std::filesystem::exists(py)) {
        const std::string src = util::read_text_file(py.string());
        for (const char* alt : kKimiPatternSource) {
            util::check(src.find(alt) != std::string::npos,
                        "tokenizer: " + py.string() +
                            ": its pat_str is not the Kimi pattern warden implements (no '" + alt +
                            "')");
        }
        return;
    }
    bool named = false;
    if (cfg.contains("auto_map") && cfg["auto_map"].is_object() &&
        cfg["auto_map"].contains("AutoTokenizer")) {
        const json& at = cfg["auto_map"]["AutoTokenizer"];
        const json first = at.is_array() && !at.empty() ? at[0] : at;
        named = first.is_string() && first.get<std::string>().rfind("tokenization_kimi.", 0) == 0;
    }
    util::check(named, "tokenizer: " + (base / "tiktoken.model").string() +
                           " has no tokenization_kimi.py beside it and tokenizer_config.json "
                           "auto_map does not name "
                           "it: only Kimi's tiktoken pre-tokenizer is supported");
}

}  // namespace

std::vector<std::string> parse_tiktoken_ranks(std::string_view text, const std::string& source) {
    std::vector<std::string> tokens;  // [n] bytes by rank
    std::vector<size_t> line_of;      // [n] line that defined each rank (0: none yet)
    std::unordered_map<std::string, size_t, StringHash, std::equal_to<>> seen;  // bytes -> line
    size_t pos = 0, line_no = 0;
    std::string bytes;
    while (pos < text.size()) {
        size_t end = text.find('\n', pos);
        if (end == std::string_view::npos) end = text.size();
        std::string_view line = text.substr(pos, end - pos);
        pos = end + 1;
        ++line_no;
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        if (line.empty()) continue;
        const std::string where = source + ":" + std::to_string(line_no);
        size_t i = 0;
        while (i < line.size() && is_blank(line[i])) ++i;
        size_t j = i;
        while (j < line.size() && !is_blank(line[j])) ++j;
        const std::string_view b64 = line.substr(i, j - i);
        while (j < line.size() && is_blank(line[j])) ++j;
        size_t k = j;
        while (k < line.size() && !is_blank(line[k])) ++k;
        const std::string_view rank_text = line.substr(j, k - j);
        while (k < line.size() && is_blank(line[k])) ++k;
        util::check(!b64.empty() && !rank_text.empty() && k == line.size(),
                    where + ": expected \"<base64 token> <rank>\", got '" +
                        util::printable(std::string(line), 80) + "'");
        util::check(
            base64_decode(b64, bytes) && !bytes.empty(),
            where + ": token '" + util::printable(std::string(b64), 80) + "' is not valid base64");
        int64_t rank = 0;
        bool numeric = rank_text.size() <= 10;
        for (char c : rank_text) {
            if (c < '0' || c > '9') numeric = false;
            if (numeric) rank = rank * 10 + (c - '0');
        }
        util::check(numeric && rank < (int64_t{1} << 24),
                    where + ": rank '" + util::printable(std::string(rank_text), 40) +
                        "' is not a non-negative integer below 16777216");
        const auto [it, fresh] = seen.emplace(bytes, line_no);
        util::check(fresh, where + ": token bytes '" + util::printable(bytes, 40) +
                               "' repeat line " + std::to_string(it->second));
        if (static_cast<size_t>(rank) >= tokens.size()) {
            tokens.resize(static_cast<size_t>(rank) + 1);
            line_of.resize(static_cast<size_t>(rank) + 1, 0);
        }
        util::check(line_of[rank] == 0, where + ": rank " + std::to_string(rank) +
                                            " repeats line " + std::to_string(line_of[rank]));
        line_of[rank] = line_no;
        tokens[rank] = bytes;
    }
    util::check(!tokens.empty(), source + ": no tokens");
    for (size_t r = 0; r < tokens.size(); ++r) {
        if (line_of[r] != 0) continue;
        // Name the line of the first rank above the gap.
        size_t above = r;
        while (line_of[above] == 0) ++above;
        throw util::Error(source + ":" + std::to_string(line_of[above]) + ": rank " +
                          std::to_string(above) + " leaves a gap: rank " + std::to_string(r) +
                          " is missing (ranks must be 0..n-1; special tokens follow them)");
    }
    return tokens;
}

const std::string& kimi_pattern() {
    static const std::string p = [] {
        const std::string ws = kWs;
        const std::string letters = R"([^\r\n\p{L}\p{N}]?)";
        std::string s;
        s += R"(\p{sc:Han}+)";
        s += "|" + letters + kUpperNotHan + "*" + kLowerNotHan + "+" + kContractions;
        s += "|" + letters + kUpperNotHan + "+" + kLowerNotHan + "*" + kContractions;
        s += R"(|\p{N}{1,3})";
        s += "| ?[^" + ws + R"(\p{L}\p{N}]+[\r\n]*)";
        s += "|[" + ws + R"(]*[\r\n]+)";
        s += "|[" + ws + "]+(?![^" + ws + "])";
        s += "|[" + ws + "]+";
        return s;
    }();
    return p;
}

std::unique_ptr<Tokenizer> load_tiktoken_dir(const std::string& dir) {
    const std::filesystem::path base(dir);
    const std::filesystem::path model_path = base / "tiktoken.model";
    const std::string src = model_path.string();
    util::check(std::filesystem::exists(model_path), "tokenizer: " + src + " not found");
    json cfg = json::object();
    const std::filesystem::path cfg_path = base / "tokenizer_config.json";
    if (std::filesystem::exists(cfg_path)) cfg = util::read_json_file(cfg_path.string());
    util::check(cfg.is_object(), "tokenizer: " + cfg_path.string() + " is not a JSON object");
    check_kimi(base, cfg);

    std::vector<std::string> ranks =
        parse_tiktoken_ranks(util::read_text_file(model_path.string()), src);
    const auto n_ranks = static_cast<int32_t>(ranks.size());
    {
        std::vector<uint8_t> has(256, 0);
        for (const auto& t : ranks)
            if (t.size() == 1) has[static_cast<uint8_t>(t[0])] = 1;
        for (int b = 0; b < 256; ++b) {
            if (has[b]) continue;
            char buf[8];
            std::snprintf(buf, sizeof(buf), "0x%02X", b);
            throw util::Error(src + ": byte " + std::string(buf) +
                              " has no rank (tiktoken needs a rank for every single byte)");
        }
    }

    Vocab v;
    v.tokens = std::move(ranks);
    v.types.assign(v.tokens.size(), TokenType::Normal);
    const std::string cfg_src = cfg_path.string();
    std::unordered_map<int64_t, std::string> named;
    try {
        if (cfg.contains("added_tokens_decoder")) {
            const json& atd = cfg["added_tokens_decoder"];
            util::check(atd.is_object(), cfg_src + ": added_tokens_decoder is not an object");
            for (const auto& [key, val] : atd.items()) {
                int64_t id = -1;
                try {
                    size_t used = 0;
                    id = std::stoll(key, &used);
                    if (used != key.size()) id = -1;
                } catch (const std::exception&) {
                    id = -1;
                }
                util::check(id >= 0, cfg_src + ": added_tokens_decoder key '" +
                                         util::printable(key, 40) + "' is not a token id");
                util::check(id >= n_ranks && id < int64_t{n_ranks} + kNumReservedSpecial,
                            cfg_src + ": added token id " + key +
                                " is outside the special-token range " + std::to_string(n_ranks) +
                                ".." + std::to_string(n_ranks + kNumReservedSpecial - 1) +
                                " (ids after the " + std::to_string(n_ranks) + " ranks of " + src +
                                ")");
                const std::string content = token_text(val);
                util::check(!content.empty(), cfg_src + ": added token " + key + " has no content");
                named[id] = content;
            }
        }
        for (int32_t i = 0; i < kNumReservedSpecial; ++i) {
            const int64_t id = int64_t{n_ranks} + i;
            auto it = named.find(id);
            v.tokens.push_back(it != named.end() ? it->second
                                                 : "<|reserved_token_" + std::to_string(id) + "|>");
            v.types.push_back(TokenType::Control);
        }
        auto special_id = [&](const char* key, const char* fallback) -> int32_t {
            const bool given = cfg.contains(key) && !cfg[key].is_null();
            const std::string text = given ? token_text(cfg[key]) : fallback;
            for (int32_t id = n_ranks; id < static_cast<int32_t>(v.tokens.size()); ++id)
                if (v.tokens[id] == text) return id;
            util::check(!given, cfg_src + ": " + key + " '" + util::printable(text, 40) +
                                    "' is not a special token");
            return -1;
        };
        v.bos = special_id("bos_token", "[BOS]");
        v.eos = special_id("eos_token", "[EOS]");
        const json ab = cfg.value("add_bos_token", json());
        const json ae = cfg.value("add_eos_token", json());
        v.add_bos = ab.is_boolean() && ab.get<bool>() && v.bos >= 0;
        v.add_eos = ae.is_boolean() && ae.get<bool>() && v.eos >= 0;
    } catch (const json::exception& e) {
        throw util::Error(cfg_src + ": unexpected structure: " + e.what());
    }
    v.finalize(src);
    return std::make_unique<TiktokenBpe>(std::move(v), n_ranks, "tiktoken BPE (pre: kimi)");
}

}  // namespace warden::tokenizer::detail
