#include "tokenizer/regex_split.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tokenizer/unicode.h"
#include "util/error.h"

namespace warden::tokenizer::detail {

struct RegexSplitter::Compiled {
    pcre2_code* code = nullptr;
    ~Compiled() {
        if (code) pcre2_code_free(code);
    }
};

namespace {

std::string pcre2_message(int code) {
    PCRE2_UCHAR buf[256];
    const int n = pcre2_get_error_message(code, buf, sizeof(buf));
    return n < 0 ? "PCRE2 error " + std::to_string(code) : std::string(reinterpret_cast<char*>(buf));
}

struct MatchData {
    pcre2_match_data* md;
    explicit MatchData(const pcre2_code* code) : md(pcre2_match_data_create_from_pattern(code, nullptr)) {
        util::check(md != nullptr, "pre-tokenizer: out of memory creating PCRE2 match data");
    }
    ~MatchData() { pcre2_match_data_free(md); }
    MatchData(const MatchData&) = delete;
    MatchData& operator=(const MatchData&) = delete;
};

void split_one(const pcre2_code* code, const std::string& pattern, std::string_view text,
               std::vector<std::string_view>& out) {
    if (text.empty()) return;
    MatchData m(code);
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t offset = 0, last = 0;
    while (offset <= text.size()) {
        const int rc = pcre2_match(code, subject, text.size(), offset, 0, m.md, nullptr);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            throw util::Error("pre-tokenizer: matching /" + pattern + "/ failed: " + pcre2_message(rc));
        }
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(m.md);
        const size_t start = ov[0], end = ov[1];
        if (end <= start) {  // empty match: step over one character and retry
            if (start >= text.size()) break;
            offset = start + utf8_next(text, start).len;
            continue;
        }
        if (start > last) out.push_back(text.substr(last, start - last));
        out.push_back(text.substr(start, end - start));
        last = offset = end;
    }
    if (last < text.size()) out.push_back(text.substr(last));
}

}  // namespace

RegexSplitter::RegexSplitter(std::vector<std::string> patterns) : patterns_(std::move(patterns)) {
    for (const auto& p : patterns_) {
        int err = 0;
        PCRE2_SIZE err_off = 0;
        auto c = std::make_unique<Compiled>();
        c->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(p.data()), p.size(),
                                PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | PCRE2_DOLLAR_ENDONLY,
                                &err, &err_off, nullptr);
        if (!c->code) {
            throw util::Error("pre-tokenizer: regex /" + p + "/ does not compile at offset " +
                              std::to_string(err_off) + ": " + pcre2_message(err));
        }
        // JIT is an optimisation only: when unavailable pcre2_match interprets.
        (void)pcre2_jit_compile(c->code, PCRE2_JIT_COMPLETE);
        compiled_.push_back(std::move(c));
    }
}

RegexSplitter::~RegexSplitter() = default;

std::vector<std::string_view> RegexSplitter::split(std::string_view text) const {
    std::vector<std::string_view> cur;
    if (text.empty()) return cur;
    cur.push_back(text);
    std::vector<std::string_view> next;
    for (size_t i = 0; i < compiled_.size(); ++i) {
        next.clear();
        for (const auto piece : cur) split_one(compiled_[i]->code, patterns_[i], piece, next);
        cur.swap(next);
    }
    return cur;
}

// ---------------------------------------------------------------------------------------
// Pre-tokenizer table. The regexes are the ones llama.cpp (src/llama-vocab.cpp) associates
// with each tokenizer.ggml.pre value; llama.cpp in turn took them from each model's
// tokenizer.json (rewriting (?i:'s|...) into explicit [sS] classes, kept here so that only
// ASCII letters fold).

namespace {

const char* const kGpt2 =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
const char* const kLlama3 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kQwen2 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kPoro = R"( ?[^(\s|.,!?…。，、।۔،)]+)";
const char* const kTekken =
    R"([^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Latin/Greek/Cyrillic/... letter ranges of the DeepSeek LLM tokenizer (data, as published).
const char* const kDeepseekLlmLetters =
    R"(\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+)";
const char* const kCjkHangul = R"([一-龥ࠀ-一가-퟿]+)";

bool one_of(const std::string& s, std::initializer_list<const char*> names) {
    for (const char* n : names)
        if (s == n) return true;
    return false;
}

}  // namespace

const std::string& gpt2_pattern() {
    static const std::string p = std::string(kGpt2) + "|\\s+";
    return p;
}

PreTokenizerSpec pretokenizer_for(const std::string& pre) {
    PreTokenizerSpec s;
    if (pre.empty() || pre == "default") {
        s.patterns = {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2, R"(\p{N}+)", "[0-9][0-9][0-9]"};
    } else if (one_of(pre, {"llama3", "llama-v3", "llama-bpe", "falcon3"})) {
        s.patterns = {kLlama3};
        s.ignore_merges = true;
        s.add_bos = true;
    } else if (one_of(pre, {"dbrx", "smaug-bpe", "chatglm-bpe"})) {
        s.patterns = {kLlama3};
    } else if (pre == "deepseek-llm") {
        s.patterns = {"[\r\n]", kDeepseekLlmLetters, R"(\s?[!-/:-~！-／：-～‘-‟　-。]+)", R"(\s+$)",
                      kCjkHangul, R"(\p{N}+)"};
    } else if (pre == "deepseek-v3") {
        s.patterns = {R"(\p{N}{1,3})", R"([一-龥぀-ゟ゠-ヿ]+)",
                      R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"};
    } else if (pre == "deepseek-coder") {
        s.patterns = {"[\r\n]", R"(\s?\p{L}+)", R"(\s?\p{P}+)", kCjkHangul, R"(\p{N})"};
    } else if (pre == "falcon") {
        s.patterns = {R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2, "[0-9][0-9][0-9]"};
    } else if (one_of(pre, {"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone",
                            "minerva-7b"})) {
        s.patterns = {R"(\p{N})", kGpt2};
    } else if (one_of(pre, {"gpt-2", "gpt2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v1-en",
                            "jina-v2-es", "jina-v2-de", "jina-v2-code", "roberta-bpe", "mpt", "olmo",
                            "jais"})) {
        s.patterns = {kGpt2};
    } else if (one_of(pre, {"qwen2", "deepseek-r1-qwen", "megrez", "stablelm2"})) {
        s.patterns = {kQwen2};
    } else if (one_of(pre, {"poro-chat", "bloom", "gpt3-finnish"})) {
        s.patterns = {kPoro};
    } else if (pre == "viking") {
        s.patterns = {kPoro, R"(\p{N})"};
    } else if (pre == "tekken") {
        s.patterns = {kTekken};
        s.ignore_merges = true;
        s.add_bos = true;
    } else if (pre == "chameleon") {
        s.patterns = {"<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", "([\\t\\n]|    |  )",
                      R"(\p{N})", R"([\p{P}!-/:-@\[-`{-~])", kGpt2};
        s.add_bos = true;
    } else {
        throw util::Error("tokenizer: unknown pre-tokenizer '" + pre +
                          "' (tokenizer.ggml.pre); supported: default, gpt-2, llama3, qwen2, "
                          "deepseek-llm, deepseek-coder, deepseek-v3, falcon, starcoder, refact, "
                          "smollm, mpt, olmo, command-r, poro-chat, viking, tekken, chameleon, ...");
    }
    return s;
}

}  // namespace warden::tokenizer::detail
