// JSON Schema -> grammar: documents that validate are accepted, ones that do not are refused,
// and keywords that cannot be enforced are refused by name.
#include <gtest/gtest.h>

#include "constrain/json_schema.h"
#include "constrain/matcher.h"

namespace warden::constrain {
namespace {

using json = nlohmann::json;

bool accepts(const Grammar& g, std::string_view text) {
    Program p(g);
    MatchState s = p.initial();
    return p.advance(s, text) && s.can_accept();
}

struct Case {
    const char* schema;
    std::vector<const char*> valid, invalid;
};

TEST(JsonSchema, AcceptsExactlyTheValidDocuments) {
    const std::vector<Case> cases = {
        {R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"}},
             "required":["a"],"additionalProperties":false})",
         {R"({"a":1})", R"({"a": -3, "b": "x"})", "{\n  \"a\": 0\n}"},
         {R"({})", R"({"b":"x"})", R"({"a":1.5})", R"({"a":1,"c":2})", R"({"a":01})",
          R"({"b":"x","a":1})", R"({"a":1,"b":"x","a":1})", R"( {"a":1})"}},
        {R"({"type":"object","properties":{"x":{"type":"boolean"},"y":{"type":"null"},
             "z":{"type":"number"}}})",
         {"{}", R"({"x":true})", R"({"y":null})", R"({"z":1e5})", R"({"x":false,"z":-0.5})",
          R"({"x":true,"y":null,"z":2})"},
         {R"({"x":1})", R"({,"y":null})", R"({"x":true,})", R"({"z":.5})"}},
        {R"({"type":"array","items":{"enum":["a","b",3]},"minItems":1,"maxItems":2})",
         {R"(["a"])", R"([3, "b"])"},
         {"[]", R"(["a","b","a"])", R"(["c"])", R"([4])"}},
        {R"({"type":"string","minLength":2,"maxLength":3})",
         {R"("ab")", R"("a\"c")", R"("é\u00e9")"},
         {R"("a")", R"("abcd")", R"("a)"}},
        {R"({"type":"string","pattern":"^[A-Z]{2}-[0-9]+$"})",
         {R"("AB-1")", R"("XY-0123")"},
         {R"("A-1")", R"("AB-")", R"("ab-1")", R"("AB-1x")"}},
        {R"({"type":"string","pattern":"b+"})", {R"("abbc")", R"("b")"}, {R"("ac")"}},
        {R"({"anyOf":[{"type":"integer"},{"type":"array","items":{"type":"integer"}}]})",
         {"5", "[1, 2]"},
         {R"("5")", "[1.5]"}},
        {R"({"type":["string","null"]})", {R"("s")", "null"}, {"1"}},
        {R"({"const":{"k":[1,"two"]}})", {R"({"k":[1,"two"]})"}, {R"({"k":[1]})"}},
        {R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},
             "next":{"anyOf":[{"$ref":"#/$defs/node"},{"type":"null"}]}},
             "required":["v","next"],"additionalProperties":false}},
             "$ref":"#/$defs/node"})",
         {R"({"next":{"next":{"next":null,"v":3},"v":2},"v":1})"},
         {R"({"next":{"v":2},"v":1})"}},
        {R"({"type":"object","additionalProperties":{"type":"integer"}})",
         {"{}", R"({"any": 1, "other": 2})"},
         {R"({"any": "x"})"}},
        {R"({"type":"string","format":"date-time"})",
         {R"("2024-01-31T12:00:00Z")", R"("2024-01-31T12:00:00.5+01:00")"},
         {R"("2024-13-01T00:00:00Z")", R"("2024-01-31")"}},
        {"{}", {"1", R"({"a":[null,{"b":"c"}]})", "\"x\""}, {"{", "nul"}},
    };
    for (const auto& c : cases) {
        const Grammar g = json_schema_grammar(json::parse(c.schema));
        for (const char* v : c.valid) EXPECT_TRUE(accepts(g, v)) << c.schema << " on " << v;
        for (const char* v : c.invalid) EXPECT_FALSE(accepts(g, v)) << c.schema << " on " << v;
    }
}

TEST(JsonSchema, JsonObjectIsAnyObject) {
    const Grammar g = json_object_grammar();
    EXPECT_TRUE(accepts(g, R"({"a": [1, {"b": null}], "c": "d"})"));
    EXPECT_TRUE(accepts(g, "{}"));
    EXPECT_FALSE(accepts(g, "[]"));
    EXPECT_FALSE(accepts(g, "\"x\""));
}

TEST(JsonSchema, UnsupportedKeywordsAreRefusedByName) {
    const std::vector<std::pair<const char*, const char*>> cases = {
        {R"({"type":"integer","minimum":0})", "minimum"},
        {R"({"type":"array","items":{"type":"string"},"uniqueItems":true})", "uniqueItems"},
        {R"({"type":"object","properties":{"a":{"type":"string"}},"patternProperties":{}})",
         "patternProperties"},
        {R"({"type":"object","properties":{"a":{}},"additionalProperties":true})",
         "additionalProperties"},
        {R"({"type":"string","format":"email"})", "format"},
        {R"({"$ref":"https://example.com/s.json"})", "$ref"},
        {R"({"$ref":"#/$defs/missing"})", "$ref"},
        {R"({"type":"thing"})", "type"},
        {R"({"allOf":[{"type":"string"},{"maxLength":3}]})", "allOf"},
        {R"({"type":"object","properties":{"a":{}},"required":["b"]})", "required"},
        {R"({"type":"string","pattern":"(a)\\1"})", "pattern"},
        {R"({"not":{"type":"string"}})", "not"},
    };
    for (const auto& [schema, keyword] : cases) {
        try {
            json_schema_grammar(json::parse(schema));
            ADD_FAILURE() << "accepted " << schema;
        } catch (const SpecError& e) {
            EXPECT_EQ(e.keyword, keyword) << schema << ": " << e.what();
        }
    }
}

}  // namespace
}  // namespace warden::constrain
