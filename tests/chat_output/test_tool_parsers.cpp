// Tool-call and reasoning parsers (src/chat_output) on model outputs rendered by the families'
// real chat templates (tests/golden/chat_templates, rendered with warden's Jinja engine): an
// assistant message with tool calls is rendered, the text the model would have generated is cut
// out of the rendering, parsed back, and compared with the message. Also malformed and truncated
// output (answer text, never a crash), and streaming: every random chunking of an output parses
// to the same result as the whole output.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>

#include "chat_output/chat_output.h"
#include "chat_template/chat_template.h"
#include "test_paths.h"

namespace {

using json = nlohmann::json;
using warden::chat_output::ChatOutputParser;
using warden::chat_output::ParsedOutput;
namespace co = warden::chat_output;

std::string read_template(const std::string& name) {
    std::ifstream in(warden::test::source_dir() + "/tests/golden/chat_templates/" + name,
                     std::ios::binary);
    EXPECT_TRUE(in.good()) << name;
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

const json kTools = json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
   "parameters": {"type": "object", "properties": {"city": {"type": "string"},
     "days": {"type": "integer"}, "detail": {"type": "object"}}, "required": ["city"]}}},
  {"type": "function", "function": {"name": "web_search", "description": "Search",
   "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}}}
])");

struct Call {
    std::string name;
    json args;
};

json tool_calls_json(const std::vector<Call>& calls, bool args_as_string) {
    json a = json::array();
    for (size_t i = 0; i < calls.size(); ++i)
        a.push_back(
            json{{"id", "call_" + std::to_string(i)},
                 {"type", "function"},
                 {"function",
                  {{"name", calls[i].name},
                   {"arguments", args_as_string ? json(calls[i].args.dump()) : calls[i].args}}}});
    return a;
}

// The text a model writes for `assistant` after the template's generation prompt: the rendering
// with the message minus the rendering without it (with the generation prompt), minus `tail`
// (the end-of-turn marker, which is a stop token and never reaches the parser).
std::string model_output(const std::string& tpl_name, const json& assistant,
                         const std::string& tail, const json& extra = json::object()) {
    const auto tpl = warden::chat_template::ChatTemplate::parse(read_template(tpl_name));
    json msgs = json::array({json{{"role", "system"}, {"content", "You call tools."}},
                             json{{"role", "user"}, {"content", "Weather in Paris and 東京?"}}});
    json vars = extra;
    vars["bos_token"] = "<s>";
    vars["eos_token"] = "</s>";
    const std::string prompt = tpl.render(msgs, kTools, true, vars);
    msgs.push_back(assistant);
    std::string full = tpl.render(msgs, kTools, false, vars);
    EXPECT_EQ(full.compare(0, prompt.size(), prompt), 0) << tpl_name << ":\n" << full;
    std::string out = full.substr(prompt.size());
    if (!tail.empty()) {
        EXPECT_GE(out.size(), tail.size());
        EXPECT_EQ(out.substr(out.size() - tail.size()), tail) << out;
        out.resize(out.size() - tail.size());
    }
    return out;
}

std::unique_ptr<ChatOutputParser> parser(const std::string& tools, const std::string& reasoning,
                                         bool starts_inside = false, bool parallel = true) {
    return std::make_unique<ChatOutputParser>(
        reasoning.empty() ? nullptr : co::make_reasoning_parser(reasoning, starts_inside),
        tools.empty() ? nullptr : co::make_tool_parser(tools, kTools), parallel);
}

// Parses `out` whole, then in `rounds` random chunkings (byte granularity: pieces may split
// markers and UTF-8 sequences), and checks every chunking gives the whole parse.
ParsedOutput parse_checked(const std::string& tools, const std::string& reasoning,
                           const std::string& out, bool starts_inside = false, bool parallel = true,
                           int rounds = 30) {
    auto p = parser(tools, reasoning, starts_inside, parallel);
    const ParsedOutput whole = co::parse_whole(*p, out);
    std::mt19937 rng(12345);
    for (int r = 0; r < rounds; ++r) {
        auto q = parser(tools, reasoning, starts_inside, parallel);
        ParsedOutput streamed;
        const size_t max_piece = 1 + static_cast<size_t>(r % 7) * (r % 3 == 0 ? 5 : 1);
        for (size_t i = 0; i < out.size();) {
            const size_t n = std::min(out.size() - i, 1 + rng() % max_piece);
            co::accumulate(streamed, q->feed(std::string_view(out).substr(i, n), false));
            i += n;
        }
        co::accumulate(streamed, q->feed("", true));
        EXPECT_EQ(streamed.reasoning, whole.reasoning) << "chunking " << r << " of:\n" << out;
        EXPECT_EQ(streamed.content, whole.content) << "chunking " << r << " of:\n" << out;
        EXPECT_EQ(streamed.calls.size(), whole.calls.size()) << "chunking " << r << " of:\n" << out;
        for (size_t i = 0; i < std::min(streamed.calls.size(), whole.calls.size()); ++i) {
            EXPECT_EQ(streamed.calls[i].id, whole.calls[i].id);
            EXPECT_EQ(streamed.calls[i].name, whole.calls[i].name);
            EXPECT_EQ(streamed.calls[i].arguments, whole.calls[i].arguments) << out;
        }
    }
    return whole;
}

void expect_calls(const ParsedOutput& got, const std::vector<Call>& want, const std::string& out) {
    ASSERT_EQ(got.calls.size(), want.size()) << out;
    for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_EQ(got.calls[i].name, want[i].name) << out;
        json args;
        ASSERT_NO_THROW(args = json::parse(got.calls[i].arguments)) << got.calls[i].arguments;
        EXPECT_EQ(args, want[i].args) << out;
    }
}

const std::vector<Call> kTwoCalls = {
    {"get_weather", json{{"city", "Paris"}, {"days", 3}, {"detail", {{"wind", true}}}}},
    {"get_weather", json{{"city", "東京"}, {"days", 1}}}};
const std::vector<Call> kOneCall = {{"web_search", json{{"query", "cats \"cute\" </tool_call"}}}};

TEST(ToolParsers, DetectsTheFormatOfEachTemplate) {
    EXPECT_EQ(co::detect_tool_parser(read_template("qwen2.5.jinja")), "hermes");
    EXPECT_EQ(co::detect_tool_parser(read_template("qwen3.jinja")), "hermes");
    EXPECT_EQ(co::detect_tool_parser(read_template("glm-4.5.jinja")), "glm45");
    EXPECT_EQ(co::detect_tool_parser(read_template("deepseek-v3.1.jinja")), "deepseek_v31");
    EXPECT_EQ(co::detect_tool_parser(read_template("kimi-k2.jinja")), "kimi_k2");
    EXPECT_EQ(co::detect_tool_parser(read_template("llama-3.1.jinja")), "llama3_json");
    EXPECT_EQ(co::detect_tool_parser(read_template("llama-3.2.jinja")), "llama3_json");
    EXPECT_EQ(co::detect_tool_parser(read_template("smollm2.jinja")), "");
    EXPECT_EQ(co::detect_reasoning_parser(read_template("qwen3.jinja")), "qwen3");
    EXPECT_EQ(co::detect_reasoning_parser(read_template("deepseek-r1-distill.jinja")),
              "deepseek_r1");
    EXPECT_EQ(co::detect_reasoning_parser(read_template("glm-4.5.jinja")), "glm45");
    EXPECT_EQ(co::detect_reasoning_parser(read_template("qwen2.5.jinja")), "");
    EXPECT_EQ(co::detect_reasoning_parser(read_template("smollm2.jinja")), "");
}

TEST(ToolParsers, HermesRoundTripsQwenTemplates) {
    for (const char* name : {"qwen2.5.jinja", "qwen3.jinja"}) {
        for (const auto* calls : {&kTwoCalls, &kOneCall}) {
            const json msg{{"role", "assistant"},
                           {"content", "Let me look."},
                           {"tool_calls", tool_calls_json(*calls, false)}};
            const std::string out = model_output(name, msg, "<|im_end|>\n");
            const bool qwen3 = std::string(name) == "qwen3.jinja";
            const ParsedOutput got = parse_checked("hermes", qwen3 ? "qwen3" : "", out);
            expect_calls(got, *calls, out);
            EXPECT_EQ(got.content, "Let me look.") << out;
        }
    }
}

TEST(ToolParsers, Glm45RoundTripsItsTemplate) {
    for (const auto* calls : {&kTwoCalls, &kOneCall}) {
        const json msg{{"role", "assistant"},
                       {"content", "Let me look."},
                       {"reasoning_content", "The user wants weather."},
                       {"tool_calls", tool_calls_json(*calls, false)}};
        const std::string out = model_output("glm-4.5.jinja", msg, "");
        const ParsedOutput got = parse_checked("glm45", "glm45", out);
        expect_calls(got, *calls, out);
        EXPECT_EQ(got.content, "Let me look.") << out;
        EXPECT_EQ(got.reasoning, "The user wants weather.") << out;
    }
}

TEST(ToolParsers, DeepSeekV31RoundTripsItsTemplate) {
    // This template concatenates the arguments as text: they are given as the JSON string.
    for (const auto* calls : {&kTwoCalls, &kOneCall}) {
        const json msg{{"role", "assistant"},
                       {"content", "Let me look."},
                       {"tool_calls", tool_calls_json(*calls, true)}};
        const std::string out = model_output("deepseek-v3.1.jinja", msg, "<｜end▁of▁sentence｜>");
        const ParsedOutput got = parse_checked("deepseek_v31", "deepseek_v3", out);
        expect_calls(got, *calls, out);
        EXPECT_EQ(got.content, "Let me look.") << out;
    }
}

TEST(ToolParsers, Llama3JsonRoundTripsLlamaTemplates) {
    for (const char* name : {"llama-3.1.jinja", "llama-3.2.jinja"}) {
        const std::vector<Call> one = {kTwoCalls[1]};
        const json msg{
            {"role", "assistant"}, {"content", ""}, {"tool_calls", tool_calls_json(one, false)}};
        const std::string out =
            model_output(name, msg, "<|eot_id|>", json{{"date_string", "26 Jul 2024"}});
        const ParsedOutput got = parse_checked("llama3_json", "", out);
        expect_calls(got, one, out);
        EXPECT_EQ(got.content, "") << out;
    }
    // Several calls after <|python_tag|>, separated by ';'.
    const std::string out =
        "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}; "
        "{\"name\": \"web_search\", \"parameters\": {\"query\": \"x\"}}";
    expect_calls(parse_checked("llama3_json", "", out),
                 {{"get_weather", {{"city", "Paris"}}}, {"web_search", {{"query", "x"}}}}, out);
}

TEST(ToolParsers, KimiK2Format) {
    // The committed Kimi-K2 template (llama.cpp's variant) does not render tool calls; this is
    // the format of Moonshot's current Kimi-K2 / K2-Thinking templates (the call id is the
    // model's own "functions.NAME:IDX", which the template writes back verbatim).
    const std::string out =
        "<think>Need weather.</think>I will check."
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
        "<|tool_call_argument_begin|>{\"city\": \"Paris\", \"days\": 3, \"detail\": {\"wind\": "
        "true}}<|tool_call_end|><|tool_call_begin|>functions.get_weather:1"
        "<|tool_call_argument_begin|>{\"city\": \"東京\", \"days\": 1}<|tool_call_end|>"
        "<|tool_calls_section_end|>";
    const ParsedOutput got = parse_checked("kimi_k2", "kimi_k2", out);
    expect_calls(got, kTwoCalls, out);
    EXPECT_EQ(got.calls[0].id, "functions.get_weather:0");
    EXPECT_EQ(got.calls[1].id, "functions.get_weather:1");
    EXPECT_EQ(got.content, "I will check.");
    EXPECT_EQ(got.reasoning, "Need weather.");
}

TEST(ToolParsers, ParallelCallsOffKeepsTheFirst) {
    const json msg{
        {"role", "assistant"}, {"content", ""}, {"tool_calls", tool_calls_json(kTwoCalls, false)}};
    const std::string out = model_output("qwen2.5.jinja", msg, "<|im_end|>\n");
    const ParsedOutput got = parse_checked("hermes", "", out, false, false);
    expect_calls(got, {kTwoCalls[0]}, out);
}

TEST(ToolParsers, PlainAnswersPassThrough) {
    for (const char* tools : {"hermes", "llama3_json", "kimi_k2", "glm45", "deepseek_v31"}) {
        const std::string text = "The weather is <b>fine</b> {\"not\": \"a call\"} <tool";
        const ParsedOutput got = parse_checked(tools, "", text);
        EXPECT_EQ(got.content, text) << tools;
        EXPECT_TRUE(got.calls.empty()) << tools;
    }
}

TEST(ToolParsers, MalformedOutputIsAnswerText) {
    struct Case {
        const char* parser;
        std::string out;
        std::string content;  // expected answer text
        size_t calls;
    };
    const Case cases[] = {
        {"hermes", "<tool_call>\nnot json\n</tool_call> after",
         "<tool_call>\nnot json\n</tool_call> after", 0},
        {"hermes", "<tool_call>\n{\"arguments\": {}}\n</tool_call>",
         "<tool_call>\n{\"arguments\": {}}\n</tool_call>", 0},
        {"hermes", "Hi <tool_call>\n{\"na", "Hi <tool_call>\n{\"na", 0},
        {"hermes", "<tool_call>{\"name\": 5}</tool_call>", "<tool_call>{\"name\": 5}</tool_call>",
         0},
        {"glm45", "<tool_call>\n<arg_key>a</arg_key></tool_call>",
         "<tool_call>\n<arg_key>a</arg_key></tool_call>", 0},
        {"glm45", "<tool_call>", "<tool_call>", 0},
        {"deepseek_v31",
         "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>no separator<｜tool▁call▁end｜>",
         "<｜tool▁call▁begin｜>no separator<｜tool▁call▁end｜>", 0},
        {"kimi_k2", "<|tool_calls_section_begin|>junk<|tool_calls_section_end|>tail",
         "junk<|tool_calls_section_end|>tail", 0},
        {"llama3_json", "{\"answer\": 42} and more", "{\"answer\": 42} and more", 0},
        {"llama3_json", "{\"name\": \"f\", \"parameters\": {\"a\": [1, 2", "", 1},
        // A call whose name was read stays a call when the output is cut inside it.
        {"hermes", "<tool_call>\n{\"name\": \"web_search\", \"arguments\": {\"query\": \"ca", "",
         1},
        {"kimi_k2",
         "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{"
         "\"a\"",
         "", 1},
    };
    for (const auto& c : cases) {
        const ParsedOutput got = parse_checked(c.parser, "", c.out);
        EXPECT_EQ(got.content, c.content) << c.parser << ": " << c.out;
        EXPECT_EQ(got.calls.size(), c.calls) << c.parser << ": " << c.out;
    }
    // Truncated arguments are what the model wrote, not invented JSON.
    const ParsedOutput t = parse_checked(
        "hermes", "", "<tool_call>\n{\"name\": \"web_search\", \"arguments\": {\"query\": \"ca");
    ASSERT_EQ(t.calls.size(), 1u);
    EXPECT_EQ(t.calls[0].name, "web_search");
    EXPECT_EQ(t.calls[0].arguments, "{\"query\": \"ca");
}

// Random strings built from marker fragments: never a crash, and every chunking agrees.
TEST(ToolParsers, RandomOutputsAgreeStreamedAndWhole) {
    const std::vector<std::string> atoms = {"<tool_call>",
                                            "</tool_call>",
                                            "\n",
                                            " ",
                                            "{",
                                            "}",
                                            "\"name\"",
                                            ": ",
                                            "\"f\"",
                                            ", ",
                                            "\"arguments\"",
                                            "\"parameters\"",
                                            "[1, 2]",
                                            "\"x\\\"y\"",
                                            "<arg_key>",
                                            "</arg_key>",
                                            "<arg_value>",
                                            "</arg_value>",
                                            "<|tool_calls_section_begin|>",
                                            "<|tool_call_begin|>",
                                            "functions.f:0",
                                            "<|tool_call_argument_begin|>",
                                            "<|tool_call_end|>",
                                            "<|tool_calls_section_end|>",
                                            "<｜tool▁calls▁begin｜>",
                                            "<｜tool▁call▁begin｜>",
                                            "<｜tool▁sep｜>",
                                            "<｜tool▁call▁end｜>",
                                            "<｜tool▁calls▁end｜>",
                                            "<|python_tag|>",
                                            ";",
                                            "<think>",
                                            "</think>",
                                            "text",
                                            "東京",
                                            "<",
                                            "\xff"};
    std::mt19937 rng(7);
    for (int i = 0; i < 300; ++i) {
        std::string out;
        const int n = 1 + static_cast<int>(rng() % 24);
        for (int k = 0; k < n; ++k) out += atoms[rng() % atoms.size()];
        const std::string& tp = co::tool_parser_names()[static_cast<size_t>(i) % 5];
        parse_checked(tp, i % 2 ? "qwen3" : "", out, i % 4 == 1, i % 3 != 0, 4);
    }
}

TEST(ReasoningParsers, SplitsThinkBlocks) {
    // Qwen3: the template writes reasoning_content back as <think>\n...\n</think>\n\n.
    const json msg{{"role", "assistant"},
                   {"content", "Paris is sunny."},
                   {"reasoning_content", "Look it up."}};
    const std::string out = model_output("qwen3.jinja", msg, "<|im_end|>\n");
    const ParsedOutput got = parse_checked("", "qwen3", out);
    EXPECT_EQ(got.reasoning, "\nLook it up.\n") << out;
    EXPECT_EQ(got.content, "Paris is sunny.") << out;

    // DeepSeek-R1 distills: the generation prompt opens the block, the output only closes it.
    const auto r1 =
        warden::chat_template::ChatTemplate::parse(read_template("deepseek-r1-distill.jinja"));
    const std::string prompt = r1.render(json::array({json{{"role", "user"}, {"content", "2+2?"}}}),
                                         nullptr, true, json{{"bos_token", "<s>"}});
    ASSERT_TRUE(co::prompt_opens_reasoning(prompt)) << prompt;
    const ParsedOutput r =
        parse_checked("", "deepseek_r1", "Add them.\n</think>\n\nIt is 4.", true);
    EXPECT_EQ(r.reasoning, "Add them.\n");
    EXPECT_EQ(r.content, "It is 4.");
    // Output cut inside the block: all reasoning.
    const ParsedOutput cut = parse_checked("", "deepseek_r1", "Add them, then", true);
    EXPECT_EQ(cut.reasoning, "Add them, then");
    EXPECT_EQ(cut.content, "");

    // Qwen3 with enable_thinking false: the prompt closes the block; the output is all answer.
    const auto q3 = warden::chat_template::ChatTemplate::parse(read_template("qwen3.jinja"));
    const std::string p3 = q3.render(json::array({json{{"role", "user"}, {"content", "hi"}}}),
                                     nullptr, true, json{{"enable_thinking", false}});
    EXPECT_FALSE(co::prompt_opens_reasoning(p3));
    const ParsedOutput plain = parse_checked("", "qwen3", "Hello <think> there");
    EXPECT_EQ(plain.reasoning, "");
    EXPECT_EQ(plain.content, "Hello <think> there");
}

}  // namespace
