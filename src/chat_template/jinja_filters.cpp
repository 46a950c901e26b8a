// Built-in filters of the Jinja subset, with jinja2 3.1 semantics (tojson as Hugging Face
// overrides it: json.dumps(ensure_ascii=False, indent, separators, sort_keys)).
#include <algorithm>
#include <cctype>
#include <cmath>

#include "chat_template/jinja_eval.h"
#include "util/error.h"

namespace warden::chat_template::jinja {

namespace {

std::string lower_ascii(std::string s) {
    for (auto& c : s)
        if (static_cast<unsigned char>(c) < 0x80)
            c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

bool flag(const Args& a, size_t i, const char* name, bool dflt) {
    const Value* v = a.get(i, name);
    return v ? truthy(*v) : dflt;
}

// Attribute lookup for filters: "a.b" walks nested items; integer parts index lists.
Value attr_path(Evaluator& ev, const Value& v, const Value& attr) {
    if (attr.kind == Value::Kind::Int) return ev.getitem(v, attr);
    Value cur = v;
    const std::string path = to_str(attr);
    size_t k = 0;
    while (true) {
        const size_t dot = path.find('.', k);
        const std::string part =
            path.substr(k, dot == std::string::npos ? std::string::npos : dot - k);
        bool digits = !part.empty();
        for (char c : part) digits = digits && std::isdigit(static_cast<unsigned char>(c));
        if (cur.is_undefined()) return cur;
        cur = digits ? ev.getitem(cur, Value::integer(std::stoll(part)))
                     : ev.getitem(cur, Value::string(part));
        if (dot == std::string::npos) return cur;
        k = dot + 1;
    }
}

// Sort key: strings lowercased unless case_sensitive.
Value sort_key(const Value& v, bool case_sensitive) {
    if (!case_sensitive && v.is_string()) return Value::string(lower_ascii(v.s));
    return v;
}

// select/reject/selectattr/rejectattr.
Value select_impl(Evaluator& ev, const Value& v, Args& a, bool with_attr, bool keep) {
    size_t first = 0;
    Value attr;
    if (with_attr) {
        const Value* at = a.get(0, "attribute");
        if (!at) throw util::Error("selectattr/rejectattr need an attribute name");
        attr = *at;
        first = 1;
    }
    std::string test;
    Args targs;
    if (a.pos.size() > first) {
        test = to_str(a.pos[first]);
        targs.pos.assign(a.pos.begin() + static_cast<std::ptrdiff_t>(first) + 1, a.pos.end());
    }
    List out;
    for (const auto& x : iterate(v)) {
        ev.step();
        const Value item = with_attr ? attr_path(ev, x, attr) : x;
        Args ta = targs;
        const bool ok = test.empty() ? truthy(item) : apply_test(ev, test, item, ta);
        if (ok == keep) out.push_back(x);
    }
    return Value::make_list(std::move(out));
}

std::string html_escape(const std::string& s) {
    std::string out;
    for (char c : s) {
        switch (c) {
            case '&':
                out += "&amp;";
                break;
            case '<':
                out += "&lt;";
                break;
            case '>':
                out += "&gt;";
                break;
            case '"':
                out += "&#34;";
                break;
            case '\'':
                out += "&#39;";
                break;
            default:
                out += c;
        }
    }
    return out;
}

int64_t parse_int(const std::string& s, bool& ok) {
    std::string t = py_strip(s, nullptr, true, true);
    std::string u;
    for (char c : t)
        if (c != '_') u += c;
    ok = false;
    if (u.empty()) return 0;
    size_t k = 0;
    bool neg = false;
    if (u[0] == '+' || u[0] == '-') {
        neg = u[0] == '-';
        k = 1;
    }
    if (k >= u.size()) return 0;
    int64_t v = 0;
    for (; k < u.size(); ++k) {
        if (!std::isdigit(static_cast<unsigned char>(u[k]))) return 0;
        if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, u[k] - '0', &v))
            return 0;
    }
    ok = true;
    return neg ? -v : v;
}

}  // namespace

Value apply_filter(Evaluator& ev, const std::string& name, const Value& v, Args& a) {
    using K = Value::Kind;
    if (name == "safe") return v;
    if (name == "string") return Value::string(to_str(v));
    if (name == "trim") return Value::string(py_strip(to_str(v), a.get(0, "chars"), true, true));
    if (name == "upper" || name == "lower") {
        std::string s = to_str(v);
        for (auto& c : s)
            if (static_cast<unsigned char>(c) < 0x80)
                c = static_cast<char>(name == "upper"
                                          ? std::toupper(static_cast<unsigned char>(c))
                                          : std::tolower(static_cast<unsigned char>(c)));
        return Value::string(s);
    }
    if (name == "capitalize" || name == "title") {
        Args none;
        return ev.call(bound_method(Value::string(to_str(v)), name), none);
    }
    if (name == "length" || name == "count") {
        switch (v.kind) {
            case K::String:
                return Value::integer(static_cast<int64_t>(utf8_length(v.s)));
            case K::Array:
                return Value::integer(static_cast<int64_t>(v.list->size()));
            case K::Dict:
                return Value::integer(static_cast<int64_t>(v.dict->items.size()));
            case K::Undefined:
                return Value::integer(0);
            default:
                throw util::Error(std::string("object of type '") + kind_name(v) +
                                  "' has no len()");
        }
    }
    if (name == "default" || name == "d") {
        const Value* dv = a.get(0, "default_value");
        const bool boolean = flag(a, 1, "boolean", false);
        if (v.is_undefined() || (boolean && !truthy(v))) return dv ? *dv : Value::string("");
        return v;
    }
    if (name == "tojson") {
        const Value* ia = a.get(1, "indent");
        const Value* ea = a.get(0, "ensure_ascii");
        const Value* sa = a.get(2, "separators");
        int indent = -1;
        if (ia && !ia->is_none()) {
            if (ia->kind != K::Int) throw util::Error("tojson: indent must be an integer");
            indent = static_cast<int>(std::clamp<int64_t>(ia->i, 0, 64));
        }
        std::string item_sep = indent >= 0 ? "," : ", ", key_sep = ": ";
        if (sa && !sa->is_none()) {
            if (!sa->is_list() || sa->list->size() != 2)
                throw util::Error("tojson: separators must be a pair of strings");
            item_sep = to_str((*sa->list)[0]);
            key_sep = to_str((*sa->list)[1]);
        }
        std::string s = to_json(v, ea ? truthy(*ea) : false, indent, item_sep, key_sep,
                                flag(a, 3, "sort_keys", false));
        ev.check_size(s.size());
        return Value::string(std::move(s));
    }
    if (name == "first" || name == "last") {
        const List items = iterate(v);
        if (items.empty()) return Value::undefined(name);
        return name == "first" ? items.front() : items.back();
    }
    if (name == "list") return Value::make_list(iterate(v));
    if (name == "items") {
        if (v.is_undefined()) return Value::make_list();
        if (!v.is_dict())
            throw util::Error(std::string("items filter needs a mapping, got ") + kind_name(v));
        List out;
        for (const auto& [k, x] : v.dict->items)
            out.push_back(Value::make_tuple({Value::string(k), x}));
        return Value::make_list(std::move(out));
    }
    if (name == "join") {
        const Value* sep = a.get(0, "d");
        const Value* attr = a.get(1, "attribute");
        std::string out;
        bool first = true;
        for (const auto& x : iterate(v)) {
            if (!first) out += sep ? to_str(*sep) : "";
            out += to_str(attr ? attr_path(ev, x, *attr) : x);
            first = false;
            ev.check_size(out.size());
        }
        return Value::string(std::move(out));
    }
    if (name == "replace") {
        const Value* from = a.get(0, "old");
        const Value* to = a.get(1, "new");
        if (!from || !to) throw util::Error("replace filter needs old and new strings");
        Args margs;
        margs.pos = {Value::string(to_str(*from)), Value::string(to_str(*to))};
        if (const Value* c = a.get(2, "count")) margs.pos.push_back(*c);
        return ev.call(bound_method(Value::string(to_str(v)), "replace"), margs);
    }
    if (name == "reverse") {
        if (v.is_string()) {
            std::u32string cps = utf8_decode(v.s);
            std::reverse(cps.begin(), cps.end());
            return Value::string(utf8_encode(cps));
        }
        List l = iterate(v);
        std::reverse(l.begin(), l.end());
        return Value::make_list(std::move(l));
    }
    if (name == "select" || name == "reject") return select_impl(ev, v, a, false, name == "select");
    if (name == "selectattr" || name == "rejectattr")
        return select_impl(ev, v, a, true, name == "selectattr");
    if (name == "map") {
        const Value* attr = nullptr;
        for (const auto& [k, x] : a.kw)
            if (k == "attribute") attr = &x;
        List out;
        if (attr) {
            const Value* dflt = nullptr;
            for (const auto& [k, x] : a.kw)
                if (k == "default") dflt = &x;
            for (const auto& x : iterate(v)) {
                Value r = attr_path(ev, x, *attr);
                out.push_back(r.is_undefined() && dflt ? *dflt : r);
            }
            return Value::make_list(std::move(out));
        }
        if (a.pos.empty()) throw util::Error("map filter needs a filter name or attribute=");
        const std::string f = to_str(a.pos[0]);
        Args fa;
        fa.pos.assign(a.pos.begin() + 1, a.pos.end());
        fa.kw = a.kw;
        for (const auto& x : iterate(v)) {
            ev.step();
            Args c = fa;
            out.push_back(apply_filter(ev, f, x, c));
        }
        return Value::make_list(std::move(out));
    }
    if (name == "unique") {
        const bool cs = flag(a, 0, "case_sensitive", false);
        const Value* attr = a.get(1, "attribute");
        List out, keys;
        for (const auto& x : iterate(v)) {
            const Value key = sort_key(attr ? attr_path(ev, x, *attr) : x, cs);
            bool seen = false;
            for (const auto& k : keys) seen = seen || equals(k, key);
            if (!seen) {
                keys.push_back(key);
                out.push_back(x);
            }
        }
        return Value::make_list(std::move(out));
    }
    if (name == "sort") {
        const bool rev = flag(a, 0, "reverse", false), cs = flag(a, 1, "case_sensitive", false);
        const Value* attr = a.get(2, "attribute");
        List l = iterate(v);
        std::vector<std::pair<Value, Value>> keyed;
        for (auto& x : l) keyed.emplace_back(sort_key(attr ? attr_path(ev, x, *attr) : x, cs), x);
        std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& p, const auto& q) {
            return rev ? compare(q.first, p.first) < 0 : compare(p.first, q.first) < 0;
        });
        List out;
        for (auto& p : keyed) out.push_back(p.second);
        return Value::make_list(std::move(out));
    }
    if (name == "dictsort") {
        if (!v.is_dict()) throw util::Error("dictsort needs a mapping");
        const bool cs = flag(a, 0, "case_sensitive", false);
        const bool by_value = a.get(1, "by") && to_str(*a.get(1, "by")) == "value";
        const bool rev = flag(a, 2, "reverse", false);
        List items;
        for (const auto& [k, x] : v.dict->items)
            items.push_back(Value::make_tuple({Value::string(k), x}));
        std::stable_sort(items.begin(), items.end(), [&](const Value& p, const Value& q) {
            const Value kp = sort_key((*p.list)[by_value ? 1 : 0], cs),
                        kq = sort_key((*q.list)[by_value ? 1 : 0], cs);
            return rev ? compare(kq, kp) < 0 : compare(kp, kq) < 0;
        });
        return Value::make_list(std::move(items));
    }
    if (name == "min" || name == "max") {
        const bool cs = flag(a, 0, "case_sensitive", false);
        const Value* attr = a.get(1, "attribute");
        const List l = iterate(v);
        if (l.empty()) return Value::undefined(name);
        size_t best = 0;
        for (size_t k = 1; k < l.size(); ++k) {
            const int c = compare(sort_key(attr ? attr_path(ev, l[k], *attr) : l[k], cs),
                                  sort_key(attr ? attr_path(ev, l[best], *attr) : l[best], cs));
            if (name == "min" ? c < 0 : c > 0) best = k;
        }
        return l[best];
    }
    if (name == "sum") {
        const Value* attr = a.get(0, "attribute");
        const Value* start = a.get(1, "start");
        Value acc = start ? *start : Value::integer(0);
        for (const auto& x : iterate(v)) {
            const Value y = attr ? attr_path(ev, x, *attr) : x;
            if (!acc.is_number() || !y.is_number()) throw util::Error("sum filter needs numbers");
            if (acc.kind == K::Float || y.kind == K::Float)
                acc = Value::number(acc.as_double() + y.as_double());
            else if (int64_t r; !__builtin_add_overflow(acc.i, y.i, &r))
                acc = Value::integer(r);
            else
                throw util::Error("integer overflow");
        }
        return acc;
    }
    if (name == "abs") {
        if (v.kind == K::Float) return Value::number(std::fabs(v.f));
        if (v.is_number()) {
            if (v.i == INT64_MIN) throw util::Error("integer overflow");
            return Value::integer(v.i < 0 ? -v.i : v.i);
        }
        throw util::Error(std::string("bad operand type for abs(): '") + kind_name(v) + "'");
    }
    if (name == "int") {
        const Value* dv = a.get(0, "default");
        const Value dflt = dv ? *dv : Value::integer(0);
        if (v.kind == K::Int || v.kind == K::Bool) return Value::integer(v.i);
        if (v.kind == K::Float) {
            if (!std::isfinite(v.f) || std::fabs(v.f) >= 9.2e18) return dflt;
            return Value::integer(static_cast<int64_t>(v.f));
        }
        if (v.is_string()) {
            bool ok = false;
            const int64_t r = parse_int(v.s, ok);
            if (ok) return Value::integer(r);
            char* end = nullptr;
            const std::string t = py_strip(v.s, nullptr, true, true);
            const double d = std::strtod(t.c_str(), &end);
            if (!t.empty() && end && *end == '\0' && std::isfinite(d) && std::fabs(d) < 9.2e18)
                return Value::integer(static_cast<int64_t>(d));
        }
        return dflt;
    }
    if (name == "float") {
        const Value* dv = a.get(0, "default");
        if (v.is_number()) return Value::number(v.as_double());
        if (v.is_string()) {
            const std::string t = py_strip(v.s, nullptr, true, true);
            char* end = nullptr;
            const double d = std::strtod(t.c_str(), &end);
            if (!t.empty() && end && *end == '\0') return Value::number(d);
        }
        return dv ? *dv : Value::number(0.0);
    }
    if (name == "round") {
        if (!v.is_number()) throw util::Error("round filter needs a number");
        const int64_t prec = a.get(0, "precision") ? a.get(0, "precision")->i : 0;
        const std::string method = a.get(1, "method") ? to_str(*a.get(1, "method")) : "common";
        const double scale =
            std::pow(10.0, static_cast<double>(std::clamp<int64_t>(prec, -300, 300)));
        const double x = v.as_double() * scale;
        double r = method == "ceil"    ? std::ceil(x)
                   : method == "floor" ? std::floor(x)
                                       : std::nearbyint(x);
        return Value::number(r / scale);
    }
    if (name == "escape" || name == "e") return Value::string(html_escape(to_str(v)));
    if (name == "indent") {
        const Value* w = a.get(0, "width");
        const std::string ind =
            w ? (w->is_string()
                     ? w->s
                     : std::string(static_cast<size_t>(std::clamp<int64_t>(w->i, 0, 1000)), ' '))
              : std::string(4, ' ');
        const bool first = flag(a, 1, "first", false), blank = flag(a, 2, "blank", false);
        Args none;
        const Value lines_v =
            ev.call(bound_method(Value::string(to_str(v) + "\n"), "splitlines"), none);
        const List& lines = *lines_v.list;
        std::string rv;
        for (size_t k = 0; k < lines.size(); ++k) {
            if (k) {
                rv += "\n";
                if (blank || !lines[k].s.empty()) rv += ind;
            }
            rv += lines[k].s;
        }
        return Value::string(first ? ind + rv : rv);
    }
    if (name == "attr")
        return ev.getattr(v, to_str(a.get(0, "name") ? *a.get(0, "name") : Value::string("")));
    if (name == "wordcount") {
        Args none;
        return Value::integer(static_cast<int64_t>(
            ev.call(bound_method(Value::string(to_str(v)), "split"), none).list->size()));
    }
    throw util::Error("no filter named '" + util::printable(name, 40) + "'");
}

}  // namespace warden::chat_template::jinja
