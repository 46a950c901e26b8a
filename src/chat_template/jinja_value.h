#pragma once
// Values of the Jinja subset used by chat templates, with Python semantics where templates can
// observe them: str() of None/bools/floats/lists/dicts, json.dumps (HF's tojson), equality with
// 1 == 1.0 == True, ordering, truthiness, and str length/slicing in code points.
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <utility>
#include <vector>

namespace warden::chat_template::jinja {

struct Value;
struct Dict;
class Evaluator;
using List = std::vector<Value>;

// Arguments of a call: positional then keyword.
struct Args {
    std::vector<Value> pos;
    std::vector<std::pair<std::string, Value>> kw;
    // Positional `i` or keyword `name`, else nullptr.
    const Value* get(size_t i, const char* name) const;
};
using Func = std::function<Value(Evaluator&, Args&)>;

struct Value {
    enum class Kind : uint8_t { Undefined, None, Bool, Int, Float, String, Array, Dict, Function };
    Kind kind = Kind::Undefined;
    bool b = false;
    int64_t i = 0;
    double f = 0;
    std::string s;               // String; for Undefined the name (for messages)
    std::shared_ptr<List> list;  // List (tuples are lists too)
    std::shared_ptr<Dict> dict;  // Dict
    std::shared_ptr<Func> func;  // Func
    bool is_namespace = false;   // Dict created by namespace(): attributes are assignable
    bool is_tuple = false;       // List that Python would hold as a tuple (repr "(a, b)")

    static Value undefined(std::string name = {});
    static Value none();
    static Value boolean(bool v);
    static Value integer(int64_t v);
    static Value number(double v);
    static Value string(std::string v);
    static Value make_list(List v = {});
    static Value make_tuple(List v);
    static Value make_dict();
    static Value function(Func fn);

    bool is_undefined() const { return kind == Kind::Undefined; }
    bool is_none() const { return kind == Kind::None; }
    bool is_string() const { return kind == Kind::String; }
    bool is_list() const { return kind == Kind::Array; }
    bool is_dict() const { return kind == Kind::Dict; }
    bool is_number() const {
        return kind == Kind::Int || kind == Kind::Float || kind == Kind::Bool;
    }
    bool is_callable() const { return kind == Kind::Function; }
    double as_double() const;
};

// Insertion-ordered string-keyed map (Python dict order).
struct Dict {
    std::vector<std::pair<std::string, Value>> items;
    const Value* find(const std::string& key) const;
    void set(const std::string& key, Value v);
};

const char* kind_name(const Value& v);
bool truthy(const Value& v);
// Python str(v) ("" for undefined).
std::string to_str(const Value& v);
// Python repr(v).
std::string repr(const Value& v);
// json.dumps(v, ensure_ascii, indent (<0: None), separators, sort_keys). item_sep/key_sep empty:
// Python's defaults for the given indent.
std::string to_json(const Value& v, bool ensure_ascii, int indent, const std::string& item_sep,
                    const std::string& key_sep, bool sort_keys);
// Python ==.
bool equals(const Value& a, const Value& b);
// Python <: -1, 0, 1; throws util::Error for unorderable types.
int compare(const Value& a, const Value& b);
// Python float repr (shortest round-trip, 1e+16 style exponents).
std::string float_repr(double d);

Value from_json(const nlohmann::json& j);
Value from_json(const nlohmann::ordered_json& j);  // keeps object key order

// UTF-8 <-> code points (ill-formed bytes pass through as U+DC80+byte style escapes so that
// round trips keep the exact bytes).
std::u32string utf8_decode(const std::string& s);
std::string utf8_encode(const std::u32string& s);
size_t utf8_length(const std::string& s);

// Elements of an iterable: list items, dict keys, string characters; throws for others.
// Undefined iterates as empty.
List iterate(const Value& v);

}  // namespace warden::chat_template::jinja
