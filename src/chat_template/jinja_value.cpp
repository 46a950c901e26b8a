// Jinja values with Python semantics (see jinja_value.h).
#include "chat_template/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "util/error.h"

namespace warden::chat_template::jinja {

const Value* Args::get(size_t idx, const char* name) const {
    if (idx < pos.size()) return &pos[idx];
    if (name)
        for (const auto& [k, v] : kw)
            if (k == name) return &v;
    return nullptr;
}

Value Value::undefined(std::string name) {
    Value v;
    v.s = std::move(name);
    return v;
}
Value Value::none() {
    Value v;
    v.kind = Kind::None;
    return v;
}
Value Value::boolean(bool x) {
    Value v;
    v.kind = Kind::Bool;
    v.b = x;
    v.i = x ? 1 : 0;
    v.f = v.i;
    return v;
}
Value Value::integer(int64_t x) {
    Value v;
    v.kind = Kind::Int;
    v.i = x;
    v.f = static_cast<double>(x);
    return v;
}
Value Value::number(double x) {
    Value v;
    v.kind = Kind::Float;
    v.f = x;
    return v;
}
Value Value::string(std::string x) {
    Value v;
    v.kind = Kind::String;
    v.s = std::move(x);
    return v;
}
Value Value::make_list(List x) {
    Value v;
    v.kind = Kind::Array;
    v.list = std::make_shared<List>(std::move(x));
    return v;
}
Value Value::make_tuple(List x) {
    Value v = make_list(std::move(x));
    v.is_tuple = true;
    return v;
}
Value Value::make_dict() {
    Value v;
    v.kind = Kind::Dict;
    v.dict = std::make_shared<Dict>();
    return v;
}
Value Value::function(Func fn) {
    Value v;
    v.kind = Kind::Function;
    v.func = std::make_shared<Func>(std::move(fn));
    return v;
}
double Value::as_double() const {
    return kind == Kind::Float ? f : static_cast<double>(i);
}

const Value* Dict::find(const std::string& key) const {
    for (const auto& kv : items)
        if (kv.first == key) return &kv.second;
    return nullptr;
}
void Dict::set(const std::string& key, Value v) {
    for (auto& kv : items)
        if (kv.first == key) {
            kv.second = std::move(v);
            return;
        }
    items.emplace_back(key, std::move(v));
}

const char* kind_name(const Value& v) {
    switch (v.kind) {
        case Value::Kind::Undefined:
            return "Undefined";
        case Value::Kind::None:
            return "NoneType";
        case Value::Kind::Bool:
            return "bool";
        case Value::Kind::Int:
            return "int";
        case Value::Kind::Float:
            return "float";
        case Value::Kind::String:
            return "str";
        case Value::Kind::Array:
            return "list";
        case Value::Kind::Dict:
            return v.is_namespace ? "Namespace" : "dict";
        case Value::Kind::Function:
            return "function";
    }
    return "?";
}

bool truthy(const Value& v) {
    switch (v.kind) {
        case Value::Kind::Undefined:
        case Value::Kind::None:
            return false;
        case Value::Kind::Bool:
            return v.b;
        case Value::Kind::Int:
            return v.i != 0;
        case Value::Kind::Float:
            return v.f != 0.0;
        case Value::Kind::String:
            return !v.s.empty();
        case Value::Kind::Array:
            return !v.list->empty();
        case Value::Kind::Dict:
            return v.is_namespace || !v.dict->items.empty();
        case Value::Kind::Function:
            return true;
    }
    return false;
}

std::string float_repr(double d) {
    if (std::isnan(d)) return "nan";
    if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
    char buf[64];
    auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
    std::string sci(buf, res.ptr);
    const size_t epos = sci.find('e');
    std::string mant = sci.substr(0, epos);
    const int exp10 = std::stoi(sci.substr(epos + 1));
    std::string sign;
    if (!mant.empty() && mant[0] == '-') {
        sign = "-";
        mant.erase(0, 1);
    }
    std::string digits;
    for (char c : mant)
        if (c != '.') digits += c;
    if (exp10 < -4 || exp10 >= 16) {
        std::string out = sign + digits.substr(0, 1);
        if (digits.size() > 1) out += "." + digits.substr(1);
        char eb[16];
        std::snprintf(eb, sizeof eb, "e%c%02d", exp10 < 0 ? '-' : '+', std::abs(exp10));
        return out + eb;
    }
    std::string out;
    if (exp10 < 0) {
        out = "0." + std::string(static_cast<size_t>(-exp10 - 1), '0') + digits;
    } else {
        const size_t intlen = static_cast<size_t>(exp10) + 1;
        if (digits.size() <= intlen) {
            out = digits + std::string(intlen - digits.size(), '0') + ".0";
        } else {
            out = digits.substr(0, intlen) + "." + digits.substr(intlen);
        }
    }
    return sign + out;
}

std::u32string utf8_decode(const std::string& s) {
    std::u32string out;
    out.reserve(s.size());
    size_t i = 0;
    while (i < s.size()) {
        const auto c = static_cast<unsigned char>(s[i]);
        size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        bool ok = n > 0 && i + n <= s.size();
        char32_t cp = n == 1 ? c : n == 2 ? (c & 0x1f) : n == 3 ? (c & 0x0f) : (c & 0x07);
        for (size_t k = 1; ok && k < n; ++k) {
            const auto cc = static_cast<unsigned char>(s[i + k]);
            if ((cc >> 6) != 2) ok = false;
            cp = (cp << 6) | (cc & 0x3f);
        }
        if (!ok) {
            out += static_cast<char32_t>(0xDC00 + c);  // lone byte, kept exactly
            ++i;
            continue;
        }
        out += cp;
        i += n;
    }
    return out;
}

static void append_utf8(std::string& out, char32_t cp) {
    if (cp >= 0xDC80 && cp <= 0xDCFF) {
        out += static_cast<char>(cp - 0xDC00);
    } else if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
        out += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
        out += static_cast<char>(0x80 | (cp & 0x3f));
    }
}

std::string utf8_encode(const std::u32string& s) {
    std::string out;
    out.reserve(s.size());
    for (char32_t cp : s) append_utf8(out, cp);
    return out;
}

size_t utf8_length(const std::string& s) {
    size_t n = 0;
    for (unsigned char c : s)
        if ((c & 0xC0) != 0x80) ++n;
    return n;
}

static std::string repr_string(const std::string& s) {
    const bool has_sq = s.find('\'') != std::string::npos,
               has_dq = s.find('"') != std::string::npos;
    const char q = has_sq && !has_dq ? '"' : '\'';
    std::string out(1, q);
    for (char32_t cp : utf8_decode(s)) {
        char buf[16];
        if (cp == '\\')
            out += "\\\\";
        else if (cp == static_cast<char32_t>(q))
            (out += '\\') += q;
        else if (cp == '\n')
            out += "\\n";
        else if (cp == '\r')
            out += "\\r";
        else if (cp == '\t')
            out += "\\t";
        else if (cp < 0x20 || (cp >= 0x7f && cp <= 0xa0) || cp == 0xad) {
            std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(cp));
            out += buf;
        } else if ((cp >= 0x200b && cp <= 0x200f) || cp == 0x2028 || cp == 0x2029 || cp == 0xfeff ||
                   (cp >= 0xd800 && cp <= 0xdfff)) {
            std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(cp));
            out += buf;
        } else {
            append_utf8(out, cp);
        }
    }
    return out + q;
}

std::string repr(const Value& v) {
    switch (v.kind) {
        case Value::Kind::String:
            return repr_string(v.s);
        case Value::Kind::Array: {
            std::string out = v.is_tuple ? "(" : "[";
            for (size_t k = 0; k < v.list->size(); ++k) out += (k ? ", " : "") + repr((*v.list)[k]);
            if (v.is_tuple) return out + (v.list->size() == 1 ? ",)" : ")");
            return out + "]";
        }
        case Value::Kind::Dict: {
            std::string out = v.is_namespace ? "<Namespace {" : "{";
            bool first = true;
            for (const auto& [k, x] : v.dict->items) {
                out += (first ? "" : ", ") + repr_string(k) + ": " + repr(x);
                first = false;
            }
            return out + (v.is_namespace ? "}>" : "}");
        }
        default:
            return to_str(v);
    }
}

std::string to_str(const Value& v) {
    switch (v.kind) {
        case Value::Kind::Undefined:
            return "";
        case Value::Kind::None:
            return "None";
        case Value::Kind::Bool:
            return v.b ? "True" : "False";
        case Value::Kind::Int:
            return std::to_string(v.i);
        case Value::Kind::Float:
            return float_repr(v.f);
        case Value::Kind::String:
            return v.s;
        case Value::Kind::Function:
            return "<function>";
        default:
            return repr(v);
    }
}

static void json_string(std::string& out, const std::string& s, bool ensure_ascii) {
    out += '"';
    char buf[16];
    for (char32_t cp : utf8_decode(s)) {
        switch (cp) {
            case '"':
                out += "\\\"";
                continue;
            case '\\':
                out += "\\\\";
                continue;
            case '\n':
                out += "\\n";
                continue;
            case '\r':
                out += "\\r";
                continue;
            case '\t':
                out += "\\t";
                continue;
            case '\b':
                out += "\\b";
                continue;
            case '\f':
                out += "\\f";
                continue;
            default:
                break;
        }
        if (cp < 0x20 || (ensure_ascii && cp >= 0x7f)) {
            if (cp >= 0x10000 && !(cp >= 0xDC80 && cp <= 0xDCFF)) {
                const char32_t c = cp - 0x10000;
                std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x",
                              static_cast<unsigned>(0xD800 + (c >> 10)),
                              static_cast<unsigned>(0xDC00 + (c & 0x3ff)));
            } else {
                std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(cp));
            }
            out += buf;
        } else {
            append_utf8(out, cp);
        }
    }
    out += '"';
}

static void json_value(std::string& out, const Value& v, bool ensure_ascii, int indent,
                       const std::string& item_sep, const std::string& key_sep, bool sort_keys,
                       int level) {
    if (level > 512) throw util::Error("tojson: value nested too deeply");
    const auto newline = [&](int lvl) {
        if (indent >= 0)
            out += "\n" + std::string(static_cast<size_t>(indent) * static_cast<size_t>(lvl), ' ');
    };
    switch (v.kind) {
        case Value::Kind::None:
            out += "null";
            return;
        case Value::Kind::Bool:
            out += v.b ? "true" : "false";
            return;
        case Value::Kind::Int:
            out += std::to_string(v.i);
            return;
        case Value::Kind::Float:
            if (std::isnan(v.f))
                out += "NaN";
            else if (std::isinf(v.f))
                out += v.f < 0 ? "-Infinity" : "Infinity";
            else
                out += float_repr(v.f);
            return;
        case Value::Kind::String:
            json_string(out, v.s, ensure_ascii);
            return;
        case Value::Kind::Array: {
            if (v.list->empty()) {
                out += "[]";
                return;
            }
            out += '[';
            for (size_t k = 0; k < v.list->size(); ++k) {
                if (k) out += item_sep;
                newline(level + 1);
                json_value(out, (*v.list)[k], ensure_ascii, indent, item_sep, key_sep, sort_keys,
                           level + 1);
            }
            newline(level);
            out += ']';
            return;
        }
        case Value::Kind::Dict: {
            if (v.dict->items.empty()) {
                out += "{}";
                return;
            }
            std::vector<const std::pair<std::string, Value>*> items;
            for (const auto& kv : v.dict->items) items.push_back(&kv);
            if (sort_keys)
                std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) {
                    return utf8_decode(a->first) < utf8_decode(b->first);
                });
            out += '{';
            for (size_t k = 0; k < items.size(); ++k) {
                if (k) out += item_sep;
                newline(level + 1);
                json_string(out, items[k]->first, ensure_ascii);
                out += key_sep;
                json_value(out, items[k]->second, ensure_ascii, indent, item_sep, key_sep,
                           sort_keys, level + 1);
            }
            newline(level);
            out += '}';
            return;
        }
        default:
            throw util::Error(std::string("tojson: Object of type ") + kind_name(v) +
                              " is not JSON serializable");
    }
}

std::string to_json(const Value& v, bool ensure_ascii, int indent, const std::string& item_sep,
                    const std::string& key_sep, bool sort_keys) {
    std::string out;
    json_value(out, v, ensure_ascii, indent, item_sep, key_sep, sort_keys, 0);
    return out;
}

bool equals(const Value& a, const Value& b) {
    if (a.is_number() && b.is_number()) {
        if (a.kind == Value::Kind::Float || b.kind == Value::Kind::Float)
            return a.as_double() == b.as_double();
        return a.i == b.i;
    }
    if (a.kind != b.kind) return false;
    switch (a.kind) {
        case Value::Kind::Undefined:
        case Value::Kind::None:
            return true;
        case Value::Kind::String:
            return a.s == b.s;
        case Value::Kind::Array:
            if (a.is_tuple != b.is_tuple || a.list->size() != b.list->size()) return false;
            for (size_t k = 0; k < a.list->size(); ++k)
                if (!equals((*a.list)[k], (*b.list)[k])) return false;
            return true;
        case Value::Kind::Dict:
            if (a.is_namespace || b.is_namespace) return a.dict == b.dict;
            if (a.dict->items.size() != b.dict->items.size()) return false;
            for (const auto& [k, x] : a.dict->items) {
                const Value* y = b.dict->find(k);
                if (!y || !equals(x, *y)) return false;
            }
            return true;
        case Value::Kind::Function:
            return a.func == b.func;
        default:
            return false;
    }
}

int compare(const Value& a, const Value& b) {
    if (a.is_number() && b.is_number()) {
        if (a.kind == Value::Kind::Float || b.kind == Value::Kind::Float) {
            const double x = a.as_double(), y = b.as_double();
            return x < y ? -1 : x > y ? 1 : 0;
        }
        return a.i < b.i ? -1 : a.i > b.i ? 1 : 0;
    }
    if (a.is_string() && b.is_string()) return a.s < b.s ? -1 : a.s > b.s ? 1 : 0;
    if (a.is_list() && b.is_list()) {
        const size_t n = std::min(a.list->size(), b.list->size());
        for (size_t k = 0; k < n; ++k) {
            if (equals((*a.list)[k], (*b.list)[k])) continue;
            return compare((*a.list)[k], (*b.list)[k]);
        }
        return a.list->size() < b.list->size() ? -1 : a.list->size() > b.list->size() ? 1 : 0;
    }
    throw util::Error(std::string("'<' not supported between instances of '") + kind_name(a) +
                      "' and '" + kind_name(b) + "'");
}

template <class J>
Value from_json_impl(const J& j) {
    switch (j.type()) {
        case nlohmann::detail::value_t::null:
            return Value::none();
        case nlohmann::detail::value_t::boolean:
            return Value::boolean(j.template get<bool>());
        case nlohmann::detail::value_t::number_integer:
            return Value::integer(j.template get<int64_t>());
        case nlohmann::detail::value_t::number_unsigned: {
            const auto u = j.template get<uint64_t>();
            if (u > static_cast<uint64_t>(INT64_MAX)) return Value::number(static_cast<double>(u));
            return Value::integer(static_cast<int64_t>(u));
        }
        case nlohmann::detail::value_t::number_float:
            return Value::number(j.template get<double>());
        case nlohmann::detail::value_t::string:
            return Value::string(j.template get<std::string>());
        case nlohmann::detail::value_t::array: {
            List l;
            l.reserve(j.size());
            for (const auto& x : j) l.push_back(from_json_impl(x));
            return Value::make_list(std::move(l));
        }
        case nlohmann::detail::value_t::object: {
            Value d = Value::make_dict();
            for (auto it = j.begin(); it != j.end(); ++it)
                d.dict->items.emplace_back(it.key(), from_json_impl(it.value()));
            return d;
        }
        default:
            throw util::Error("chat template: unsupported JSON value type");
    }
}

Value from_json(const nlohmann::json& j) {
    return from_json_impl(j);
}
Value from_json(const nlohmann::ordered_json& j) {
    return from_json_impl(j);
}

List iterate(const Value& v) {
    switch (v.kind) {
        case Value::Kind::Undefined:
            return {};
        case Value::Kind::Array:
            return *v.list;
        case Value::Kind::Dict: {
            List out;
            for (const auto& kv : v.dict->items) out.push_back(Value::string(kv.first));
            return out;
        }
        case Value::Kind::String: {
            List out;
            for (char32_t cp : utf8_decode(v.s))
                out.push_back(Value::string(utf8_encode(std::u32string(1, cp))));
            return out;
        }
        default:
            throw util::Error(std::string("'") + kind_name(v) + "' object is not iterable");
    }
}

}  // namespace warden::chat_template::jinja
