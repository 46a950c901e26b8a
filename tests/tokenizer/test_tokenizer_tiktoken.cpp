// tiktoken.model loading (Kimi K2 layout): parser errors, special-token layout, tiktoken's
// rank BPE on hand-checked cases, Kimi's pre-tokenizer and long-run splitting, round trips.
// The comparison with the tiktoken package itself is tests/python/test_tiktoken.py.
#include <gtest/gtest.h>

#include "tok_test_util.h"
#include "tokenizer/regex_split.h"
#include "tokenizer/tiktoken.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace warden::tokenizer {
namespace {

using testing::expect_error;
using testing::TempDir;

std::string b64(const std::string& in) {
    static const char* tbl = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    size_t i = 0;
    for (; i + 2 < in.size(); i += 3) {
        const uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
        for (int k = 3; k >= 0; --k) out += tbl[(v >> (6 * k)) & 63];
    }
    if (in.size() - i == 1) {
        const uint32_t v = uint8_t(in[i]) << 16;
        out += tbl[(v >> 18) & 63];
        out += tbl[(v >> 12) & 63];
        out += "==";
    } else if (in.size() - i == 2) {
        const uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8);
        out += tbl[(v >> 18) & 63];
        out += tbl[(v >> 12) & 63];
        out += tbl[(v >> 6) & 63];
        out += '=';
    }
    return out;
}

// The 256 single bytes (rank = byte value) followed by `extra` in order.
std::string model_text(const std::vector<std::string>& extra) {
    std::string s;
    for (int b = 0; b < 256; ++b)
        s += b64(std::string(1, static_cast<char>(b))) + " " + std::to_string(b) + "\n";
    for (size_t i = 0; i < extra.size(); ++i)
        s += b64(extra[i]) + " " + std::to_string(256 + i) + "\n";
    return s;
}

const std::vector<std::string> kExtra = {"ab",    "bc", "abc", "he",   "ll",    "hell",
                                         "hello", " w", "or",  " wor", " world"};
constexpr int32_t kRanks = 256 + 11;

// A Kimi-style directory: ranks + tokenizer_config.json (ids as in Kimi K2 relative to the ranks).
std::string kimi_config(int32_t n, const std::string& extra = "",
                        const std::string& bos = "[BOS]") {
    auto e = [&](int off, const char* text) {
        // (appended piecewise: `"\"" + std::to_string(...)` trips a GCC 12 -Wrestrict false
        // positive)
        std::string out = "\"";
        out += std::to_string(n + off);
        out += "\":{\"content\":\"";
        out += text;
        out += "\",\"special\":true}";
        return out;
    };
    return R"({"auto_map":{"AutoTokenizer":["tokenization_kimi.TikTokenTokenizer",null]},)"
           R"("bos_token":")" +
           bos + R"(","eos_token":"[EOS]",)" + extra + R"("added_tokens_decoder":{)" +
           e(0, "[BOS]") + "," + e(1, "[EOS]") + "," + e(2, "<|im_end|>") + "," +
           e(3, "<|im_user|>") + "," + e(17, "<|im_middle|>") + "}}";
}

std::unique_ptr<Tokenizer> kimi_tok(const TempDir& d) {
    d.write("tiktoken.model", model_text(kExtra));
    d.write("tokenizer_config.json", kimi_config(kRanks));
    return Tokenizer::from_hf_dir(d.str());
}

TEST(Tiktoken, ParserErrorsNameFileAndLine) {
    using detail::parse_tiktoken_ranks;
    EXPECT_EQ(parse_tiktoken_ranks("YQ== 0\r\n\nYg== 1\n", "m"),
              (std::vector<std::string>{"a", "b"}));
    EXPECT_EQ(parse_tiktoken_ranks("YWI= 1\nYQ==\t0", "m"), (std::vector<std::string>{"a", "ab"}));
    expect_error([] { parse_tiktoken_ranks("YQ== 0\nY!== 1\n", "m"); },
                 "m:2: token 'Y!==' is not valid base64");
    expect_error([] { parse_tiktoken_ranks("YQ= 0\n", "m"); },
                 "m:1: token 'YQ=' is not valid base64");
    expect_error([] { parse_tiktoken_ranks("YQ=a 0\n", "m"); }, "not valid base64");
    expect_error([] { parse_tiktoken_ranks("YQ== 0\nYg== x1\n", "m"); },
                 "m:2: rank 'x1' is not a non-negative integer");
    expect_error([] { parse_tiktoken_ranks("YQ== -1\n", "m"); }, "m:1: rank '-1'");
    expect_error([] { parse_tiktoken_ranks("YQ== 99999999999\n", "m"); }, "rank '99999999999'");
    expect_error([] { parse_tiktoken_ranks("YQ== 0\nYg==\n", "m"); },
                 "m:2: expected \"<base64 token> <rank>\"");
    expect_error([] { parse_tiktoken_ranks("YQ== 0 7\n", "m"); }, "m:1: expected");
    expect_error([] { parse_tiktoken_ranks("YQ== 0\nYg== 0\n", "m"); },
                 "m:2: rank 0 repeats line 1");
    expect_error([] { parse_tiktoken_ranks("YQ== 0\nYQ== 1\n", "m"); },
                 "m:2: token bytes 'a' repeat line 1");
    expect_error([] { parse_tiktoken_ranks("YQ== 0\nYg== 2\n", "m"); },
                 "m:2: rank 2 leaves a gap: rank 1 is missing");
    expect_error([] { parse_tiktoken_ranks("\n\n", "m"); }, "m: no tokens");
}

TEST(Tiktoken, DirectoryErrors) {
    expect_error([] { Tokenizer::from_hf_dir("/nonexistent/dir"); }, "tokenizer.json not found");
    expect_error([] { detail::load_tiktoken_dir("/nonexistent/dir"); }, "tiktoken.model not found");
    {
        TempDir d;  // tiktoken.model alone: whose pre-tokenizer?
        d.write("tiktoken.model", model_text({}));
        expect_error([&] { Tokenizer::from_hf_dir(d.str()); },
                     "only Kimi's tiktoken pre-tokenizer is supported");
    }
    {
        TempDir d;
        d.write("tiktoken.model", "YQ== 0\nYg== 1\n");
        d.write("tokenizer_config.json", kimi_config(2));
        expect_error([&] { Tokenizer::from_hf_dir(d.str()); }, "byte 0x00 has no rank");
    }
    {
        TempDir d;
        d.write("tiktoken.model", model_text({}) + "@@@ 256\n");
        d.write("tokenizer_config.json", kimi_config(257));
        expect_error([&] { Tokenizer::from_hf_dir(d.str()); },
                     "tiktoken.model:257: token '@@@' is not valid base64");
    }
    {
        TempDir d;
        d.write("tiktoken.model", model_text({}));
        d.write("tokenizer_config.json", kimi_config(200));  // added ids collide with ranks
        expect_error([&] { Tokenizer::from_hf_dir(d.str()); },
                     "added token id 200 is outside the special-token range 256..513");
    }
    {
        TempDir d;
        d.write("tiktoken.model", model_text({}));
        d.write("tokenizer_config.json", kimi_config(256, "", "<s>"));
        expect_error([&] { Tokenizer::from_hf_dir(d.str()); },
                     "bos_token '<s>' is not a special token");
    }
    {
        TempDir d;
        d.write("tiktoken.model", model_text({}));
        d.write("tokenizer_config.json", "{oops");
        expect_error([&] { Tokenizer::from_hf_dir(d.str()); }, "not valid JSON");
    }
    {
        TempDir d;  // a tokenization_kimi.py whose pattern is not the one implemented
        d.write("tiktoken.model", model_text({}));
        d.write("tokenization_kimi.py", "pat_str = r\"\"\"\\p{L}+\"\"\"\n");
        expect_error([&] { Tokenizer::from_hf_dir(d.str()); },
                     "is not the Kimi pattern warden implements");
    }
}

TEST(Tiktoken, SpecialTokenLayoutLikeTokenizationKimi) {
    TempDir d;
    auto tok = kimi_tok(d);
    EXPECT_EQ(tok->kind(), "tiktoken BPE (pre: kimi)");
    EXPECT_EQ(tok->vocab_size(), kRanks + 258);  // num_reserved_special_tokens + 2
    EXPECT_EQ(tok->bos_id(), kRanks);
    EXPECT_EQ(tok->eos_id(), kRanks + 1);
    EXPECT_FALSE(tok->add_bos_default());  // Kimi's encode() adds no BOS
    EXPECT_EQ(tok->encode("hello", true), std::vector<int32_t>{256 + 6});
    EXPECT_EQ(tok->stop_ids(),
              (std::vector<int32_t>{kRanks + 1, kRanks + 2}));  // [EOS], <|im_end|>
    EXPECT_TRUE(tok->is_special(kRanks + 17));
    EXPECT_FALSE(tok->is_special(kRanks - 1));
    EXPECT_EQ(tok->token_bytes(kRanks + 17), "<|im_middle|>");
    EXPECT_EQ(tok->token_bytes(kRanks + 5),
              "<|reserved_token_" + std::to_string(kRanks + 5) + "|>");
    EXPECT_EQ(tok->token_bytes(kRanks + 257),
              "<|reserved_token_" + std::to_string(kRanks + 257) + "|>");
    const std::string chat =
        "<|im_user|>hello<|im_middle|><|reserved_token_" + std::to_string(kRanks + 9) + "|>[EOS]";
    const std::vector<int32_t> ids = {kRanks + 3, 256 + 6, kRanks + 17, kRanks + 9, kRanks + 1};
    EXPECT_EQ(tok->encode(chat, false), ids);
    EXPECT_EQ(tok->decode(ids), chat);
    // parse_special=false: the same text as ordinary bytes.
    const auto plain = tok->encode(chat, false, false);
    EXPECT_EQ(plain.size(), 52u);  // 56 bytes; only "hello" merges (5 -> 1)
    for (int32_t id : plain) EXPECT_LT(id, kRanks);
    EXPECT_EQ(tok->decode(plain), chat);
    EXPECT_EQ(tok->encode("[BOS]", false), std::vector<int32_t>{kRanks});

    TempDir d2;  // add_bos_token in the config is honoured
    d2.write("tiktoken.model", model_text(kExtra));
    d2.write("tokenizer_config.json", kimi_config(kRanks, R"("add_bos_token":true,)"));
    auto tok2 = Tokenizer::from_hf_dir(d2.str());
    EXPECT_EQ(tok2->encode("hello", true), (std::vector<int32_t>{kRanks, 256 + 6}));
}

TEST(Tiktoken, RankBpeMergesLowestRankConcatenation) {
    TempDir d;
    auto tok = kimi_tok(d);
    // A pre-token that is a rank is one token.
    EXPECT_EQ(tok->encode("abc", false), std::vector<int32_t>{256 + 2});
    // "abcd": ab(256) < bc(257) merges first; then "ab"+"c" = "abc" is a rank (258) although no
    // merge rule names that pair: tiktoken ranks concatenations, not pairs.
    EXPECT_EQ(tok->encode("abcd", false), (std::vector<int32_t>{256 + 2, 'd'}));
    // "xbcab": bc(257) and ab(256) -> ab first, then bc -> [x, bc, ab].
    EXPECT_EQ(tok->encode("xbcab", false), (std::vector<int32_t>{'x', 256 + 1, 256}));
    // "hellos": he(259), ll(260), then "he"+"ll" = hell(261), then hell+o = hello(262).
    EXPECT_EQ(tok->encode("hellos", false), (std::vector<int32_t>{256 + 6, 's'}));
    EXPECT_EQ(tok->encode("hello world", false), (std::vector<int32_t>{256 + 6, 256 + 10}));
    EXPECT_EQ(tok->encode("hello worlds", false),
              (std::vector<int32_t>{256 + 6, 256 + 9, 'l', 'd', 's'}));
}

TEST(Tiktoken, RoundTripIncludingInvalidUtf8) {
    TempDir d;
    auto tok = kimi_tok(d);
    for (const std::string& s : {std::string("hello world 中文abc\n\n  x"),
                                 std::string("\xff\xfe"
                                             "ab\xc3"),
                                 std::string("a\xe4\xb8"
                                             " bc"),
                                 std::string(" \t\r\n"), std::string("")}) {
        const auto ids = tok->encode(s, false);
        EXPECT_EQ(tok->decode(ids), s) << testing::escaped(s);
        for (int32_t id : ids) EXPECT_LT(id, kRanks);
    }
}

TEST(Tiktoken, LongRunsAreCutAt25000CharactersLikeKimi) {
    TempDir d;
    auto tok = kimi_tok(d);
    // 25,001 letters: Kimi cuts after 25,000, so the final "ab" is split across two pieces.
    const std::string s = std::string(25000, 'a') + "b";
    const auto ids = tok->encode(s, false);
    ASSERT_EQ(ids.size(), 25001u);
    EXPECT_EQ(ids.back(), 'b');
    // 24,998 letters + "ab" (25,000 characters): one piece, "ab" merges.
    const auto ids2 = tok->encode(std::string(24998, 'a') + "ab", false);
    ASSERT_EQ(ids2.size(), 24999u);
    EXPECT_EQ(ids2.back(), 256);
    // Whitespace runs are counted with str.isspace(): U+3000 is one space character.
    std::string sp;
    for (int i = 0; i < 25001; ++i) sp += "\xe3\x80\x80";
    EXPECT_EQ(tok->decode(tok->encode(sp + "ab", false)), sp + "ab");
}

TEST(Tiktoken, KimiPreTokenizer) {
    detail::RegexSplitter split({detail::kimi_pattern()});
    using V = std::vector<std::string_view>;
    EXPECT_EQ(split.split("Hello世界World 中文abc"),
              (V{"Hello", "世界", "World", " ", "中文", "abc"}));
    // Han runs stop at non-Han letters and at U+3001 (Common script, Han only in
    // Script_Extensions).
    EXPECT_EQ(split.split("中文、日本ひらがな"), (V{"中文", "、", "日本", "ひらがな"}));
    EXPECT_EQ(split.split("HTTPServer don't WE'LL"), (V{"HTTPServer", " don't", " WE'LL"}));
    EXPECT_EQ(split.split("CamelCase"), (V{"Camel", "Case"}));
    EXPECT_EQ(split.split("12345 x"), (V{"123", "45", " x"}));
    EXPECT_EQ(split.split("a  \n\n b"), (V{"a", "  \n\n", " b"}));
    EXPECT_EQ(split.split("x   y"), (V{"x", "  ", " y"}));
    EXPECT_EQ(split.split("...!?\n\nok"), (V{"...!?\n\n", "ok"}));
    // U+180E is not White_Space for Rust's \s (PCRE2's \s would take it): as tiktoken splits it.
    EXPECT_EQ(split.split("x\u180e y \u180e\u180ez"),
              (V{"x", "\u180e", " y", " \u180e\u180e", "z"}));
    // Long words of each letter class are one piece (no per-character group on the JIT stack).
    std::string hira;
    for (int i = 0; i < 25000; ++i) hira += "\xe3\x81\xb2";
    for (const std::string& w : {std::string(25000, 'a'), std::string(25000, 'A'), hira})
        EXPECT_EQ(split.split(w), V{w});
}

}  // namespace
}  // namespace warden::tokenizer
