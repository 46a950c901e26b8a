#include "server/tool_grammar.h"

#include <algorithm>
#include <vector>

#include "constrain/json_schema.h"
#include "constrain/regex.h"
#include "server/api_error.h"

namespace warden::server {

using json = nlohmann::json;
namespace cg = warden::constrain;

namespace {

std::string quoted(const std::string& s) {
    return json(s).dump(-1, ' ', false, json::error_handler_t::replace);
}

// GLM-4.5's arguments: one <arg_key>/<arg_value> pair per schema property, in the schema's
// order (required ones always, the others optionally); string values raw, others as JSON.
cg::Grammar glm_args(const json& params, const std::string& param) {
    if (!params.is_object() || !params.contains("properties") || !params["properties"].is_object())
        throw ApiError(
            400, "'" + param + "' needs 'properties' for tool_choice in the glm45 format", param);
    std::vector<cg::Grammar> parts;
    const json required = params.value("required", json::array());
    for (auto it = params["properties"].begin(); it != params["properties"].end(); ++it) {
        const json& ps = it.value();
        const bool is_string = ps.is_object() && ps.value("type", json()) == "string" &&
                               !ps.contains("enum") && !ps.contains("pattern");
        cg::Grammar value = is_string ? cg::regex_grammar("[^<]*") : cg::json_schema_grammar(ps);
        cg::Grammar pair =
            cg::sequence({cg::literal("\n<arg_key>" + it.key() + "</arg_key>\n<arg_value>"), value,
                          cg::literal("</arg_value>")});
        const bool req = std::find(required.begin(), required.end(), it.key()) != required.end();
        parts.push_back(req ? pair : cg::repeat(pair, 0, 1));
    }
    return parts.empty() ? cg::literal("") : cg::sequence(parts);
}

// One call of `name` with arguments `args`, as the format writes it (index: its position, for
// formats whose call ids count).
cg::Grammar one_call(const std::string& parser, const std::string& name, const cg::Grammar& args) {
    if (parser == "hermes")
        return cg::sequence(
            {cg::literal("<tool_call>\n{\"name\": " + quoted(name) + ", \"arguments\": "), args,
             cg::literal("}\n</tool_call>")});
    if (parser == "llama3_json")
        return cg::sequence({cg::literal("{\"name\": " + quoted(name) + ", \"parameters\": "), args,
                             cg::literal("}")});
    if (parser == "kimi_k2")
        return cg::sequence(
            {cg::literal("<|tool_call_begin|>functions." + name + ":0<|tool_call_argument_begin|>"),
             args, cg::literal("<|tool_call_end|>")});
    if (parser == "glm45")
        return cg::sequence({cg::literal("<tool_call>" + name), args, cg::literal("</tool_call>")});
    if (parser == "deepseek_v31")
        return cg::sequence({cg::literal("<｜tool▁call▁begin｜>" + name + "<｜tool▁sep｜>"), args,
                             cg::literal("<｜tool▁call▁end｜>")});
    throw ApiError(400,
                   "'tool_choice' required / named is not available for the " + parser +
                       " tool-call format; use 'auto'",
                   "tool_choice");
}

}  // namespace

cg::Grammar tool_call_grammar(const std::string& parser, const json& tools, const std::string& only,
                              bool parallel) {
    std::vector<cg::Grammar> calls;
    for (size_t i = 0; i < tools.size(); ++i) {
        const json& f = tools[i]["function"];
        const std::string name = f["name"].get<std::string>();
        if (!only.empty() && name != only) continue;
        cg::Grammar args;
        try {
            const std::string p = "tools[" + std::to_string(i) + "].function.parameters";
            if (parser == "glm45")
                args = glm_args(f.value("parameters", json::object()), p);
            else
                args = f.contains("parameters") && f["parameters"].is_object()
                           ? cg::json_schema_grammar(f["parameters"])
                           : cg::json_object_grammar();
        } catch (const cg::SpecError& e) {
            const std::string p = "tools[" + std::to_string(i) + "].function.parameters";
            throw ApiError(
                400,
                "'" + p + "' cannot be enforced for tool_choice (" + e.keyword + "): " + e.what(),
                p);
        }
        calls.push_back(one_call(parser, name, args));
    }
    cg::Grammar call = calls.size() == 1 ? calls[0] : cg::alternatives(calls);
    // Kimi-K2's call ids count calls ("functions.NAME:IDX"), which a grammar cannot: one call.
    const bool many = parallel && parser != "kimi_k2";
    const std::string sep = parser == "llama3_json"                     ? "; "
                            : (parser == "hermes" || parser == "glm45") ? "\n"
                                                                        : "";
    cg::Grammar body = call;
    if (many) {
        const cg::Grammar next = sep.empty() ? call : cg::sequence({cg::literal(sep), call});
        body = cg::sequence({call, cg::repeat(next, 0, -1)});
    }
    if (parser == "kimi_k2")
        return cg::sequence({cg::literal("<|tool_calls_section_begin|>"), body,
                             cg::literal("<|tool_calls_section_end|>")});
    if (parser == "deepseek_v31")
        return cg::sequence(
            {cg::literal("<｜tool▁calls▁begin｜>"), body, cg::literal("<｜tool▁calls▁end｜>")});
    return body;
}

}  // namespace warden::server
