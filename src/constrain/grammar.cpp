#include "constrain/grammar.h"

#include <algorithm>
#include <functional>
#include <unordered_map>
#include <unordered_set>

#include "tokenizer/unicode.h"
#include "util/utf8.h"

namespace warden::constrain {

Element Element::chars(std::vector<CharRange> r, bool negated) {
    Element e;
    e.kind = Kind::Chars;
    e.ranges = std::move(r);
    e.negated = negated;
    return e;
}

Element Element::ref(uint32_t rule) {
    Element e;
    e.kind = Kind::Ref;
    e.rule = rule;
    return e;
}

bool Element::matches(uint32_t cp) const {
    bool in = false;
    for (const auto& r : ranges)
        if (cp >= r.lo && cp <= r.hi) {
            in = true;
            break;
        }
    return in != negated;
}

uint32_t Grammar::rule_id(const std::string& name) {
    for (size_t i = 0; i < rules.size(); ++i)
        if (rules[i].name == name) return static_cast<uint32_t>(i);
    rules.push_back(Rule{name, {}});
    return static_cast<uint32_t>(rules.size() - 1);
}

namespace {

// Whether a Chars element matches at least one code point.
bool satisfiable(const Element& e) {
    if (!e.negated) {
        for (const auto& r : e.ranges)
            if (r.lo <= r.hi) return true;
        return false;
    }
    // Negated: unsatisfiable only if the ranges cover every code point.
    std::vector<CharRange> r = e.ranges;
    std::sort(r.begin(), r.end(), [](auto a, auto b) { return a.lo < b.lo; });
    uint32_t next = 0;
    for (const auto& x : r) {
        if (x.lo > next) return true;
        next = std::max(next, x.hi + 1);
    }
    return next <= 0x10FFFF;
}

}  // namespace

void Grammar::validate() const {
    if (rules.empty()) throw SpecError("grammar", "the grammar has no rules");
    if (root >= rules.size()) throw SpecError("grammar", "the grammar has no root rule");
    for (const auto& r : rules) {
        if (r.alts.empty()) throw SpecError("grammar", "rule '" + r.name + "' is not defined");
        for (const auto& seq : r.alts)
            for (const auto& e : seq)
                if (e.kind == Element::Kind::Ref && e.rule >= rules.size())
                    throw SpecError("grammar", "rule '" + r.name + "' refers to a missing rule");
    }
    const size_t n = rules.size();
    // Nullable and productive rules, by fixpoint.
    std::vector<char> nullable(n, 0), productive(n, 0);
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t i = 0; i < n; ++i) {
            for (const auto& seq : rules[i].alts) {
                bool nul = true, prod = true;
                for (const auto& e : seq) {
                    if (e.kind == Element::Kind::Chars) {
                        nul = false;
                        prod = prod && satisfiable(e);
                    } else {
                        nul = nul && nullable[e.rule];
                        prod = prod && productive[e.rule];
                    }
                }
                if (nul && !nullable[i]) nullable[i] = 1, changed = true;
                if (prod && !productive[i]) productive[i] = 1, changed = true;
            }
        }
    }
    if (!productive[root])
        throw SpecError("grammar",
                        "the root rule '" + rules[root].name + "' cannot produce any finite text");
    // Left recursion: an edge r -> s when s can be the first thing r expands to.
    std::vector<std::vector<uint32_t>> first(n);
    for (size_t i = 0; i < n; ++i)
        for (const auto& seq : rules[i].alts)
            for (const auto& e : seq) {
                if (e.kind == Element::Kind::Chars) break;
                first[i].push_back(e.rule);
                if (!nullable[e.rule]) break;
            }
    std::vector<char> color(n, 0);  // 0 new, 1 on the DFS path, 2 done
    std::function<void(uint32_t)> dfs = [&](uint32_t r) {
        color[r] = 1;
        for (uint32_t s : first[r]) {
            if (color[s] == 1)
                throw SpecError("grammar", "rule '" + rules[s].name +
                                               "' is left-recursive (possibly through an empty "
                                               "repetition), which is not supported");
            if (color[s] == 0) dfs(s);
        }
        color[r] = 2;
    };
    for (uint32_t i = 0; i < n; ++i)
        if (color[i] == 0) dfs(i);
}

std::string gbnf_escape(uint32_t cp, bool in_class) {
    if (cp == '\n') return "\\n";
    if (cp == '\r') return "\\r";
    if (cp == '\t') return "\\t";
    if (cp == '\\') return "\\\\";
    if (!in_class && cp == '"') return "\\\"";
    if (in_class && (cp == ']' || cp == '[' || cp == '^' || cp == '-')) {
        std::string s = "\\";
        s += static_cast<char>(cp);
        return s;
    }
    if (cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp < 0xA0)) {
        char buf[8];
        snprintf(buf, sizeof buf, "\\x%02X", cp);
        return buf;
    }
    if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
        char buf[16];
        snprintf(buf, sizeof buf, "\\U%08X", cp);
        return buf;
    }
    std::string s;
    tokenizer::detail::append_utf8(s, cp);
    return s;
}

std::string gbnf_literal(std::string_view utf8) {
    std::string out = "\"";
    for (uint32_t cp : utf8_code_points(utf8, "literal")) out += gbnf_escape(cp, false);
    return out + "\"";
}

namespace {

// Copies every rule of src into dst (fresh, unique names); returns src's root in dst.
uint32_t merge(Grammar& dst, const Grammar& src) {
    const auto offset = static_cast<uint32_t>(dst.rules.size());
    std::unordered_set<std::string> taken;
    for (const auto& r : dst.rules) taken.insert(r.name);
    for (const auto& r : src.rules) {
        Rule c = r;
        std::string name = r.name;
        for (int k = 2; taken.count(name); ++k) name = r.name + "-" + std::to_string(k);
        taken.insert(name);
        c.name = name;
        for (auto& seq : c.alts)
            for (auto& e : seq)
                if (e.kind == Element::Kind::Ref) e.rule += offset;
        dst.rules.push_back(std::move(c));
    }
    return src.root + offset;
}

}  // namespace

std::string Grammar::to_gbnf() const {
    // The root first, named "root", as GBNF expects; a rule already named root is renamed.
    std::vector<std::string> names;
    for (const auto& r : rules) names.push_back(r.name == "root" ? "root-0" : r.name);
    names[root] = "root";
    auto emit_rule = [&](uint32_t id, std::string& out) {
        const Rule& r = rules[id];
        out += names[id] + " ::= ";
        for (size_t a = 0; a < r.alts.size(); ++a) {
            if (a) out += " | ";
            if (r.alts[a].empty()) out += "\"\"";
            for (size_t i = 0; i < r.alts[a].size(); ++i) {
                const Element& e = r.alts[a][i];
                if (i) out += ' ';
                if (e.kind == Element::Kind::Ref) {
                    out += names[e.rule];
                } else if (!e.negated && e.ranges.size() == 1 && e.ranges[0].lo == e.ranges[0].hi) {
                    out += '"';
                    out += gbnf_escape(e.ranges[0].lo, false);
                    out += '"';
                } else {
                    out += e.negated ? "[^" : "[";
                    for (const auto& cr : e.ranges) {
                        out += gbnf_escape(cr.lo, true);
                        if (cr.hi != cr.lo) {
                            out += '-';
                            out += gbnf_escape(cr.hi, true);
                        }
                    }
                    out += "]";
                }
            }
        }
        out += "\n";
    };
    std::string out;
    emit_rule(root, out);
    for (uint32_t i = 0; i < rules.size(); ++i)
        if (i != root) emit_rule(i, out);
    return out;
}

Grammar literal(std::string_view utf8) {
    Grammar g;
    g.root = g.rule_id("literal");
    Sequence seq;
    for (uint32_t cp : utf8_code_points(utf8, "literal")) seq.push_back(Element::point(cp));
    g.rules[g.root].alts.push_back(std::move(seq));
    return g;
}

Grammar sequence(const std::vector<Grammar>& parts) {
    Grammar g;
    g.rules.push_back(Rule{"seq", {}});
    Sequence seq;
    for (const auto& p : parts) seq.push_back(Element::ref(merge(g, p)));
    g.rules[0].alts.push_back(std::move(seq));
    return g;
}

Grammar alternatives(const std::vector<Grammar>& options) {
    Grammar g;
    g.rules.push_back(Rule{"alt", {}});
    for (const auto& p : options) {
        const uint32_t id = merge(g, p);  // grows g.rules: index rules[0] after it
        g.rules[0].alts.push_back({Element::ref(id)});
    }
    return g;
}

Grammar repeat(const Grammar& part, int min, int max) {
    if (min < 0 || (max >= 0 && max < min)) throw SpecError("repeat", "invalid repetition bounds");
    Grammar g;
    g.rules.push_back(Rule{"repeat", {}});
    const uint32_t item = merge(g, part);
    Sequence seq;
    for (int i = 0; i < min; ++i) seq.push_back(Element::ref(item));
    if (max < 0) {
        // star ::= item star | ""
        const auto star = static_cast<uint32_t>(g.rules.size());
        g.rules.push_back(Rule{"repeat-star", {{Element::ref(item), Element::ref(star)}, {}}});
        seq.push_back(Element::ref(star));
    } else if (max > min) {
        // opt_k ::= item opt_{k-1} | ""  (nested, so each count parses one way)
        uint32_t inner = 0;
        bool have_inner = false;
        for (int k = 0; k < max - min; ++k) {
            const auto id = static_cast<uint32_t>(g.rules.size());
            Sequence s{Element::ref(item)};
            if (have_inner) s.push_back(Element::ref(inner));
            g.rules.push_back(Rule{"repeat-opt-" + std::to_string(k), {s, {}}});
            inner = id;
            have_inner = true;
        }
        seq.push_back(Element::ref(inner));
    }
    g.rules[0].alts.push_back(std::move(seq));
    return g;
}

std::vector<uint32_t> utf8_code_points(std::string_view s, const std::string& keyword) {
    if (util::find_invalid_utf8(s) != std::string_view::npos)
        throw SpecError(keyword, "'" + keyword + "' is not valid UTF-8");
    std::vector<uint32_t> out;
    for (size_t i = 0; i < s.size();) {
        const auto b = static_cast<unsigned char>(s[i]);
        uint32_t cp;
        size_t len;
        if (b < 0x80)
            cp = b, len = 1;
        else if (b < 0xE0)
            cp = b & 0x1F, len = 2;
        else if (b < 0xF0)
            cp = b & 0x0F, len = 3;
        else
            cp = b & 0x07, len = 4;
        for (size_t k = 1; k < len; ++k)
            cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
        out.push_back(cp);
        i += len;
    }
    return out;
}

std::vector<CharRange> normalize_ranges(std::vector<CharRange> r, bool negated) {
    std::erase_if(r, [](CharRange x) { return x.lo > x.hi || x.lo > 0x10FFFF; });
    for (auto& x : r) x.hi = std::min<uint32_t>(x.hi, 0x10FFFF);
    std::sort(r.begin(), r.end(), [](auto a, auto b) { return a.lo < b.lo; });
    std::vector<CharRange> merged;
    for (auto x : r) {
        if (!merged.empty() && x.lo <= merged.back().hi + 1)
            merged.back().hi = std::max(merged.back().hi, x.hi);
        else
            merged.push_back(x);
    }
    if (!negated) return merged;
    std::vector<CharRange> comp;
    uint32_t next = 0;
    for (auto x : merged) {
        if (x.lo > next) comp.push_back({next, x.lo - 1});
        next = x.hi + 1;
    }
    if (next <= 0x10FFFF) comp.push_back({next, 0x10FFFF});
    return comp;
}

}  // namespace warden::constrain
