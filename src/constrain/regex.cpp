#include "constrain/regex.h"

#include <algorithm>

#include "constrain/gbnf.h"

namespace warden::constrain {

namespace {

constexpr int kMaxRepeat = 1000;

[[noreturn]] void refuse(const std::string& what) {
    throw SpecError("regex", "unsupported regex: " + what);
}

bool contains(const std::vector<CharRange>& r, uint32_t cp) {
    for (auto x : r)
        if (cp >= x.lo && cp <= x.hi) return true;
    return false;
}

// A GBNF literal of one code point.
std::string quoted(uint32_t cp) {
    std::string s = "\"";
    s += gbnf_escape(cp, false);
    s += '"';
    return s;
}

// A code point written inside a JSON string: escaped where JSON requires it.
std::string json_point(uint32_t cp) {
    switch (cp) {
        case '"':
            return "\"\\\\\\\"\"";  // GBNF "\\\"" : backslash, quote
        case '\\':
            return "\"\\\\\\\\\"";
        case '\n':
            return "\"\\\\n\"";
        case '\t':
            return "\"\\\\t\"";
        case '\r':
            return "\"\\\\r\"";
        case '\b':
            return "\"\\\\b\"";
        case '\f':
            return "\"\\\\f\"";
        default:
            break;
    }
    if (cp < 0x20) {
        char buf[16];
        snprintf(buf, sizeof buf, "\"\\\\u%04X\"", cp);
        return buf;
    }
    return quoted(cp);
}

class RegexCompiler {
  public:
    RegexCompiler(std::string_view re, bool json) : json_(json) {
        cps_ = utf8_code_points(re, "regex");
    }

    std::string run(bool search) {
        bool start_anchor = false, end_anchor = false;
        size_t b = 0, e = cps_.size();
        if (b < e && cps_[b] == '^') start_anchor = true, ++b;
        if (e > b && cps_[e - 1] == '$' && !(e >= 2 && cps_[e - 2] == '\\')) end_anchor = true, --e;
        end_ = e;
        i_ = b;
        std::string body = parse_alt(0);
        if (i_ != end_) refuse("unbalanced ')'");
        if (top_level_alt_ && (start_anchor || end_anchor) && search)
            refuse("anchors around a top-level alternation (group it: ^(a|b)$)");
        std::string out = "(" + body + ")";
        if (search) {
            const std::string any = json_ ? "(" + any_json() + ")*" : "[^\\x00]*";
            if (!start_anchor) out = any + " " + out;
            if (!end_anchor) out = out + " " + any;
            out = "(" + out + ")";
        }
        return out;
    }

  private:
    std::string any_json() const {
        return "[^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})";
    }

    bool at_end() const { return i_ >= end_; }
    uint32_t peek() const { return cps_[i_]; }

    std::string parse_alt(int depth) {
        if (depth > 100) refuse("nesting deeper than 100 groups");
        std::vector<std::string> alts{parse_concat(depth)};
        while (!at_end() && peek() == '|') {
            ++i_;
            if (depth == 0) top_level_alt_ = true;
            alts.push_back(parse_concat(depth));
        }
        if (alts.size() == 1) return alts[0];
        std::string out;
        for (size_t k = 0; k < alts.size(); ++k) {
            if (k) out += " | ";
            out += alts[k].empty() ? "\"\"" : alts[k];
        }
        return out;
    }

    std::string parse_concat(int depth) {
        std::string out;
        while (!at_end() && peek() != '|' && peek() != ')') {
            std::string atom = parse_atom(depth);
            atom = parse_quantifier(atom);
            if (!out.empty()) out += ' ';
            out += atom;
        }
        return out.empty() ? "\"\"" : out;
    }

    int parse_int() {
        const size_t b = i_;
        long v = 0;
        while (!at_end() && peek() >= '0' && peek() <= '9') {
            v = v * 10 + (peek() - '0');
            ++i_;
            if (v > kMaxRepeat) refuse("repetition bound above " + std::to_string(kMaxRepeat));
        }
        if (b == i_) refuse("expected a number in {m,n}");
        return static_cast<int>(v);
    }

    std::string parse_quantifier(const std::string& atom) {
        if (at_end()) return atom;
        const uint32_t c = peek();
        std::string q;
        if (c == '*' || c == '+' || c == '?') {
            ++i_;
            q = std::string(1, static_cast<char>(c));
        } else if (c == '{') {
            // {m}, {m,}, {m,n}; a '{' that starts none of them is a literal.
            const size_t save = i_;
            ++i_;
            if (at_end() || peek() < '0' || peek() > '9') {
                i_ = save;
                return atom;
            }
            const int m = parse_int();
            int n = m;
            if (!at_end() && peek() == ',') {
                ++i_;
                n = !at_end() && peek() == '}' ? -1 : parse_int();
            }
            if (at_end() || peek() != '}') refuse("malformed {m,n}");
            ++i_;
            if (n >= 0 && n < m) refuse("{m,n} with n < m");
            q = "{";
            q += std::to_string(m);
            if (n != m) {
                q += ',';
                if (n >= 0) q += std::to_string(n);
            }
            q += '}';
        } else {
            return atom;
        }
        if (!at_end() && peek() == '?')
            ++i_;  // lazy: the same language
        else if (!at_end() && peek() == '+')
            refuse("possessive quantifiers");
        if (!at_end() && (peek() == '*' || peek() == '+' || peek() == '?' || peek() == '{'))
            refuse("a quantifier after a quantifier");
        std::string out = "(";
        out += atom;
        out += ')';
        out += q;
        return out;
    }

    std::string set_expr(std::vector<CharRange> ranges, bool negated) {
        std::vector<CharRange> pos = normalize_ranges(std::move(ranges), negated);
        std::vector<std::string> alts;
        if (json_) {
            // Raw characters JSON forbids inside a string are written escaped instead.
            for (uint32_t special :
                 {uint32_t{'"'}, uint32_t{'\\'}, uint32_t{'\n'}, uint32_t{'\t'}, uint32_t{'\r'}})
                if (contains(pos, special)) alts.push_back(json_point(special));
            std::vector<CharRange> allowed;
            for (auto x : pos) {
                // Subtract 0x00-0x1F, '"' and '\'.
                uint32_t lo = std::max<uint32_t>(x.lo, 0x20);
                const uint32_t hi = x.hi;
                for (uint32_t cut : {uint32_t{'"'}, uint32_t{'\\'}}) {
                    if (lo > hi) break;
                    if (cut >= lo && cut <= hi) {
                        if (cut > lo) allowed.push_back({lo, cut - 1});
                        lo = cut + 1;
                    }
                }
                if (lo <= hi) allowed.push_back({lo, hi});
            }
            pos = std::move(allowed);
        }
        if (!pos.empty()) {
            std::string cls = "[";
            for (auto x : pos) {
                cls += gbnf_escape(x.lo, true);
                if (x.hi != x.lo) {
                    cls += '-';
                    cls += gbnf_escape(x.hi, true);
                }
            }
            alts.insert(alts.begin(), cls + "]");
        }
        if (alts.empty()) return "[]";  // matches nothing
        if (alts.size() == 1) return alts[0];
        std::string out = "(";
        for (size_t k = 0; k < alts.size(); ++k) {
            if (k) out += " | ";
            out += alts[k];
        }
        out += ')';
        return out;
    }

    std::string point_expr(uint32_t cp) { return json_ ? json_point(cp) : quoted(cp); }

    // \d \w \s and negations as ranges; false if `c` is not a class escape.
    static bool class_escape(uint32_t c, std::vector<CharRange>& r, bool& negated) {
        negated = c == 'D' || c == 'W' || c == 'S';
        switch (c) {
            case 'd':
            case 'D':
                r = {{'0', '9'}};
                return true;
            case 'w':
            case 'W':
                r = {{'a', 'z'}, {'A', 'Z'}, {'0', '9'}, {'_', '_'}};
                return true;
            case 's':
            case 'S':
                r = {{' ', ' '}, {'\t', '\r'}};
                return true;
            default:
                return false;
        }
    }

    uint32_t hex(int digits) {
        uint32_t v = 0;
        for (int k = 0; k < digits; ++k) {
            if (at_end()) refuse("truncated hex escape");
            const uint32_t c = peek();
            ++i_;
            if (c >= '0' && c <= '9')
                v = v * 16 + (c - '0');
            else if (c >= 'a' && c <= 'f')
                v = v * 16 + (c - 'a' + 10);
            else if (c >= 'A' && c <= 'F')
                v = v * 16 + (c - 'A' + 10);
            else
                refuse("bad hex escape");
        }
        return v;
    }

    // A single-character escape (after '\'), as a code point.
    uint32_t char_escape(uint32_t c) {
        switch (c) {
            case 'n':
                return '\n';
            case 't':
                return '\t';
            case 'r':
                return '\r';
            case 'f':
                return '\f';
            case 'v':
                return '\v';
            case '0':
                return 0;
            case 'x':
                return hex(2);
            case 'u':
                return hex(4);
            default:
                break;
        }
        if (c >= '1' && c <= '9') refuse("backreferences");
        if (c == 'b' || c == 'B' || c == 'A' || c == 'z' || c == 'Z' || c == 'G')
            refuse(std::string("the assertion \\") + static_cast<char>(c));
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
            refuse(std::string("the escape \\") + static_cast<char>(c));
        return c;  // escaped punctuation stands for itself
    }

    std::string parse_atom(int depth) {
        const uint32_t c = peek();
        ++i_;
        switch (c) {
            case '(': {
                if (!at_end() && peek() == '?') {
                    ++i_;
                    if (!at_end() && peek() == ':') {
                        ++i_;
                    } else if (!at_end() && (peek() == 'P' || peek() == '<') &&
                               !(peek() == '<' && i_ + 1 < end_ &&
                                 (cps_[i_ + 1] == '=' || cps_[i_ + 1] == '!'))) {
                        // Named group: skip the name.
                        while (!at_end() && peek() != '>') ++i_;
                        if (at_end()) refuse("unterminated group name");
                        ++i_;
                    } else {
                        refuse("lookaround and inline flags ((?...))");
                    }
                }
                std::string inner = parse_alt(depth + 1);
                if (at_end() || peek() != ')') refuse("missing ')'");
                ++i_;
                return "(" + inner + ")";
            }
            case '[':
                return parse_class();
            case '.':
                return json_ ? set_expr({{'\n', '\n'}}, true) : "[^\\n]";
            case '\\': {
                if (at_end()) refuse("trailing backslash");
                const uint32_t e = peek();
                ++i_;
                std::vector<CharRange> r;
                bool neg = false;
                if (class_escape(e, r, neg)) return set_expr(r, neg);
                return point_expr(char_escape(e));
            }
            case '^':
                refuse("'^' other than at the start");
            case '$':
                refuse("'$' other than at the end");
            case '*':
            case '+':
            case '?':
                refuse("a quantifier with nothing to repeat");
            case ')':
                refuse("unbalanced ')'");
            default:
                return point_expr(c);
        }
    }

    std::string parse_class() {
        std::vector<CharRange> r;
        bool negated = false;
        if (!at_end() && peek() == '^') negated = true, ++i_;
        bool first = true;
        while (true) {
            if (at_end()) refuse("unterminated character class");
            uint32_t c = peek();
            if (c == ']' && !first) {
                ++i_;
                break;
            }
            first = false;
            ++i_;
            if (c == '[' && !at_end() && peek() == ':') refuse("POSIX classes ([:alpha:])");
            if (c == '\\') {
                if (at_end()) refuse("trailing backslash");
                const uint32_t e = peek();
                ++i_;
                std::vector<CharRange> cr;
                bool neg = false;
                if (class_escape(e, cr, neg)) {
                    if (neg) refuse("negated class escapes inside a class");
                    r.insert(r.end(), cr.begin(), cr.end());
                    continue;
                }
                c = e == 'b' ? '\b' : char_escape(e);
            }
            uint32_t hi = c;
            if (i_ + 1 < end_ && peek() == '-' && cps_[i_ + 1] != ']') {
                ++i_;
                hi = peek();
                ++i_;
                if (hi == '\\') {
                    if (at_end()) refuse("trailing backslash");
                    const uint32_t e = peek();
                    ++i_;
                    hi = char_escape(e);
                }
                if (hi < c) refuse("a class range out of order");
            }
            r.push_back({c, hi});
        }
        return set_expr(std::move(r), negated);
    }

    std::vector<uint32_t> cps_;
    size_t i_ = 0, end_ = 0;
    bool json_ = false;
    bool top_level_alt_ = false;
};

}  // namespace

std::string regex_to_gbnf(std::string_view re, bool json_string, bool search) {
    if (re.size() > 16384) throw SpecError("regex", "the regex is longer than 16 KiB");
    return RegexCompiler(re, json_string).run(search);
}

Grammar regex_grammar(std::string_view re) {
    return parse_gbnf("root ::= " + regex_to_gbnf(re, false, false) + "\n");
}

}  // namespace warden::constrain
