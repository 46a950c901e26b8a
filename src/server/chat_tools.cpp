#include "server/chat_tools.h"

#include <algorithm>

#include "chat_output/reasoning_parser.h"
#include "chat_output/tool_parser.h"
#include "server/openai_request.h"
#include "util/error.h"
#include "util/utf8.h"

namespace warden::server {

using json = nlohmann::json;

namespace {

[[noreturn]] void bad(const std::string& param, const std::string& msg) {
    throw ApiError(400, msg, param);
}

bool present(const json& b, const char* k) {
    return b.contains(k) && !b[k].is_null();
}

std::string function_name(const json& f, const std::string& param) {
    if (!f.is_object() || !f.contains("name") || !f["name"].is_string() ||
        f["name"].get<std::string>().empty())
        bad(param, "'" + param + ".name' must be a non-empty string");
    const std::string name = f["name"].get<std::string>();
    if (name.size() > 256 || util::find_invalid_utf8(name) != std::string::npos)
        bad(param, "'" + param + ".name' must be valid UTF-8 of at most 256 bytes");
    return name;
}

}  // namespace

void parse_tool_fields(const json& b, const ModelInfo& m, ChatOutputOptions& out) {
    out.reasoning_parser = m.reasoning_parser;
    std::vector<std::string> names;
    if (present(b, "tools")) {
        const json& t = b["tools"];
        if (!t.is_array()) bad("tools", "'tools' must be an array");
        if (t.size() > 1024) bad("tools", "at most 1024 tools");
        for (size_t i = 0; i < t.size(); ++i) {
            const std::string p = "tools[" + std::to_string(i) + "]";
            if (!t[i].is_object() || t[i].value("type", "") != "function" ||
                !t[i].contains("function"))
                bad(p, "'" + p + "' must be {\"type\": \"function\", \"function\": {...}}");
            const json& f = t[i]["function"];
            names.push_back(function_name(f, p + ".function"));
            if (present(f, "parameters") && !f["parameters"].is_object())
                bad(p + ".function.parameters", "'parameters' must be a JSON Schema object");
        }
        if (!t.empty()) out.tools = t;
    }
    std::string choice = out.tools.is_null() ? "none" : "auto";
    if (present(b, "tool_choice")) {
        const json& c = b["tool_choice"];
        if (c.is_string()) {
            choice = c.get<std::string>();
            if (choice != "none" && choice != "auto" && choice != "required")
                bad("tool_choice", "'tool_choice' must be none, auto, required or a named tool");
        } else if (c.is_object() && c.value("type", "") == "function" && c.contains("function")) {
            const std::string name = function_name(c["function"], "tool_choice.function");
            if (std::find(names.begin(), names.end(), name) == names.end())
                bad("tool_choice", "'tool_choice' names '" + util::printable(name, 80) +
                                       "', which is not among 'tools'");
            choice = "named";
        } else {
            bad("tool_choice", "'tool_choice' must be none, auto, required or a named tool");
        }
        if (choice != "none" && out.tools.is_null())
            bad("tool_choice", "'tool_choice' needs 'tools'");
    }
    if (present(b, "parallel_tool_calls")) {
        if (!b["parallel_tool_calls"].is_boolean())
            bad("parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
        out.parallel_tool_calls = b["parallel_tool_calls"].get<bool>();
    }
    if (choice == "none") return;
    if (m.tool_parser.empty())
        bad("tools",
            "this model's chat template has no tool-call format warden knows; start the server "
            "with --tool-call-parser (hermes, llama3_json, kimi_k2, glm45, deepseek_v31) or a "
            "--chat-template that has one");
    if (choice == "required" || choice == "named") {
        // The output is the calls alone, from its first token: no reasoning block before them.
        out.tool_required = true;
        out.reasoning_parser.clear();
        if (choice == "named") out.tool_choice_name = b["tool_choice"]["function"]["name"];
    }
    out.tool_parser = m.tool_parser;
}

json chat_template_kwargs(const json& b) {
    if (!present(b, "chat_template_kwargs")) return json::object();
    const json& k = b["chat_template_kwargs"];
    if (!k.is_object()) bad("chat_template_kwargs", "'chat_template_kwargs' must be an object");
    for (const char* reserved : {"messages", "tools", "add_generation_prompt", "documents"})
        if (k.contains(reserved))
            bad("chat_template_kwargs",
                std::string("'chat_template_kwargs' may not set '") + reserved + "'");
    return k;
}

json message_tool_calls(const json& calls, const std::string& param, bool args_as_objects) {
    if (!calls.is_array()) bad(param, "'" + param + "' must be an array");
    json out = json::array();
    for (size_t i = 0; i < calls.size(); ++i) {
        const std::string p = param + "[" + std::to_string(i) + "]";
        const json& c = calls[i];
        if (!c.is_object() || !c.contains("function") || !c["function"].is_object())
            bad(p, "'" + p + "' must be {\"id\", \"type\": \"function\", \"function\": {...}}");
        json o = c;
        json& f = o["function"];
        function_name(f, p + ".function");
        json args = f.contains("arguments") ? f["arguments"] : json(nullptr);
        if (args.is_string()) {
            if (args_as_objects) {
                const std::string s = args.get<std::string>();
                if (s.empty()) {
                    args = json::object();
                } else {
                    try {
                        args = json::parse(s);
                    } catch (const json::exception&) {
                        bad(p + ".function.arguments",
                            "'" + p + ".function.arguments' is not valid JSON");
                    }
                }
            }
        } else if (args.is_null()) {
            args = args_as_objects ? json::object() : json("{}");
        } else if (!args.is_object()) {
            bad(p + ".function.arguments",
                "'" + p + ".function.arguments' must be a JSON string or an object");
        } else if (!args_as_objects) {
            args = args.dump();
        }
        f["arguments"] = args;
        out.push_back(o);
    }
    return out;
}

}  // namespace warden::server
