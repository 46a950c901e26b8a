#include "server/structured_output.h"

#include "constrain/constraint.h"
#include "constrain/gbnf.h"
#include "constrain/json_schema.h"
#include "constrain/regex.h"
#include "server/api_error.h"

namespace warden::server {

namespace {

using json = nlohmann::json;
using constrain::Grammar;
using constrain::SpecError;

[[noreturn]] void bad(const std::string& param, const std::string& msg) {
    throw ApiError(400, msg, param);
}

bool present(const json& b, const char* k) {
    return b.is_object() && b.contains(k) && !b[k].is_null();
}

// Runs a compiler, turning its refusal into a 400 for `param`.
template <class F>
Grammar compiled(const std::string& param, F&& f) {
    try {
        return f();
    } catch (const SpecError& e) {
        bad(param, "'" + param + "': " + e.what());
    }
}

Grammar schema_grammar(const json& schema, const std::string& param) {
    json s = schema;
    if (s.is_string()) {  // vLLM accepts the schema as JSON text
        try {
            s = json::parse(s.get<std::string>());
        } catch (const json::exception&) {
            bad(param, "'" + param + "' is not valid JSON");
        }
    }
    if (!s.is_object() && !s.is_boolean())
        bad(param, "'" + param + "' must be a JSON Schema object");
    return compiled(param, [&] { return constrain::json_schema_grammar(s); });
}

std::string string_field(const json& v, const std::string& param) {
    if (!v.is_string()) bad(param, "'" + param + "' must be a string");
    return v.get<std::string>();
}

Grammar choice(const json& v, const std::string& param) {
    if (!v.is_array() || v.empty())
        bad(param, "'" + param + "' must be a non-empty array of strings");
    if (v.size() > 1024) bad(param, "'" + param + "' has more than 1024 choices");
    std::vector<std::string> choices;
    for (const auto& c : v) choices.push_back(string_field(c, param));
    return compiled(param, [&] { return constrain::choice_grammar(choices); });
}

Grammar regex(const json& v, const std::string& param) {
    const std::string re = string_field(v, param);
    return compiled(param, [&] { return constrain::regex_grammar(re); });
}

Grammar gbnf(const json& v, const std::string& param) {
    const std::string text = string_field(v, param);
    return compiled(param, [&] { return constrain::parse_gbnf(text); });
}

std::optional<Grammar> response_format(const json& rf) {
    if (!rf.is_object()) bad("response_format", "'response_format' must be an object");
    if (!present(rf, "type")) bad("response_format.type", "'response_format.type' is required");
    const std::string type = string_field(rf["type"], "response_format.type");
    for (const auto& [k, v] : rf.items())
        if (k != "type" && !(k == "json_schema" && type == "json_schema"))
            bad("response_format." + k,
                "unknown field 'response_format." + k + "' for type '" + type + "'");
    if (type == "text") return std::nullopt;
    if (type == "json_object") return constrain::json_object_grammar();
    if (type != "json_schema")
        bad("response_format.type",
            "'response_format.type' must be 'text', 'json_object' or 'json_schema'");
    if (!present(rf, "json_schema"))
        bad("response_format.json_schema", "'response_format.json_schema' is required");
    const json& js = rf["json_schema"];
    if (!js.is_object())
        bad("response_format.json_schema", "'response_format.json_schema' must be an object");
    for (const auto& [k, v] : js.items()) {
        const std::string p = "response_format.json_schema." + k;
        if (k == "name" || k == "description") {
            string_field(v, p);
        } else if (k == "strict") {
            // Not strict only relaxes what a provider must guarantee; warden enforces the
            // schema either way.
            if (!v.is_boolean() && !v.is_null()) bad(p, "'" + p + "' must be a boolean");
        } else if (k != "schema") {
            bad(p, "unknown field '" + p + "'");
        }
    }
    if (!present(js, "schema")) return constrain::json_schema_grammar(json::object());
    return schema_grammar(js["schema"], "response_format.json_schema.schema");
}

std::optional<Grammar> structured_outputs(const json& so) {
    if (!so.is_object()) bad("structured_outputs", "'structured_outputs' must be an object");
    std::optional<Grammar> g;
    int n = 0;
    for (const auto& [k, v] : so.items()) {
        if (v.is_null()) continue;
        const std::string p = "structured_outputs." + k;
        if (k == "json") {
            g = schema_grammar(v, p);
        } else if (k == "regex") {
            g = regex(v, p);
        } else if (k == "choice") {
            g = choice(v, p);
        } else if (k == "grammar") {
            g = gbnf(v, p);
        } else if (k == "json_object") {
            if (!v.is_boolean()) bad(p, "'" + p + "' must be a boolean");
            if (!v.get<bool>()) continue;
            g = constrain::json_object_grammar();
        } else {
            bad(p, "'" + p + "' is not supported");
        }
        ++n;
    }
    if (n > 1)
        bad("structured_outputs",
            "'structured_outputs' may set only one of json, regex, "
            "choice, grammar, json_object");
    return g;
}

}  // namespace

std::shared_ptr<const constrain::CompiledGrammar> parse_structured_output(const json& b,
                                                                          const ModelInfo& m) {
    std::optional<Grammar> g;
    std::vector<std::string> given;
    if (present(b, "response_format")) {
        g = response_format(b["response_format"]);
        if (g) given.push_back("response_format");
    }
    const std::pair<const char*, Grammar (*)(const json&, const std::string&)> guided[] = {
        {"guided_json", schema_grammar},
        {"guided_regex", regex},
        {"guided_choice", choice},
        {"guided_grammar", gbnf},
    };
    for (const auto& [field, fn] : guided)
        if (present(b, field)) {
            g = fn(b[field], field);
            given.push_back(field);
        }
    if (present(b, "structured_outputs")) {
        auto s = structured_outputs(b["structured_outputs"]);
        if (s) {
            g = std::move(s);
            given.push_back("structured_outputs");
        }
    }
    if (given.size() > 1)
        bad(given[1], "'" + given[0] + "' and '" + given[1] +
                          "' both constrain the output; "
                          "give only one");
    if (!g) return nullptr;
    auto vocab = m.vocabulary();
    try {
        return constrain::compile(*g, vocab);
    } catch (const SpecError& e) {
        bad(given[0], "'" + given[0] + "': " + e.what());
    }
}

}  // namespace warden::server
