// Built-in tests, str/dict/list methods and global functions of the Jinja subset.
#include <algorithm>
#include <cctype>
#include <ctime>

#include "chat_template/jinja_eval.h"
#include "util/error.h"

namespace warden::chat_template::jinja {

namespace {

bool is_space_cp(char32_t c) {
    return c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f) || c == 0x85 ||
           c == 0xa0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 ||
           c == 0x202f || c == 0x205f || c == 0x3000;
}

const Value& need_arg(const Args& a, size_t i, const char* name, const char* fn) {
    const Value* v = a.get(i, name);
    if (!v) throw util::Error(std::string(fn) + "() missing required argument '" + name + "'");
    return *v;
}

const std::string& need_str(const Value& v, const char* fn) {
    if (!v.is_string())
        throw util::Error(std::string(fn) + "() argument must be str, not " + kind_name(v));
    return v.s;
}

std::string ascii_map(const std::string& s, int (*f)(int)) {
    std::string out = s;
    for (auto& c : out)
        if (static_cast<unsigned char>(c) < 0x80)
            c = static_cast<char>(f(static_cast<unsigned char>(c)));
    return out;
}

// str.split / str.rsplit (sep null: runs of whitespace).
List py_split(const std::string& s, const Value* sep, int64_t maxsplit, bool from_right) {
    List out;
    if (!sep || sep->is_none()) {
        std::u32string cps = utf8_decode(s);
        std::vector<std::u32string> words;
        if (!from_right) {
            size_t k = 0;
            while (k < cps.size()) {
                while (k < cps.size() && is_space_cp(cps[k])) ++k;
                if (k >= cps.size()) break;
                if (maxsplit >= 0 && static_cast<int64_t>(words.size()) == maxsplit) {
                    size_t e = cps.size();
                    while (e > k && is_space_cp(cps[e - 1])) --e;
                    words.push_back(cps.substr(k, e - k));
                    break;
                }
                size_t e = k;
                while (e < cps.size() && !is_space_cp(cps[e])) ++e;
                words.push_back(cps.substr(k, e - k));
                k = e;
            }
        } else {
            size_t k = cps.size();
            while (k > 0) {
                while (k > 0 && is_space_cp(cps[k - 1])) --k;
                if (k == 0) break;
                if (maxsplit >= 0 && static_cast<int64_t>(words.size()) == maxsplit) {
                    size_t b = 0;
                    while (b < k && is_space_cp(cps[b])) ++b;
                    words.push_back(cps.substr(b, k - b));
                    break;
                }
                size_t b = k;
                while (b > 0 && !is_space_cp(cps[b - 1])) --b;
                words.push_back(cps.substr(b, k - b));
                k = b;
            }
            std::reverse(words.begin(), words.end());
        }
        for (auto& w : words) out.push_back(Value::string(utf8_encode(w)));
        return out;
    }
    const std::string& d = need_str(*sep, "split");
    if (d.empty()) throw util::Error("empty separator");
    std::vector<std::string> parts;
    if (!from_right) {
        size_t k = 0;
        while (true) {
            const size_t f = (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit)
                                 ? std::string::npos
                                 : s.find(d, k);
            if (f == std::string::npos) {
                parts.push_back(s.substr(k));
                break;
            }
            parts.push_back(s.substr(k, f - k));
            k = f + d.size();
        }
    } else {
        size_t end = s.size();
        while (true) {
            size_t f = std::string::npos;
            if (!(maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit) &&
                end >= d.size())
                f = s.rfind(d, end - d.size());
            if (f == std::string::npos) {
                parts.push_back(s.substr(0, end));
                break;
            }
            parts.push_back(s.substr(f + d.size(), end - f - d.size()));
            end = f;
        }
        std::reverse(parts.begin(), parts.end());
    }
    for (auto& p : parts) out.push_back(Value::string(std::move(p)));
    return out;
}

std::string py_replace(const std::string& s, const std::string& from, const std::string& to,
                       int64_t count, size_t limit) {
    std::string out;
    if (from.empty()) {
        const std::u32string cps = utf8_decode(s);
        int64_t n = 0;
        for (size_t k = 0; k <= cps.size(); ++k) {
            if (count < 0 || n < count) {
                out += to;
                ++n;
            }
            if (k < cps.size()) out += utf8_encode(cps.substr(k, 1));
            if (out.size() > limit) throw util::Error("replace() result exceeds the output limit");
        }
        return out;
    }
    size_t k = 0;
    int64_t n = 0;
    while (true) {
        const size_t f = (count >= 0 && n >= count) ? std::string::npos : s.find(from, k);
        if (f == std::string::npos) break;
        out.append(s, k, f - k);
        out += to;
        if (out.size() > limit) throw util::Error("replace() result exceeds the output limit");
        k = f + from.size();
        ++n;
    }
    out.append(s, k, std::string::npos);
    return out;
}

bool affix_match(const std::string& s, const Value& affix, bool prefix) {
    auto one = [&](const Value& a) {
        const std::string& x = need_str(a, prefix ? "startswith" : "endswith");
        if (x.size() > s.size()) return false;
        return prefix ? s.compare(0, x.size(), x) == 0
                      : s.compare(s.size() - x.size(), x.size(), x) == 0;
    };
    if (affix.is_list()) {
        for (const auto& a : *affix.list)
            if (one(a)) return true;
        return false;
    }
    return one(affix);
}

int64_t opt_int(const Args& a, size_t i, const char* name, int64_t dflt) {
    const Value* v = a.get(i, name);
    if (!v || v->is_none()) return dflt;
    if (v->kind != Value::Kind::Int && v->kind != Value::Kind::Bool)
        throw util::Error(std::string("argument '") + name + "' must be an integer");
    return v->i;
}

std::string title_case(const std::string& s) {
    std::string out = s;
    bool prev_cased = false;
    for (auto& c : out) {
        const auto u = static_cast<unsigned char>(c);
        const bool alpha = std::isalpha(u) != 0;
        if (alpha) c = static_cast<char>(prev_cased ? std::tolower(u) : std::toupper(u));
        prev_cased = alpha || u >= 0x80;
    }
    return out;
}

Value call_method(Evaluator& ev, const Value& self, const std::string& m, Args& a) {
    if (self.is_string()) {
        const std::string& s = self.s;
        if (m == "startswith" || m == "endswith")
            return Value::boolean(
                affix_match(s, need_arg(a, 0, "prefix", m.c_str()), m == "startswith"));
        if (m == "strip") return Value::string(py_strip(s, a.get(0, "chars"), true, true));
        if (m == "lstrip") return Value::string(py_strip(s, a.get(0, "chars"), true, false));
        if (m == "rstrip") return Value::string(py_strip(s, a.get(0, "chars"), false, true));
        if (m == "split" || m == "rsplit")
            return Value::make_list(
                py_split(s, a.get(0, "sep"), opt_int(a, 1, "maxsplit", -1), m == "rsplit"));
        if (m == "replace")
            return Value::string(py_replace(s,
                                            need_str(need_arg(a, 0, "old", "replace"), "replace"),
                                            need_str(need_arg(a, 1, "new", "replace"), "replace"),
                                            opt_int(a, 2, "count", -1), ev.limits().max_output));
        if (m == "upper") return Value::string(ascii_map(s, ::toupper));
        if (m == "lower") return Value::string(ascii_map(s, ::tolower));
        if (m == "title") return Value::string(title_case(s));
        if (m == "capitalize") {
            std::string out = ascii_map(s, ::tolower);
            if (!out.empty())
                out[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(out[0])));
            return Value::string(out);
        }
        if (m == "find" || m == "rfind" || m == "index" || m == "rindex" || m == "count") {
            const std::string& sub = need_str(need_arg(a, 0, "sub", m.c_str()), m.c_str());
            if (m == "count") {
                if (sub.empty()) return Value::integer(static_cast<int64_t>(utf8_length(s)) + 1);
                int64_t n = 0;
                for (size_t k = s.find(sub); k != std::string::npos;
                     k = s.find(sub, k + sub.size()))
                    ++n;
                return Value::integer(n);
            }
            const size_t f = (m == "find" || m == "index") ? s.find(sub) : s.rfind(sub);
            if (f == std::string::npos) {
                if (m == "index" || m == "rindex") throw util::Error("substring not found");
                return Value::integer(-1);
            }
            return Value::integer(static_cast<int64_t>(utf8_length(s.substr(0, f))));
        }
        if (m == "join") {
            std::string out;
            bool first = true;
            for (const auto& x : iterate(need_arg(a, 0, "iterable", "join"))) {
                if (!first) out += s;
                out += need_str(x, "join");
                first = false;
                ev.check_size(out.size());
            }
            return Value::string(std::move(out));
        }
        if (m == "splitlines") {
            List out;
            size_t k = 0;
            while (k < s.size()) {
                size_t e = s.find('\n', k);
                if (e == std::string::npos) e = s.size();
                std::string line = s.substr(k, e - k);
                if (!line.empty() && line.back() == '\r') line.pop_back();
                out.push_back(Value::string(line));
                k = e + 1;
            }
            return Value::make_list(std::move(out));
        }
        auto all_of = [&](int (*f)(int)) {
            if (s.empty()) return false;
            for (unsigned char c : s)
                if (c >= 0x80 || !f(c)) return false;
            return true;
        };
        if (m == "isdigit") return Value::boolean(all_of(::isdigit));
        if (m == "isalpha") return Value::boolean(all_of(::isalpha));
        if (m == "isalnum") return Value::boolean(all_of(::isalnum));
        if (m == "isspace") return Value::boolean(all_of(::isspace));
        if (m == "isupper" || m == "islower") {
            bool cased = false;
            for (unsigned char c : s) {
                if (std::isalpha(c)) {
                    cased = true;
                    if ((m == "isupper") != (std::isupper(c) != 0)) return Value::boolean(false);
                }
            }
            return Value::boolean(cased);
        }
    } else if (self.is_dict()) {
        if (m == "get") {
            const Value* v = self.dict->find(to_str(need_arg(a, 0, "key", "get")));
            if (v) return *v;
            const Value* d = a.get(1, "default");
            return d ? *d : Value::none();
        }
        if (m == "items" || m == "keys" || m == "values") {
            List out;
            for (const auto& [k, v] : self.dict->items) {
                if (m == "items")
                    out.push_back(Value::make_tuple({Value::string(k), v}));
                else
                    out.push_back(m == "keys" ? Value::string(k) : v);
            }
            return Value::make_list(std::move(out));
        }
    } else if (self.is_list()) {
        if (m == "index" || m == "count") {
            const Value& x = need_arg(a, 0, "value", m.c_str());
            int64_t n = 0;
            for (size_t k = 0; k < self.list->size(); ++k)
                if (equals((*self.list)[k], x)) {
                    if (m == "index") return Value::integer(static_cast<int64_t>(k));
                    ++n;
                }
            if (m == "index") throw util::Error("list.index(x): x not in list");
            return Value::integer(n);
        }
    }
    throw util::Error(std::string("'") + kind_name(self) + "' object has no method '" + m + "'");
}

}  // namespace

std::string py_strip(const std::string& s, const Value* chars, bool left, bool right) {
    const std::u32string cps = utf8_decode(s);
    std::u32string set;
    const bool ws = !chars || chars->is_none() || chars->is_undefined();
    if (!ws) set = utf8_decode(need_str(*chars, "strip"));
    auto strip_it = [&](char32_t c) {
        return ws ? is_space_cp(c) : set.find(c) != std::u32string::npos;
    };
    size_t b = 0, e = cps.size();
    if (left)
        while (b < e && strip_it(cps[b])) ++b;
    if (right)
        while (e > b && strip_it(cps[e - 1])) --e;
    return utf8_encode(cps.substr(b, e - b));
}

Value bound_method(const Value& self, const std::string& name) {
    static const char* str_methods[] = {
        "startswith", "endswith", "strip",   "lstrip", "rstrip",     "split",   "rsplit",
        "replace",    "upper",    "lower",   "title",  "capitalize", "find",    "rfind",
        "index",      "rindex",   "count",   "join",   "splitlines", "isdigit", "isalpha",
        "isalnum",    "isspace",  "isupper", "islower"};
    static const char* dict_methods[] = {"get", "items", "keys", "values"};
    static const char* list_methods[] = {"index", "count"};
    bool found = false;
    if (self.is_string())
        for (const char* m : str_methods) found = found || name == m;
    else if (self.is_dict() && !self.is_namespace)
        for (const char* m : dict_methods) found = found || name == m;
    else if (self.is_list())
        for (const char* m : list_methods) found = found || name == m;
    if (!found) return Value::undefined(name);
    return Value::function(
        [self, name](Evaluator& ev, Args& a) { return call_method(ev, self, name, a); });
}

bool apply_test(Evaluator& ev, const std::string& name, const Value& v, Args& a) {
    using K = Value::Kind;
    if (name == "defined") return !v.is_undefined();
    if (name == "undefined") return v.is_undefined();
    if (name == "none") return v.is_none();
    if (name == "string") return v.is_string();
    if (name == "mapping") return v.is_dict() && !v.is_namespace;
    if (name == "iterable") return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
    if (name == "sequence") return v.is_string() || v.is_list() || (v.is_dict() && !v.is_namespace);
    if (name == "number") return v.is_number();
    if (name == "integer") return v.kind == K::Int;
    if (name == "float") return v.kind == K::Float;
    if (name == "boolean") return v.kind == K::Bool;
    if (name == "true") return v.kind == K::Bool && v.b;
    if (name == "false") return v.kind == K::Bool && !v.b;
    if (name == "callable") return v.is_callable();
    if (name == "lower" || name == "upper") {
        const std::string s = to_str(v);
        bool cased = false;
        for (unsigned char c : s)
            if (std::isalpha(c)) {
                cased = true;
                if ((name == "upper") != (std::isupper(c) != 0)) return false;
            }
        return cased;
    }
    if (name == "odd" || name == "even" || name == "divisibleby") {
        if (v.kind != K::Int && v.kind != K::Bool)
            throw util::Error("test '" + name + "' needs an integer");
        if (name == "divisibleby") {
            const int64_t d = opt_int(a, 0, "num", 0);
            if (d == 0) throw util::Error("integer division or modulo by zero");
            return v.i % d == 0;
        }
        return (v.i % 2 != 0) == (name == "odd");
    }
    if (name == "in") {
        const Value& c = need_arg(a, 0, "seq", "in");
        if (c.is_string()) {
            if (!v.is_string())
                throw util::Error(
                    std::string("'in <string>' requires string as left operand, not ") +
                    kind_name(v));
            return c.s.find(v.s) != std::string::npos;
        }
        if (c.is_list()) {
            for (const auto& x : *c.list)
                if (equals(x, v)) return true;
            return false;
        }
        if (c.is_dict()) return v.is_string() && c.dict->find(v.s) != nullptr;
        if (c.is_undefined()) return false;
        throw util::Error(std::string("argument of type '") + kind_name(c) + "' is not iterable");
    }
    if (name == "sameas") {
        const Value& o = need_arg(a, 0, "other", "sameas");
        if (v.kind != o.kind) return false;
        if (v.is_list()) return v.list == o.list;
        if (v.is_dict()) return v.dict == o.dict;
        return equals(v, o);
    }
    static const std::pair<const char*, const char*> cmp[] = {
        {"equalto", "=="}, {"eq", "=="},         {"==", "=="}, {"ne", "!="}, {"!=", "!="},
        {"lt", "<"},       {"lessthan", "<"},    {"<", "<"},   {"le", "<="}, {"<=", "<="},
        {"gt", ">"},       {"greaterthan", ">"}, {">", ">"},   {"ge", ">="}, {">=", ">="}};
    for (const auto& [t, op] : cmp) {
        if (name != t) continue;
        const Value& o = need_arg(a, 0, "other", t);
        const std::string o2 = op;
        if (o2 == "==") return equals(v, o);
        if (o2 == "!=") return !equals(v, o);
        const int c = compare(v, o);
        return o2 == "<" ? c < 0 : o2 == "<=" ? c <= 0 : o2 == ">" ? c > 0 : c >= 0;
    }
    (void)ev;
    throw util::Error("no test named '" + util::printable(name, 40) + "'");
}

void add_globals(Dict& g) {
    g.set("raise_exception", Value::function([](Evaluator&, Args& a) -> Value {
              const Value* m = a.get(0, "message");
              throw util::Error("raise_exception: " + (m ? to_str(*m) : std::string()));
          }));
    g.set("strftime_now", Value::function([](Evaluator&, Args& a) {
              const std::string& fmt =
                  need_str(need_arg(a, 0, "format", "strftime_now"), "strftime_now");
              const std::time_t now = std::time(nullptr);
              std::tm tm{};
              localtime_r(&now, &tm);
              std::string buf(256 + fmt.size() * 8, '\0');
              const size_t n = std::strftime(buf.data(), buf.size(), fmt.c_str(), &tm);
              buf.resize(n);
              return Value::string(buf);
          }));
    g.set("range", Value::function([](Evaluator& ev, Args& a) {
              int64_t start = 0, stop = 0, step = 1;
              if (a.pos.size() == 1) {
                  stop = opt_int(a, 0, "stop", 0);
              } else if (a.pos.size() >= 2) {
                  start = opt_int(a, 0, "start", 0);
                  stop = opt_int(a, 1, "stop", 0);
                  step = opt_int(a, 2, "step", 1);
              } else {
                  throw util::Error("range expected at least 1 argument");
              }
              if (step == 0) throw util::Error("range() arg 3 must not be zero");
              List out;
              for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step) {
                  if (out.size() >= 100000)
                      throw util::Error("range() too large (limit 100000 items)");
                  ev.step();
                  out.push_back(Value::integer(k));
              }
              return Value::make_list(std::move(out));
          }));
    auto make_dict = [](bool ns) {
        return Value::function([ns](Evaluator&, Args& a) {
            Value d = Value::make_dict();
            d.is_namespace = ns;
            for (const auto& p : a.pos) {
                if (p.is_dict()) {
                    for (const auto& [k, v] : p.dict->items) d.dict->set(k, v);
                } else {
                    throw util::Error(std::string(ns ? "namespace" : "dict") +
                                      "() positional argument must be a dict");
                }
            }
            for (const auto& [k, v] : a.kw) d.dict->set(k, v);
            return d;
        });
    };
    g.set("namespace", make_dict(true));
    g.set("dict", make_dict(false));
}

}  // namespace warden::chat_template::jinja
