// The token-mask walk on the transition memo (transition_memo.h) and the mask cache against the
// walk that runs the matcher at every trie node with neither (CompiledGrammar::reference_mask),
// itself checked against a per-token brute force in test_token_mask.cpp. The memo is shared by
// every state of a grammar, so the states are visited in an order where later walks reuse what
// earlier ones stored: every position of bounded strings (each a distinct state), array items
// at each count, UTF-8 code points split across tokens (states inside a code point), and memos
// too small for one walk (the fallback) or for several (starting over).
#include <gtest/gtest.h>

#include "constrain/constraint.h"
#include "constrain/json_schema.h"
#include "constrain/mask_counters.h"
#include "constrain/regex.h"
#include "formats/gguf_file.h"
#include "test_paths.h"
#include "tokenizer/tokenizer.h"

namespace warden::constrain {
namespace {

// At every `stride`-th byte boundary of `doc` (and at its end), the memo walk and the cached
// mask equal the reference walk. Returns the number of states compared.
int compare_along(const CompiledGrammar& g, const std::string& doc, size_t stride) {
    MatchState s = g.program().initial();
    int n = 0;
    for (size_t i = 0; i <= doc.size(); ++i) {
        if (i % stride == 0 || i == doc.size()) {
            const TokenMask ref = g.reference_mask(s);
            EXPECT_EQ(g.compute_mask(s), ref) << "memo walk at byte " << i << " of " << doc;
            EXPECT_EQ(*g.mask(s), ref) << "cached mask at byte " << i << " of " << doc;
            ++n;
        }
        if (i == doc.size()) break;
        MatchState next;
        EXPECT_TRUE(g.program().advance_byte(s, static_cast<uint8_t>(doc[i]), next))
            << "the document leaves the grammar at byte " << i;
        s = std::move(next);
    }
    return n;
}

std::shared_ptr<const Vocabulary> default_vocab() {
    static auto v = [] {
        formats::GGUFFile f(test::default_model());
        auto tok = tokenizer::Tokenizer::from_gguf(f);
        return std::make_shared<const Vocabulary>(*tok);
    }();
    return v;
}

const char* kPerson = R"({"type":"object","properties":{
    "name":{"type":"string","maxLength":12},"age":{"type":"integer"},
    "email":{"type":"string","minLength":3,"maxLength":40},
    "skills":{"type":"array","items":{"type":"string","maxLength":6},"maxItems":3},
    "employed":{"type":"boolean"}},
    "required":["name","age","email","skills","employed"],"additionalProperties":false})";

TEST(MaskMemo, BoundedStringsAndArraysOnARealVocabulary) {
    const auto g = std::make_shared<const CompiledGrammar>(
        json_schema_grammar(nlohmann::json::parse(kPerson)), default_vocab());
    int n = 0;
    // Every position of every bounded string up to and past its maximum, both ends of the
    // length range, each array count; the second document revisits states the first stored.
    n += compare_along(
        *g,
        R"({"age": -7, "email": "abc", "employed": true, "name": "Zoë Ünïcode", "skills": ["a", "€€", "xyzxyz"]})",
        1);
    n += compare_along(
        *g,
        R"({"age": 0, "email": "a.very.long.address@example.com.invalid", "employed": false, "name": "abcdefghijkl", "skills": []})",
        2);
    EXPECT_GT(n, 150);
}

TEST(MaskMemo, JsonObjectRegexAndMultiByteSetsOnARealVocabulary) {
    const auto v = default_vocab();
    const auto obj = std::make_shared<const CompiledGrammar>(json_object_grammar(), v);
    compare_along(*obj, R"({"a": [[1, {"b": "\u00e9\n"}], null], "c": {"d": -1.5e3}})", 3);
    // Sets of non-ASCII code points: states inside a code point refuse or keep its prefix.
    const auto re =
        std::make_shared<const CompiledGrammar>(regex_grammar("[à-ÿ]{1,4}(-[α-ω]+)?[0-9]{2,3}"), v);
    compare_along(*re, "éàÿ-λμ12", 1);
    compare_along(*re, "ÿ907", 1);
}

TEST(MaskMemo, MemoTooSmallFallsBackOrStartsOver) {
    const auto schema = nlohmann::json::parse(kPerson);
    const std::string doc =
        R"({"age": 12, "email": "bob@x.io", "employed": true, "name": "Bob", "skills": ["go"]})";
    // Room for no state: no walk fits (reference walk every time). For about 40: walks fit,
    // but the memo fills along the document and starts over.
    for (size_t cap : {size_t{1}, size_t{40 * 256}}) {
        const auto g = std::make_shared<const CompiledGrammar>(json_schema_grammar(schema),
                                                               default_vocab(), cap);
        compare_along(*g, doc, 4);
    }
}

TEST(MaskMemo, MadeUpVocabularyWithSplitCodePoints) {
    // Tokens that end inside a code point and tokens that start inside one.
    std::vector<std::string> toks = {"\"",       "\xC3",     "\xA9",     "\xC3\xA9", "\xE2",
                                     "\xE2\x82", "\x82\xAC", "\xAC",     "\xAC\"",   "a",
                                     "ab",       "abc",      "abcd",     "\\",       "\\u",
                                     "00e9",     "\"\xC3",   "\xF0\x9F", "\x98\x80", "<eos>"};
    auto vocab = std::make_shared<const Vocabulary>(toks, std::vector<int32_t>{19});
    const auto schema = nlohmann::json::parse(R"({"type":"string","maxLength":5})");
    // Room for nothing, for one state at a boundary but none inside a code point, for all.
    for (size_t cap : {size_t{1}, size_t{300}, TransitionMemo::kDefaultMaxEntries}) {
        const auto g =
            std::make_shared<const CompiledGrammar>(json_schema_grammar(schema), vocab, cap);
        compare_along(*g, "\"é€\\u00e9😀\"", 1);
        compare_along(*g, "\"abcde\"", 1);
    }
}

TEST(MaskMemo, CountersCountHitsAndMisses) {
    const auto g = std::make_shared<const CompiledGrammar>(
        json_schema_grammar(nlohmann::json::parse(R"({"type":"string","maxLength":3})")),
        default_vocab());
    const MaskCounters before = mask_counters();
    MatchState s = g->program().initial();
    (void)g->mask(s);  // a miss
    (void)g->mask(s);  // a hit
    ASSERT_TRUE(g->program().advance(s, "\"a"));
    (void)g->mask(s);  // a miss
    const MaskCounters after = mask_counters();
    EXPECT_EQ(after.hits - before.hits, 1u);
    EXPECT_EQ(after.misses - before.misses, 2u);
    EXPECT_GT(after.miss_seconds, before.miss_seconds);
}

}  // namespace
}  // namespace warden::constrain
