#include "constrain/json_schema.h"

#include <map>
#include <set>

#include "constrain/gbnf.h"
#include "constrain/regex.h"

namespace warden::constrain {

namespace {

using json = nlohmann::json;

constexpr int kMaxDepth = 64;

// The building blocks, by name; each is added to the grammar once when first used.
const std::map<std::string, std::string>& primitives() {
    static const std::map<std::string, std::string> p = {
        {"ws", R"(( " " | "\n" [ \t]{0,20} )?)"},
        {"json-char", R"([^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}))"},
        {"json-string", R"("\"" json-char* "\"" ws)"},
        {"json-number",
         R"("-"? ("0" | [1-9] [0-9]{0,15}) ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})? ws)"},
        {"json-integer", R"("-"? ("0" | [1-9] [0-9]{0,15}) ws)"},
        {"json-boolean", R"(("true" | "false") ws)"},
        {"json-null", R"("null" ws)"},
        {"json-value",
         "json-object | json-array | json-string | json-number | json-boolean | json-null"},
        {"json-object",
         R"("{" ws ( json-string ":" ws json-value ( "," ws json-string ":" ws json-value )* )? "}" ws)"},
        {"json-array", R"("[" ws ( json-value ( "," ws json-value )* )? "]" ws)"},
        {"date",
         R"([0-9]{4} "-" ( "0" [1-9] | "1" [0-2] ) "-" ( "0" [1-9] | [12] [0-9] | "3" [01] ))"},
        {"time",
         R"(( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{1,6} )? ( "Z" | [+-] ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ))"},
        {"uuid",
         R"([0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12})"},
    };
    return p;
}

// Which primitives each one uses.
const std::map<std::string, std::vector<std::string>>& primitive_deps() {
    static const std::map<std::string, std::vector<std::string>> d = {
        {"json-char", {}},
        {"json-string", {"json-char", "ws"}},
        {"json-number", {"ws"}},
        {"json-integer", {"ws"}},
        {"json-boolean", {"ws"}},
        {"json-null", {"ws"}},
        {"json-value",
         {"json-object", "json-array", "json-string", "json-number", "json-boolean", "json-null"}},
        {"json-object", {"ws", "json-string", "json-value"}},
        {"json-array", {"ws", "json-value"}},
    };
    return d;
}

const std::set<std::string>& annotations() {
    static const std::set<std::string> a = {"title",    "description", "default",  "examples",
                                            "$schema",  "$id",         "$comment", "deprecated",
                                            "readOnly", "writeOnly",   "$defs",    "definitions"};
    return a;
}

const std::set<std::string>& supported() {
    static const std::set<std::string> s = {
        "type",      "properties", "required", "additionalProperties",
        "items",     "minItems",   "maxItems", "minLength",
        "maxLength", "pattern",    "format",   "enum",
        "const",     "anyOf",      "oneOf",    "allOf",
        "$ref"};
    return s;
}

[[noreturn]] void refuse(const std::string& keyword, const std::string& msg) {
    throw SpecError(keyword, msg);
}

class SchemaCompiler {
  public:
    explicit SchemaCompiler(const json& root) : root_(root) {}

    std::string run() {
        const std::string body = visit(root_, "root", 0);
        std::string out = "root ::= " + body + "\n";
        for (const auto& [name, rule] : rules_) out += name + " ::= " + rule + "\n";
        for (const auto& name : prims_) out += name + " ::= " + primitives().at(name) + "\n";
        return out;
    }

  private:
    std::string prim(const std::string& name) {
        if (prims_.insert(name).second) {
            auto it = primitive_deps().find(name);
            if (it != primitive_deps().end())
                for (const auto& d : it->second) prim(d);
        }
        return name;
    }

    std::string fresh_name(const std::string& hint) {
        std::string base;
        for (char c : hint.substr(0, 40))
            base += std::isalnum(static_cast<unsigned char>(c)) ? c : '-';
        if (base.empty() || base == "root" || primitives().count(base)) base = "s-" + base;
        std::string name = base;
        for (int k = 2; taken_.count(name); ++k) name = base + "-" + std::to_string(k);
        taken_.insert(name);
        return name;
    }

    std::string add_rule(const std::string& hint, const std::string& body) {
        const std::string name = fresh_name(hint);
        rules_.emplace_back(name, body);
        return name;
    }

    std::string literal_of(const json& v) { return gbnf_literal(v.dump()) + " " + prim("ws"); }

    std::string ref(const std::string& r, int depth) {
        auto it = refs_.find(r);
        if (it != refs_.end()) return it->second;
        if (r.empty() || r[0] != '#')
            refuse("$ref", "only local $ref ('#...') is supported, not '" + r + "'");
        const json* target = nullptr;
        json::json_pointer ptr;
        try {
            ptr = json::json_pointer(r.substr(1));
            target = &root_.at(ptr);
        } catch (const json::exception&) {
            refuse("$ref", "$ref '" + r + "' does not resolve in the schema");
        }
        const std::string hint = r == "#" ? "root-ref" : ptr.back();
        const std::string name = fresh_name(hint);
        refs_[r] = name;
        const size_t slot = rules_.size();
        rules_.emplace_back(name, "");
        const std::string body = visit(*target, name, depth + 1);
        rules_[slot].second = body;
        return name;
    }

    std::string alternatives(const std::vector<std::string>& alts) {
        if (alts.size() == 1) return alts[0];
        std::string out = "(";
        for (size_t k = 0; k < alts.size(); ++k) out += (k ? " | " : " ") + alts[k];
        return out + " )";
    }

    std::string visit(const json& s, const std::string& hint, int depth) {
        if (depth > kMaxDepth) refuse("schema", "the schema nests deeper than 64 levels");
        if (s.is_boolean()) {
            if (!s.get<bool>()) refuse("false", "the schema 'false' matches nothing");
            return prim("json-value");
        }
        if (!s.is_object()) refuse("schema", "a schema must be an object or a boolean");
        for (const auto& [k, v] : s.items())
            if (!supported().count(k) && !annotations().count(k))
                refuse(k, "unsupported JSON Schema keyword '" + k + "'");
        auto only = [&](const char* kw, std::initializer_list<const char*> allowed) {
            for (const auto& [k, v] : s.items()) {
                if (k == kw || annotations().count(k)) continue;
                bool ok = false;
                for (const char* a : allowed) ok = ok || k == a;
                if (!ok)
                    refuse(k, std::string("'") + k + "' next to '" + kw + "' is not supported");
            }
        };
        if (s.contains("$ref")) {
            only("$ref", {});
            if (!s["$ref"].is_string()) refuse("$ref", "'$ref' must be a string");
            return ref(s["$ref"].get<std::string>(), depth);
        }
        if (s.contains("const")) {
            only("const", {"type"});
            return literal_of(s["const"]);
        }
        if (s.contains("enum")) {
            only("enum", {"type"});
            const json& e = s["enum"];
            if (!e.is_array() || e.empty()) refuse("enum", "'enum' must be a non-empty array");
            std::vector<std::string> alts;
            for (const auto& v : e) alts.push_back(literal_of(v));
            return alternatives(alts);
        }
        for (const char* kw : {"anyOf", "oneOf"}) {
            if (!s.contains(kw)) continue;
            only(kw, {});
            const json& a = s[kw];
            if (!a.is_array() || a.empty())
                refuse(kw, std::string("'") + kw + "' must be a non-empty array");
            std::vector<std::string> alts;
            for (size_t i = 0; i < a.size(); ++i)
                alts.push_back(visit(a[i], hint + "-" + std::to_string(i), depth + 1));
            return add_rule(hint, alternatives(alts));
        }
        if (s.contains("allOf")) {
            only("allOf", {});
            const json& a = s["allOf"];
            if (!a.is_array() || a.size() != 1)
                refuse("allOf", "'allOf' is supported with exactly one schema");
            return visit(a[0], hint, depth + 1);
        }
        std::vector<std::string> types;
        if (s.contains("type")) {
            const json& t = s["type"];
            if (t.is_string()) {
                types.push_back(t.get<std::string>());
            } else if (t.is_array() && !t.empty()) {
                for (const auto& x : t) {
                    if (!x.is_string()) refuse("type", "'type' must name JSON types");
                    types.push_back(x.get<std::string>());
                }
            } else {
                refuse("type", "'type' must be a string or a non-empty array of strings");
            }
        } else if (s.contains("properties") || s.contains("required") ||
                   s.contains("additionalProperties")) {
            types = {"object"};
        } else if (s.contains("items") || s.contains("minItems") || s.contains("maxItems")) {
            types = {"array"};
        } else if (s.contains("minLength") || s.contains("maxLength") || s.contains("pattern") ||
                   s.contains("format")) {
            types = {"string"};
        } else {
            return prim("json-value");
        }
        std::vector<std::string> alts;
        for (const auto& t : types) alts.push_back(of_type(t, s, hint, depth));
        return alternatives(alts);
    }

    static int64_t count(const json& s, const char* kw, int64_t dflt) {
        if (!s.contains(kw)) return dflt;
        const json& v = s[kw];
        if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 1000)
            refuse(kw, std::string("'") + kw + "' must be an integer in [0, 1000]");
        return v.get<int64_t>();
    }

    static std::string bounds(int64_t lo, int64_t hi) {
        if (hi < 0) return "{" + std::to_string(lo) + ",}";
        if (lo == hi) return "{" + std::to_string(lo) + "}";
        return "{" + std::to_string(lo) + "," + std::to_string(hi) + "}";
    }

    std::string of_type(const std::string& t, const json& s, const std::string& hint, int depth) {
        if (t == "null") return prim("json-null");
        if (t == "boolean") return prim("json-boolean");
        if (t == "integer") return prim("json-integer");
        if (t == "number") return prim("json-number");
        if (t == "string") return string_type(s, hint);
        if (t == "array") return array_type(s, hint, depth);
        if (t == "object") return object_type(s, hint, depth);
        refuse("type", "unknown JSON Schema type '" + t + "'");
    }

    std::string string_type(const json& s, const std::string& hint) {
        prim("ws");
        const bool has_len = s.contains("minLength") || s.contains("maxLength");
        if (s.contains("format")) {
            if (!s["format"].is_string()) refuse("format", "'format' must be a string");
            const std::string f = s["format"].get<std::string>();
            if (has_len || s.contains("pattern"))
                refuse("format", "'format' together with a length or pattern is not supported");
            if (f == "date" || f == "time" || f == "uuid")
                return add_rule(hint, "\"\\\"\" " + prim(f) + " \"\\\"\" ws");
            if (f == "date-time") {
                prim("date"), prim("time");
                return add_rule(hint, "\"\\\"\" date \"T\" time \"\\\"\" ws");
            }
            refuse("format", "unsupported string format '" + f + "'");
        }
        if (s.contains("pattern")) {
            if (has_len)
                refuse("pattern", "'pattern' together with minLength/maxLength is not supported");
            if (!s["pattern"].is_string()) refuse("pattern", "'pattern' must be a string");
            std::string expr;
            try {
                expr = regex_to_gbnf(s["pattern"].get<std::string>(), true, true);
            } catch (const SpecError& e) {
                refuse("pattern", std::string("'pattern': ") + e.what());
            }
            prim("ws");
            return add_rule(hint, "\"\\\"\" " + expr + " \"\\\"\" ws");
        }
        if (!has_len) return prim("json-string");
        const int64_t lo = count(s, "minLength", 0), hi = count(s, "maxLength", -1);
        if (hi >= 0 && hi < lo) refuse("maxLength", "'maxLength' is below 'minLength'");
        prim("json-char"), prim("ws");
        return add_rule(hint, "\"\\\"\" json-char" + bounds(lo, hi) + " \"\\\"\" ws");
    }

    std::string array_type(const json& s, const std::string& hint, int depth) {
        const int64_t lo = count(s, "minItems", 0), hi = count(s, "maxItems", -1);
        if (hi >= 0 && hi < lo) refuse("maxItems", "'maxItems' is below 'minItems'");
        prim("ws");
        std::string item;
        if (s.contains("items")) {
            if (s["items"].is_boolean() && !s["items"].get<bool>()) {
                if (lo > 0) refuse("minItems", "'minItems' above 0 with 'items': false");
                return add_rule(hint, "\"[\" ws \"]\" ws");
            }
            if (s["items"].is_array()) refuse("items", "tuple 'items' (an array) is not supported");
            item = visit(s["items"], hint + "-item", depth + 1);
        } else {
            item = prim("json-value");
        }
        if (hi == 0) return add_rule(hint, "\"[\" ws \"]\" ws");
        std::string body;
        const std::string more = "( \",\" ws " + item + " )";
        if (lo == 0)
            body = "( " + item + " " + more + bounds(0, hi < 0 ? -1 : hi - 1) + " )?";
        else
            body = item + " " + more + bounds(lo - 1, hi < 0 ? -1 : hi - 1);
        return add_rule(hint, "\"[\" ws " + body + " \"]\" ws");
    }

    std::string object_type(const json& s, const std::string& hint, int depth) {
        prim("ws");
        const json empty = json::object();
        const json& props = s.contains("properties") ? s["properties"] : empty;
        if (!props.is_object()) refuse("properties", "'properties' must be an object");
        std::set<std::string> required;
        if (s.contains("required")) {
            if (!s["required"].is_array()) refuse("required", "'required' must be an array");
            for (const auto& r : s["required"]) {
                if (!r.is_string()) refuse("required", "'required' must list property names");
                required.insert(r.get<std::string>());
            }
        }
        // Extra keys: none unless additionalProperties is true or a schema (then any key).
        std::string extra;
        if (s.contains("additionalProperties")) {
            const json& a = s["additionalProperties"];
            if (!(a.is_boolean() && !a.get<bool>())) {
                if (!props.empty())
                    refuse("additionalProperties",
                           "'additionalProperties' other than false is supported only on an "
                           "object without 'properties'");
                extra = visit(a, hint + "-value", depth + 1);
            }
        }
        if (!s.contains("additionalProperties") && props.empty() && required.empty())
            extra = prim("json-value");  // {"type": "object"}: any object
        if (!extra.empty()) {
            if (!required.empty())
                refuse("required", "'required' with 'additionalProperties' is not supported");
            const std::string kv = prim("json-string") + " \":\" ws " + extra;
            return add_rule(hint, "\"{\" ws ( " + kv + " ( \",\" ws " + kv + " )* )? \"}\" ws");
        }
        for (const auto& r : required)
            if (!props.contains(r))
                refuse("required", "required property '" + r + "' is not in 'properties'");
        std::vector<std::string> kvs;
        std::vector<bool> req;
        for (const auto& [name, sub] : props.items()) {
            kvs.push_back(literal_of(json(name)) + " \":\" ws " +
                          visit(sub, hint + "-" + name, depth + 1));
            req.push_back(required.count(name) > 0);
        }
        const size_t n = kvs.size();
        if (n == 0) return add_rule(hint, "\"{\" ws \"}\" ws");
        // rest_i: properties i.. after at least one was written (each with its leading comma);
        // first_i: properties i.. when none was written yet. Linear in the property count.
        std::vector<std::string> rest(n + 1), first(n + 1);
        rest[n] = "";
        for (size_t i = n; i-- > 0;) {
            const std::string item = "\",\" ws " + kvs[i];
            const std::string tail = rest[i + 1].empty() ? "" : " " + rest[i + 1];
            const std::string body = req[i] ? item + tail : "( " + item + " )?" + tail;
            rest[i] = add_rule(hint + "-rest", body);
        }
        first[n] = "\"\"";  // nothing left: the empty string
        for (size_t i = n; i-- > 0;) {
            const std::string tail = rest[i + 1].empty() ? "" : " " + rest[i + 1];
            std::string body = kvs[i] + tail;
            if (!req[i]) body += " | " + first[i + 1];  // skip it: the next one comes first
            first[i] = add_rule(hint + "-first", body);
        }
        return add_rule(hint, "\"{\" ws " + first[0] + " \"}\" ws");
    }

    const json& root_;
    std::vector<std::pair<std::string, std::string>> rules_;
    std::set<std::string> taken_;
    std::map<std::string, std::string> refs_;
    std::set<std::string> prims_;
};

}  // namespace

std::string json_schema_to_gbnf(const json& schema) {
    return SchemaCompiler(schema).run();
}

Grammar json_schema_grammar(const json& schema) {
    const std::string text = json_schema_to_gbnf(schema);
    try {
        return parse_gbnf(text);
    } catch (const SpecError& e) {
        // A schema that compiles to an unusable grammar (e.g. a $ref cycle with no base case).
        throw SpecError("schema", std::string("the schema cannot be enforced: ") + e.what());
    }
}

Grammar json_object_grammar() {
    return json_schema_grammar(json{{"type", "object"}});
}

}  // namespace warden::constrain
