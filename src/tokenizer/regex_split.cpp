#include "tokenizer/regex_split.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <map>

#include "tokenizer/tiktoken.h"
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
    return n < 0 ? "PCRE2 error " + std::to_string(code)
                 : std::string(reinterpret_cast<char*>(buf));
}

struct MatchData {
    pcre2_match_data* md;
    explicit MatchData(const pcre2_code* code)
        : md(pcre2_match_data_create_from_pattern(code, nullptr)) {
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
            throw util::Error("pre-tokenizer: matching /" + pattern +
                              "/ failed: " + pcre2_message(rc));
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
        c->code =
            pcre2_compile(reinterpret_cast<PCRE2_SPTR>(p.data()), p.size(),
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
// Pre-tokenizer table: llama.cpp's (src/llama-vocab.cpp). `families` holds the regex list of each
// llama.cpp LLAMA_VOCAB_PRE_TYPE_*, the same strings as llama.cpp's literals, except that every
// non-ASCII character is written as a PCRE2 \x{...} escape: a source file of literal
// characters can be Unicode-normalised by an editor or tool, which silently changes a
// character class. `kNames` maps each tokenizer.ggml.pre value to its family and to the flags
// llama.cpp sets with it. tests/python/test_pretokenizer_table.py compares both, code point for
// code point, with llama.cpp's source. llama.cpp took the regexes from each model's
// tokenizer.json, rewriting (?i:'s|...) into explicit [sS] classes (so that only ASCII letters
// fold).
//
// Not supported (pretokenizer_for throws): gemma4, granite-embed-multi-311m, sarvam-moe and
// whitespace (SentencePiece-style BPE on raw UTF-8 without the GPT-2 byte mapping), afmoe (a
// digit-grouping rule llama.cpp implements in code, not as a regex), superbpe (splits at empty
// matches). kimi-k2 is supported with Kimi's own pattern (tiktoken.h): llama.cpp's entry for it
// is a placeholder that selects hand-written code.

struct PreName {
    const char* name;
    const char* family;
    bool ignore_merges;
    bool add_bos;
};

namespace {

const std::map<std::string, std::vector<std::string>>& families() {
    static const std::map<std::string, std::vector<std::string>> f = {
        {"BAILINGMOE",
         {"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
          "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+"}},
        {"BLOOM", {" ?[^(\\s|.,!?\\x{2026}\\x{3002}\\x{FF0C}\\x{3001}\\x{964}\\x{6D4}\\x{60C})]+"}},
        {"CHAMELEON",
         {"<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", "([\\t\\n]|    |  )",
          "\\p{N}", "[\\p{P}!-/:-@\\[-`{-~]",
          "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"}},
        {"CHATGLM4",
         {"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
          "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}},
        {"CODESHELL",
         {"\\p{N}",
          "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"}},
        {"COMMAND_R",
         {"\\p{N}",
          "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"}},
        {"DBRX",
         {"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
          "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}},
        {"DEEPSEEK3_LLM",
         {"\\p{N}{1,3}", "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+",
          "[!\"#$%&'()*+,\\-./"
          ":;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| "
          "?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"}},
        {"DEEPSEEK_CODER",
         {"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+",
          "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+", "\\p{N}"}},
        {"DEEPSEEK_LLM",
         {"[\r\n]",
          "\\s?[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}\\x{"
          "1C4}-\\x{293}\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}\\x{37F}"
          "\\x{386}\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}\\x{3F7}-\\x{481}\\x{"
          "48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}"
          "\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}\\x{1D79}-"
          "\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}"
          "\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{"
          "1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}\\x{"
          "1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{"
          "2107}\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}\\x{212A}"
          "-\\x{212D}\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}"
          "\\x{2183}\\x{2184}\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{"
          "2CF3}\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}\\x{"
          "A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{"
          "FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}"
          "\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}\\x{1E900}-\\x{1E943}]+",
          "\\s?[!-/"
          ":-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+",
          "\\s+$", "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+", "\\p{N}+"}},
        {"DEFAULT",
         {"[\\p{P}\\$\\+<=>\\^~\\|]+",
          "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
          "\\p{N}+", "[0-9][0-9][0-9]"}},
        {"EXAONE",
         {"\\p{N}",
          "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"}},
        {"EXAONE_MOE",
         {"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?(?:\\p{"
          "L}\\p{M}*(?: \\p{L}\\p{M}*)*)+|\\p{N}| "
          "?[^\\s\\p{L}\\p{N}]+[\\r\\n/]?|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+"}},
        {"FALCON",
         {"[\\p{P}\\$\\+<=>\\^~\\|`]+",
          "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
          "[0-9][0-9][0-9]"}},
        {"GPT2", {"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"}},
        {"GPT3_FINNISH",
         {" ?[^(\\s|.,!?\\x{2026}\\x{3002}\\x{FF0C}\\x{3001}\\x{964}\\x{6D4}\\x{60C})]+"}},
        {"GPT4O",
         {"[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR]"
          "[eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?="
          "[\\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,"
          "3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}},
        {"GRANITE_DOCLING",
         {"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"}},
        {"GRANITE_EMB_MULTI",
         {"[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}\\p{M}])([^a-z]))*((?=[\\p{L}\\p{M}])([^A-Z]))+(?:'[sS]"
          "|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}\\p{"
          "M}])([^a-z]))+((?=[\\p{L}\\p{M}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'["
          "lL][lL]|'[dD])?|\\p{N}{1,3}| "
          "?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}},
        {"GROK_2",
         {"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
          "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}},
        {"HUNYUAN",
         {"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
          "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}},
        {"HUNYUAN_DENSE",
         {"\\p{N}{1,3}", "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+",
          "[!\"#$%&'()*+,\\-./"
          ":;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| "
          "?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"}},
        {"HY_V4",
         {"\\p{N}{1,3}", "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+",
          "[!\"#$%&'()*+,\\-./"
          ":;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| "
          "?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"}},
        {"JAIS", {"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"}},
        {"JAIS2",
         {"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
          "\\p{N}{1,3}| "
          "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s{512}(?!\\S)|\\s{256}(?!\\S)|\\s{128}(?!"
          "\\S)|\\s{64}(?!\\S)|\\s{32}(?!\\S)|\\s{16}(?!\\S)|\\s{8}(?!\\S)|\\s{4}(?!\\S)|\\s{1,2}(?"
          "!\\S)|\\s{1}"}},
        {"JOYAI_LLM",
         {"\\p{N}{1,3}", "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+",
          "[!\"#$%&'()*+,\\-./"
          ":;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| "
          "?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"}},
        {"LAGUNA",
         {"[^\\n]+|[\\n]+",
          "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
          "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}},
        {"LLAMA3",
         {"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
          "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}},
        {"MELLUM2",
         {"\\p{N}",
          "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"}},
        {"MINERVA",
         {"\\p{N}",
          "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"}},
        {"MINICPM5",
         {"\\p{N}{1,3}",
          "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
          "\\p{N}+| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}},
        {"MINIMAX_M2",
         {"[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR]"
          "[eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?="
          "[\\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,"
          "3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}},
        {"MPT", {"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"}},
        {"OLMO", {"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"}},
        {"PORO", {" ?[^(\\s|.,!?\\x{2026}\\x{3002}\\x{FF0C}\\x{3001}\\x{964}\\x{6D4}\\x{60C})]+"}},
        {"QWEN2",
         {"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
          "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}},
        {"QWEN35",
         {"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}"
          "\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}},
        {"REFACT",
         {"\\p{N}",
          "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"}},
        {"SEED_CODER",
         {"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
          "\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}},
        {"SMAUG",
         {"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
          "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}},
        {"SMOLLM",
         {"\\p{N}",
          "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"}},
        {"SOLAR_OPEN",
         {"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
          "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}},
        {"SPARK2_5",
         {"\\p{N}{1,3}", "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+",
          "[!\"#$%&'()*+,\\-./"
          ":;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| "
          "?[\\p{P}\\p{S}]+|[\r\n]|\\s+(?!\\S)|\\s+",
          "\\p{N}"}},
        {"STABLELM2",
         {"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
          "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}},
        {"STARCODER",
         {"\\p{N}",
          "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"}},
        {"TEKKEN",
         {"[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+|[^\\r\\n\\p{L}\\p{"
          "N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*|\\p{N}| "
          "?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}},
        {"TINY_AYA",
         {"\\d{1,3}(?=(?:\\d{3})*\\b)",
          "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]"
          "+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?[\\p{"
          "Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'"
          "[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| "
          "?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}},
        {"TRILLION",
         {"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"}},
        {"UFAKZEKA",
         {"[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
          "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}},
        {"VIKING",
         {" ?[^(\\s|.,!?\\x{2026}\\x{3002}\\x{FF0C}\\x{3001}\\x{964}\\x{6D4}\\x{60C})]+",
          "\\p{N}"}},
        {"YOUTU",
         {"[\\x{AC00}-\\x{D7A3}\\x{3131}-\\x{318E}]+|[\\x{FF01}\\x{2026}\\x{201C}\\x{201D}\\x{2018}"
          "\\x{2019}\\x{2014}\\x{FF1A}\\x{FF1B}\\x{FF0C}\\x{3001}-\\x{303F}\\x{FE30}-\\x{FE4F}]+|["
          "\\x{3105}-\\x{312F}]+|[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+",
          "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]"
          "+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?[\\p{"
          "Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'"
          "[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}| "
          "?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}},
    };
    return f;
}

}  // namespace

constexpr PreName kNames[] = {
    {"default", "DEFAULT", false, false},
    {"minicpm5", "MINICPM5", true, false},
    {"llama3", "LLAMA3", true, true},
    {"llama-v3", "LLAMA3", true, true},
    {"llama-bpe", "LLAMA3", true, true},
    {"falcon3", "LLAMA3", true, true},
    {"falcon-h1", "LLAMA3", true, true},
    {"pixtral", "LLAMA3", true, true},
    {"midm-2.0", "LLAMA3", true, true},
    {"lfm2", "LLAMA3", true, true},
    {"jina-v5-nano", "LLAMA3", true, true},
    {"deepseek-llm", "DEEPSEEK_LLM", false, false},
    {"deepseek-coder", "DEEPSEEK_CODER", false, false},
    {"deepseek-v3", "DEEPSEEK3_LLM", false, false},
    {"spark2_5", "SPARK2_5", false, false},
    {"youtu", "YOUTU", true, false},
    {"falcon", "FALCON", false, false},
    {"mpt", "MPT", false, false},
    {"starcoder", "STARCODER", false, false},
    {"gpt-2", "GPT2", false, false},
    {"phi-2", "GPT2", false, false},
    {"jina-es", "GPT2", false, false},
    {"jina-de", "GPT2", false, false},
    {"gigachat", "GPT2", false, false},
    {"jina-v2-es", "GPT2", false, false},
    {"jina-v2-de", "GPT2", false, false},
    {"a.x-4.0", "GPT2", false, false},
    {"mellum", "GPT2", false, false},
    {"modern-bert", "GPT2", false, false},
    {"jais-2", "JAIS2", false, false},
    {"gemma4", "GEMMA4", false, false},
    {"granite-embed-multi-311m", "GEMMA4", false, false},
    {"sarvam-moe", "SARVAM_MOE", false, false},
    {"jina-v1-en", "GPT2", false, false},
    {"jina-v2-code", "GPT2", false, false},
    {"roberta-bpe", "GPT2", false, false},
    {"whitespace", "WHITESPACE", false, false},
    {"refact", "REFACT", false, false},
    {"command-r", "COMMAND_R", false, false},
    {"qwen2", "QWEN2", false, false},
    {"deepseek-r1-qwen", "QWEN2", false, false},
    {"kormo", "QWEN2", false, false},
    {"f2llmv2", "QWEN2", false, false},
    {"qwen35", "QWEN35", false, false},
    {"stablelm2", "STABLELM2", false, false},
    {"olmo", "OLMO", false, false},
    {"dbrx", "DBRX", false, false},
    {"smaug-bpe", "SMAUG", false, false},
    {"poro-chat", "PORO", false, false},
    {"chatglm-bpe", "CHATGLM4", false, false},
    {"glm4", "CHATGLM4", true, false},
    {"glm5", "CHATGLM4", true, false},
    {"viking", "VIKING", false, false},
    {"jais", "JAIS", false, false},
    {"tekken", "TEKKEN", true, true},
    {"smollm", "SMOLLM", false, false},
    {"codeshell", "CODESHELL", false, false},
    {"bloom", "BLOOM", false, false},
    {"gpt3-finnish", "GPT3_FINNISH", false, false},
    {"exaone", "EXAONE", false, false},
    {"exaone4", "GPT2", false, false},
    {"exaone-moe", "EXAONE_MOE", false, false},
    {"chameleon", "CHAMELEON", false, true},
    {"minerva-7b", "MINERVA", false, false},
    {"megrez", "QWEN2", false, false},
    {"gpt-4o", "GPT4O", false, false},
    {"llama4", "GPT4O", false, false},
    {"kanana2", "GPT4O", false, false},
    {"talkie", "GPT4O", false, false},
    {"granite-embed-multi-97m", "GRANITE_EMB_MULTI", true, false},
    {"tiny_aya", "TINY_AYA", false, false},
    {"cohere2moe", "TINY_AYA", false, false},
    {"superbpe", "SUPERBPE", false, false},
    {"trillion", "TRILLION", false, false},
    {"granite-docling", "GRANITE_DOCLING", false, false},
    {"bailingmoe", "BAILINGMOE", false, false},
    {"bailingmoe2", "BAILINGMOE", false, false},
    {"llada-moe", "BAILINGMOE", false, false},
    {"seed-coder", "SEED_CODER", false, false},
    {"hunyuan", "HUNYUAN", false, false},
    {"hunyuan-dense", "HUNYUAN_DENSE", false, false},
    {"hy_v4", "HY_V4", false, false},
    {"joyai-llm", "JOYAI_LLM", false, false},
    {"kimi-k2", "KIMI_K2", false, false},
    {"ufakzeka", "UFAKZEKA", false, false},
    {"grok-2", "GROK_2", false, false},
    {"afmoe", "AFMOE", false, false},
    {"laguna", "LAGUNA", false, false},
    {"minimax-m2", "MINIMAX_M2", false, false},
    {"solar-open", "SOLAR_OPEN", false, false},
    {"mellum2", "MELLUM2", false, false},
};

const char* const kUnsupported[] = {"GEMMA4", "SARVAM_MOE", "WHITESPACE", "AFMOE", "SUPERBPE"};

const std::string& gpt2_pattern() {
    static const std::string p = families().at("GPT2").at(0) + "|\\s+";
    return p;
}

PreTokenizerSpec pretokenizer_for(const std::string& pre) {
    // "gpt2" is warden's own alias of llama.cpp's "gpt-2"; no name means llama.cpp's default.
    const std::string name = pre.empty() ? "default" : pre == "gpt2" ? "gpt-2" : pre;
    const PreName* found = nullptr;
    for (const PreName& n : kNames)
        if (name == n.name) found = &n;
    if (!found) {
        std::string all;
        for (const PreName& n : kNames) all += std::string(all.empty() ? "" : ", ") + n.name;
        throw util::Error("tokenizer: unknown pre-tokenizer '" + pre +
                          "' (tokenizer.ggml.pre); known: " + all);
    }
    const std::string family = found->family;
    for (const char* u : kUnsupported)
        if (family == u)
            throw util::Error(
                "tokenizer: pre-tokenizer '" + pre +
                "' (tokenizer.ggml.pre) is not supported by warden (see docs: tokenizers)");
    PreTokenizerSpec s;
    s.patterns =
        family == "KIMI_K2" ? std::vector<std::string>{kimi_pattern()} : families().at(family);
    s.ignore_merges = found->ignore_merges;
    s.add_bos = found->add_bos;
    return s;
}

}  // namespace warden::tokenizer::detail

namespace warden::tokenizer {

std::vector<std::string> pretokenizer_names() {
    std::vector<std::string> out = {"gpt2"};
    for (const detail::PreName& n : detail::kNames) out.emplace_back(n.name);
    return out;
}

PreTokenizerInfo pretokenizer_info(const std::string& pre_name) {
    auto s = detail::pretokenizer_for(pre_name);
    return {std::move(s.patterns), s.ignore_merges, s.add_bos};
}

}  // namespace warden::tokenizer
