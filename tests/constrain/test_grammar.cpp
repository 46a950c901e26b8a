// The GBNF parser and the recognizer: which texts a grammar accepts, checked against hand-made
// expectations and, for regexes, against std::regex on generated strings.
#include <gtest/gtest.h>

#include <random>
#include <regex>

#include "constrain/gbnf.h"
#include "constrain/json_schema.h"
#include "constrain/matcher.h"
#include "constrain/regex.h"

namespace warden::constrain {
namespace {

// Whether the whole text is a sentence of g.
bool accepts(const Grammar& g, std::string_view text) {
    Program p(g);
    MatchState s = p.initial();
    return p.advance(s, text) && s.can_accept();
}

// Whether text is a prefix of some sentence of g.
bool live_prefix(const Grammar& g, std::string_view text) {
    Program p(g);
    MatchState s = p.initial();
    return p.advance(s, text);
}

TEST(Gbnf, LiteralsClassesAndRepetition) {
    const Grammar g = parse_gbnf(R"(
        root ::= "a" [b-d]+ x? ("!" | "?"){1,2}   # a comment
        x ::= [^0-9!?]
    )");
    EXPECT_TRUE(accepts(g, "ab!"));
    EXPECT_TRUE(accepts(g, "abcdz??"));
    EXPECT_FALSE(accepts(g, "a!"));
    EXPECT_FALSE(accepts(g, "ab5!"));
    EXPECT_FALSE(accepts(g, "ab!!!"));
    EXPECT_TRUE(live_prefix(g, "abc"));
    EXPECT_FALSE(accepts(g, "abc"));
}

TEST(Gbnf, RecursionNestsArbitrarilyDeep) {
    const Grammar g = parse_gbnf(R"g(root ::= "(" root ")" | "x")g");
    std::string s = "x";
    for (int i = 0; i < 200; ++i) s = "(" + s + ")";
    EXPECT_TRUE(accepts(g, s));
    EXPECT_FALSE(accepts(g, s + ")"));
    EXPECT_FALSE(accepts(g, "(" + s));
    EXPECT_TRUE(live_prefix(g, "(" + s));
}

TEST(Gbnf, MultiByteCodePointsAndEscapes) {
    const Grammar g = parse_gbnf("root ::= [α-ω]+ \"\\u00e9\" \"\\n\"");
    EXPECT_TRUE(accepts(g, "αβγé\n"));
    EXPECT_FALSE(accepts(g, "abé\n"));
    // A prefix that stops inside a code point is live only if the code point can match.
    EXPECT_TRUE(live_prefix(g, std::string("\xCE", 1)));   // first byte of α..ω
    EXPECT_FALSE(live_prefix(g, std::string("\xE4", 1)));  // starts U+4000..U+4FFF
    const Grammar ascii = parse_gbnf("root ::= [a-z]+");
    EXPECT_FALSE(live_prefix(ascii, std::string("\xE0", 1)));  // overlong forms only
    EXPECT_FALSE(live_prefix(ascii, std::string("\xC1", 1)));
    EXPECT_FALSE(live_prefix(g, std::string("\xCE\xB1\xFF", 3)));  // invalid UTF-8
}

TEST(Gbnf, Errors) {
    auto refused = [](const char* text) {
        try {
            parse_gbnf(text);
        } catch (const SpecError& e) {
            return std::string(e.what());
        }
        return std::string();
    };
    EXPECT_NE(refused("root ::= x"), "");                   // undefined rule
    EXPECT_NE(refused("foo ::= \"a\""), "");                // no root
    EXPECT_NE(refused("root ::= root \"a\" | \"b\""), "");  // left recursion
    EXPECT_NE(refused("root ::= \"a"), "");                 // unterminated
    EXPECT_NE(refused("root ::= [b-a]"), "");               // reversed range
    EXPECT_NE(refused("root ::= \"a\"{3,2}"), "");
    EXPECT_NE(refused("root ::= \"a\" root"), "");  // no finite sentence
    EXPECT_NE(refused("root ::= <[1000]>"), "");    // token elements
    EXPECT_NE(refused("root ::= (\"a\" | \"b\""), "");
}

TEST(Gbnf, ToGbnfRoundTrips) {
    const Grammar g = json_schema_grammar(nlohmann::json::parse(
        R"({"type":"object","properties":{"a":{"type":"string","pattern":"^x[0-9]{2}$"},
            "b":{"type":"array","items":{"type":"integer"}}},"required":["a"]})"));
    const Grammar h = parse_gbnf(g.to_gbnf());
    for (const char* t : {R"({"a":"x12"})", R"({"a": "x12", "b": [1, -2]})", R"({"b":[]})",
                          R"({"a":"x1"})", R"({"a":"x12","c":1})"})
        EXPECT_EQ(accepts(g, t), accepts(h, t)) << t;
    EXPECT_TRUE(accepts(g, R"({"a":"x12"})"));
    EXPECT_FALSE(accepts(g, R"({"b":[]})"));
}

TEST(Composition, ToolCallWrappedInLiteralText) {
    const Grammar args = json_schema_grammar(nlohmann::json::parse(
        R"({"type":"object","properties":{"city":{"type":"string"}},"required":["city"],
            "additionalProperties":false})"));
    const Grammar call = sequence({literal("<tool_call>\n"), args, literal("\n</tool_call>")});
    const Grammar calls = repeat(call, 1, -1);
    EXPECT_TRUE(accepts(call, "<tool_call>\n{\"city\": \"Paris\"}\n</tool_call>"));
    EXPECT_FALSE(accepts(call, "<tool_call>\n{\"town\": \"Paris\"}\n</tool_call>"));
    EXPECT_TRUE(accepts(calls,
                        "<tool_call>\n{\"city\":\"A\"}\n</tool_call><tool_call>\n{\"city\":"
                        "\"B\"}\n</tool_call>"));
    EXPECT_FALSE(accepts(calls, ""));
    const Grammar either = alternatives({literal("yes"), call});
    EXPECT_TRUE(accepts(either, "yes"));
    EXPECT_TRUE(accepts(parse_gbnf(either.to_gbnf()), "yes"));
}

// Every string over a small alphabet up to length 5, and random longer ones: the grammar of a
// regex accepts exactly what std::regex_match (ECMAScript) accepts.
TEST(Regex, AgreesWithStdRegex) {
    const std::vector<std::string> patterns = {
        "a*b",  "(ab|c)+", "[a-c]{2,3}", "a?b?c?", "(a|b)*c", "[^a]b*",
        "\\d+", "a{2}",    "(?:ab){1,}", "a.c",    "[abc]+?", "(a(b|c))*",
        "^ab$", "\\w\\W?", "a|b|",       "[a-]+",  "x\\.y",   "(?P<n>a)b",
    };
    const std::string alphabet = "abcx.-1_ ";
    std::mt19937 rng(7);
    for (const auto& pat : patterns) {
        const Grammar g = regex_grammar(pat);
        Program prog(g);
        std::string ecma = pat;
        if (ecma.rfind("(?P<n>", 0) == 0) ecma = "(" + ecma.substr(6);
        const std::regex ref(ecma);
        std::vector<std::string> inputs = {""};
        for (size_t i = 0; i < inputs.size() && inputs.size() < 4000; ++i)
            if (inputs[i].size() < 4)
                for (char c : alphabet) inputs.push_back(inputs[i] + c);
        for (int k = 0; k < 300; ++k) {
            std::string s;
            const int n = static_cast<int>(rng() % 10);
            for (int j = 0; j < n; ++j) s += "abc"[rng() % 3];
            inputs.push_back(s);
        }
        for (const auto& in : inputs) {
            MatchState s = prog.initial();
            const bool mine = prog.advance(s, in) && s.can_accept();
            ASSERT_EQ(mine, std::regex_match(in, ref))
                << "pattern " << pat << " input '" << in << "'";
        }
    }
}

TEST(Regex, UnsupportedConstructsAreRefused) {
    for (const char* re : {"(a)\\1", "(?=a)", "(?<=a)b", "\\bword", "a++", "[[:alpha:]]", "a)",
                           "(a", "a**", "a{2,1}", "\\p{L}"})
        EXPECT_THROW(regex_grammar(re), SpecError) << re;
}

}  // namespace
}  // namespace warden::constrain
