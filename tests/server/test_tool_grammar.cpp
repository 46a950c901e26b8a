// The grammars of tool_choice required / named (src/server/tool_grammar.cpp): for each format,
// the text the family's real chat template renders for a call is a sentence of the grammar, the
// tool-call parser reads the call back from it, and calls the choice does not allow are refused.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "chat_output/chat_output.h"
#include "constrain/matcher.h"
#include "server/api_error.h"
#include "server/tool_grammar.h"

namespace {

using json = nlohmann::json;
using warden::server::tool_call_grammar;
namespace cg = warden::constrain;
namespace co = warden::chat_output;

const json kTools = json::parse(R"([
  {"type": "function", "function": {"name": "get_weather",
   "parameters": {"type": "object", "properties": {"city": {"type": "string"},
     "days": {"type": "integer"}}, "required": ["city"]}}},
  {"type": "function", "function": {"name": "web_search",
   "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}}
])");

bool accepts(const cg::Grammar& g, const std::string& text) {
    g.validate();
    const cg::Program prog(g);
    cg::MatchState st = prog.initial();
    return prog.advance(st, text) && st.can_accept();
}

struct Case {
    const char* parser;
    std::string weather;  // a get_weather call as the family's template writes it
    std::string search;   // a web_search call
    std::string two;      // two calls, as the template writes them
};

const Case kCases[] = {
    {"hermes",
     "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": "
     "2}}\n</tool_call>",
     "<tool_call>\n{\"name\": \"web_search\", \"arguments\": {\"query\": \"cats\"}}\n</tool_call>",
     "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
     "\"Paris\"}}\n</tool_call>\n"
     "<tool_call>\n{\"name\": \"web_search\", \"arguments\": {\"query\": \"cats\"}}\n</tool_call>"},
    {"llama3_json",
     "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"days\": 2}}",
     "{\"name\": \"web_search\", \"parameters\": {\"query\": \"cats\"}}",
     "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}; "
     "{\"name\": \"web_search\", \"parameters\": {\"query\": \"cats\"}}"},
    {"glm45",
     "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
     "<arg_key>days</arg_key>\n<arg_value>2</arg_value></tool_call>",
     "<tool_call>web_search\n<arg_key>query</arg_key>\n<arg_value>cats</arg_value></tool_call>",
     "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value></tool_call>\n"
     "<tool_call>web_search\n<arg_key>query</arg_key>\n<arg_value>cats</arg_value></tool_call>"},
    {"deepseek_v31",
     "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Paris\", "
     "\"days\": 2}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
     "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>web_search<｜tool▁sep｜>{\"query\": "
     "\"cats\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
     "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": "
     "\"Paris\"}<｜tool▁call▁end｜>"
     "<｜tool▁call▁begin｜>web_search<｜tool▁sep｜>{\"query\": "
     "\"cats\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"},
    {"kimi_k2",
     "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_"
     "begin|>{\"city\": \"Paris\", \"days\": 2}<|tool_call_end|><|tool_calls_section_end|>",
     "<|tool_calls_section_begin|><|tool_call_begin|>functions.web_search:0<|tool_call_argument_"
     "begin|>{\"query\": \"cats\"}<|tool_call_end|><|tool_calls_section_end|>",
     ""},
};

TEST(ToolGrammar, AcceptsTheFormatsCallsAndRefusesOthers) {
    for (const auto& c : kCases) {
        const auto any = tool_call_grammar(c.parser, kTools, "", false);
        EXPECT_TRUE(accepts(any, c.weather)) << c.parser;
        EXPECT_TRUE(accepts(any, c.search)) << c.parser;
        const auto named = tool_call_grammar(c.parser, kTools, "web_search", false);
        EXPECT_FALSE(accepts(named, c.weather)) << c.parser;
        EXPECT_TRUE(accepts(named, c.search)) << c.parser;
        // Arguments outside the schema: a wrong type.
        std::string wrong_type = c.weather;
        wrong_type.replace(wrong_type.find('2'), 1, "\"two\"");
        EXPECT_FALSE(accepts(any, wrong_type)) << c.parser << ": " << wrong_type;
        if (!c.two.empty()) {
            EXPECT_FALSE(accepts(any, c.two)) << c.parser << " (one call only)";
            EXPECT_TRUE(accepts(tool_call_grammar(c.parser, kTools, "", true), c.two)) << c.parser;
        }
        // What the grammar allows is what the parser reads back.
        co::ChatOutputParser p(nullptr, co::make_tool_parser(c.parser, kTools), true);
        const co::ParsedOutput got = co::parse_whole(p, c.weather);
        ASSERT_EQ(got.calls.size(), 1u) << c.parser;
        EXPECT_EQ(got.calls[0].name, "get_weather");
        EXPECT_EQ(json::parse(got.calls[0].arguments), json({{"city", "Paris"}, {"days", 2}}));
        EXPECT_EQ(got.content, "");
    }
}

TEST(ToolGrammar, UnenforceableSchemaIsA400NamingTheTool) {
    const json tools = json::parse(R"([{"type": "function", "function": {"name": "f",
        "parameters": {"type": "object", "properties": {"a": {"type": "string"}},
                       "patternProperties": {"x": {}}}}}])");
    try {
        tool_call_grammar("hermes", tools, "", false);
        FAIL() << "accepted";
    } catch (const warden::server::ApiError& e) {
        EXPECT_EQ(e.status, 400);
        EXPECT_EQ(e.param, "tools[0].function.parameters");
    }
}

}  // namespace
