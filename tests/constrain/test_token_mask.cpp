// Token masks against a brute-force reference: a token is allowed exactly when its bytes, fed
// to the recognizer from the state one by one, keep it alive. Checked on a made-up vocabulary
// (multi-byte characters split across tokens) and on real vocabularies (byte-level BPE and
// SentencePiece), at every state along valid documents.
#include <gtest/gtest.h>

#include <cmath>

#include "constrain/constraint.h"
#include "constrain/gbnf.h"
#include "constrain/json_schema.h"
#include "constrain/regex.h"
#include "formats/gguf_file.h"
#include "test_paths.h"
#include "tokenizer/tokenizer.h"

namespace warden::constrain {
namespace {

TokenMask brute_force(const CompiledGrammar& g, const MatchState& s) {
    const Vocabulary& v = g.vocab();
    TokenMask m((static_cast<size_t>(v.size()) + 63) / 64, 0);
    std::vector<int32_t> usable = v.sorted();
    for (int32_t id : usable) {
        MatchState t = s;
        if (g.program().advance(t, v.bytes(id)))
            m[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63);
    }
    return m;
}

// Walks `doc` byte by byte; at every boundary compares the trie mask with the reference.
void check_along(const CompiledGrammar& g, const std::string& doc, size_t stride = 1) {
    MatchState s = g.program().initial();
    for (size_t i = 0; i <= doc.size(); ++i) {
        if (i % stride == 0 || i == doc.size()) {
            const TokenMask fast = g.compute_mask(s);
            const TokenMask ref = brute_force(g, s);
            ASSERT_EQ(fast, ref) << "at byte " << i << " of " << doc;
            ASSERT_EQ(*g.mask(s), ref);  // cached copy too
        }
        if (i == doc.size()) break;
        MatchState next;
        ASSERT_TRUE(g.program().advance_byte(s, static_cast<uint8_t>(doc[i]), next))
            << "the document leaves the grammar at byte " << i;
        s = std::move(next);
    }
    EXPECT_TRUE(s.can_accept());
}

TEST(TokenMask, MadeUpVocabularyMatchesBruteForce) {
    std::vector<std::string> toks = {
        "{",  "}",    "\"",   "\"a",      "a\"",      ":",    ",",    " ",    "\n",  "  ",
        "1",  "12",   "-",    ".5",       "true",     "tr",   "ue",   "null", "[",   "]",
        "],", "\xC3", "\xA9", "\xC3\xA9", "\xE2\x82", "\xAC", "é\"",  "\\",   "\\n", "\\u00",
        "e9", "{\"",  "\":",  "\",\"",    "abc",      "x",    "<eos>"};
    auto vocab = std::make_shared<const Vocabulary>(toks, std::vector<int32_t>{36});
    const auto schema = nlohmann::json::parse(
        R"({"type":"object","properties":{"a":{"type":"string"},"b":{"type":"array",
            "items":{"type":"number"}},"c":{"enum":[true,null,"x"]}},"required":["a"]})");
    auto g = compile(json_schema_grammar(schema), vocab);
    check_along(*g, R"({"a": "é€\n\u00e9", "b": [1, -12.5, 0], "c": null})");
    check_along(*g, "{\"a\":\"\"}\n  ");
}

std::shared_ptr<const Vocabulary> load_vocab(const std::string& path) {
    formats::GGUFFile f(path);
    auto tok = tokenizer::Tokenizer::from_gguf(f);
    return std::make_shared<const Vocabulary>(*tok);
}

TEST(TokenMask, RealVocabularyMatchesBruteForce) {
    auto vocab = load_vocab(test::default_model());
    const auto schema = nlohmann::json::parse(R"({
        "type":"object",
        "properties":{"name":{"type":"string","maxLength":20},
                      "age":{"type":"integer"},
                      "tags":{"type":"array","items":{"type":"string"},"maxItems":3},
                      "kind":{"enum":["cat","dog"]}},
        "required":["name","age","tags","kind"],"additionalProperties":false})");
    auto g = compile(json_schema_grammar(schema), vocab);
    check_along(*g, R"({"age": -42, "kind": "dog", "name": "Ünïcode ☃", "tags": ["a", "b"]})", 3);
    auto r = compile(regex_grammar("[0-9]{3}-[A-Z][a-z]+( [A-Z][a-z]+)?"), vocab);
    check_along(*r, "555-Hello World");
}

TEST(TokenMask, SentencePieceVocabularyAndTheFirstToken) {
    formats::GGUFFile f(test::shared_dir() + "/testdata/tokenizer/ggml-vocab-llama-spm.gguf");
    auto tok = tokenizer::Tokenizer::from_gguf(f);
    auto vocab = std::make_shared<const Vocabulary>(*tok);
    ASSERT_FALSE(vocab->start_pieces().empty());  // "▁x" tokens lose the space at the start
    auto g = compile(choice_grammar({"Paris", "London"}), vocab);
    check_along(*g, "London", 2);
    // At the start, the allowed tokens are those whose *start* text fits.
    Constraint c(g);
    std::vector<float> logits(static_cast<size_t>(vocab->size()), 0.0f);
    const std::vector<int32_t> stop = tok->stop_ids();
    ASSERT_TRUE(c.apply(logits, stop));
    for (int32_t id = 0; id < vocab->size(); ++id) {
        const bool allowed = std::isfinite(logits[static_cast<size_t>(id)]);
        ASSERT_EQ(allowed, c.allows(id, stop)) << id;
        if (allowed) {
            const std::string t = tok->token_piece(id, true);
            EXPECT_TRUE(std::string("Paris").rfind(t, 0) == 0 ||
                        std::string("London").rfind(t, 0) == 0)
                << "token " << id << " '" << t << "'";
        }
    }
    const auto ids = tok->encode("London", false);
    for (int32_t id : ids) {
        ASSERT_TRUE(c.allows(id, stop));
        ASSERT_TRUE(c.accept(id));
    }
    EXPECT_TRUE(c.must_stop());
}

TEST(Constraint, StopTokensOnlyWhenComplete) {
    std::vector<std::string> toks = {"a", "b", "ab", "<eos>", "<end>"};
    auto vocab = std::make_shared<const Vocabulary>(toks, std::vector<int32_t>{3, 4});
    auto g = compile(parse_gbnf("root ::= \"a\" \"b\"?"), vocab);
    Constraint c(g);
    const std::vector<int32_t> stop = {3};
    std::vector<float> l(5, 1.0f);
    ASSERT_TRUE(c.apply(l, stop));
    EXPECT_EQ(l, (std::vector<float>{1, -INFINITY, 1, -INFINITY, -INFINITY}));
    EXPECT_FALSE(c.allows(3, stop));
    ASSERT_TRUE(c.accept(0));
    EXPECT_TRUE(c.can_stop());
    EXPECT_FALSE(c.must_stop());
    l.assign(5, 2.0f);
    ASSERT_TRUE(c.apply(l, stop));
    // "b" or the request's stop token; <end> is a stop token of the vocabulary the request
    // does not stop on (ignore_eos style): never allowed.
    EXPECT_EQ(l, (std::vector<float>{-INFINITY, 2, -INFINITY, 2, -INFINITY}));
    EXPECT_FALSE(c.accept(0));  // refused, state unchanged
    ASSERT_TRUE(c.accept(1));
    EXPECT_TRUE(c.must_stop());
    l.assign(5, 0.5f);
    ASSERT_TRUE(c.apply(l, stop));
    EXPECT_EQ(l, (std::vector<float>{-INFINITY, -INFINITY, -INFINITY, 0.5f, -INFINITY}));
    // With no stop token to end on, nothing at all may follow.
    EXPECT_FALSE(c.apply(l, {}));
}

TEST(Constraint, CompileSharesEqualGrammars) {
    std::vector<std::string> toks = {"a", "b"};
    auto vocab = std::make_shared<const Vocabulary>(toks, std::vector<int32_t>{});
    auto g1 = compile(choice_grammar({"a", "b"}), vocab);
    auto g2 = compile(choice_grammar({"a", "b"}), vocab);
    auto g3 = compile(choice_grammar({"a"}), vocab);
    EXPECT_EQ(g1.get(), g2.get());
    EXPECT_NE(g1.get(), g3.get());
}

}  // namespace
}  // namespace warden::constrain
