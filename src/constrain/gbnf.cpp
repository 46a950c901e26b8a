#include "constrain/gbnf.h"

#include <cctype>

namespace warden::constrain {

namespace {

constexpr int kMaxRepeat = 1000;  // bound of {m,n}: larger ones are refused, not slowly expanded
constexpr size_t kMaxText = 1 << 20;

class Parser {
  public:
    explicit Parser(std::string_view t) : s_(t) {}

    Grammar run() {
        if (s_.size() > kMaxText) fail("the grammar is longer than 1 MiB");
        skip(true);
        while (i_ < s_.size()) {
            const std::string name = parse_name();
            skip(false);
            if (s_.substr(i_, 3) != "::=") fail("expected '::=' after rule name '" + name + "'");
            i_ += 3;
            skip(false);
            const uint32_t id = g_.rule_id(name);
            if (!g_.rules[id].alts.empty()) fail("rule '" + name + "' is defined twice");
            auto alts = parse_alternatives(false, name);
            g_.rules[id].alts = std::move(alts);
            skip(true);
        }
        bool have_root = false;
        for (uint32_t r = 0; r < g_.rules.size(); ++r)
            if (g_.rules[r].name == "root") g_.root = r, have_root = true;
        if (!have_root) throw SpecError("grammar", "the grammar has no 'root' rule");
        g_.validate();
        return std::move(g_);
    }

  private:
    [[noreturn]] void fail(const std::string& msg) const {
        size_t line = 1;
        for (size_t k = 0; k < i_ && k < s_.size(); ++k) line += s_[k] == '\n';
        throw SpecError("grammar", "grammar line " + std::to_string(line) + ": " + msg);
    }

    // Skips spaces, tabs and comments; newlines too when `newlines`.
    void skip(bool newlines) {
        while (i_ < s_.size()) {
            const char c = s_[i_];
            if (c == ' ' || c == '\t' || (newlines && (c == '\n' || c == '\r'))) {
                ++i_;
            } else if (c == '#') {
                while (i_ < s_.size() && s_[i_] != '\n') ++i_;
            } else {
                break;
            }
        }
    }

    static bool name_char(char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
    }

    std::string parse_name() {
        const size_t b = i_;
        while (i_ < s_.size() && name_char(s_[i_])) ++i_;
        if (b == i_) fail("expected a rule name");
        return std::string(s_.substr(b, i_ - b));
    }

    uint32_t hex(int digits) {
        uint32_t v = 0;
        for (int k = 0; k < digits; ++k) {
            if (i_ >= s_.size() || !std::isxdigit(static_cast<unsigned char>(s_[i_])))
                fail("expected " + std::to_string(digits) + " hex digits");
            const char c = s_[i_++];
            v = v * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(c))
                                                   ? c - '0'
                                                   : std::tolower(c) - 'a' + 10);
        }
        return v;
    }

    // One (possibly escaped) code point of a literal or class.
    uint32_t parse_char() {
        if (i_ >= s_.size()) fail("unexpected end of the grammar");
        const auto b = static_cast<unsigned char>(s_[i_]);
        if (b == '\\') {
            ++i_;
            if (i_ >= s_.size()) fail("unexpected end after '\\'");
            const char e = s_[i_++];
            switch (e) {
                case 'n':
                    return '\n';
                case 'r':
                    return '\r';
                case 't':
                    return '\t';
                case 'x':
                    return hex(2);
                case 'u':
                    return hex(4);
                case 'U':
                    return hex(8);
                default:
                    if (std::ispunct(static_cast<unsigned char>(e)))
                        return static_cast<unsigned char>(e);
                    fail(std::string("unknown escape '\\") + e + "'");
            }
        }
        size_t len = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
        if (i_ + len > s_.size()) fail("invalid UTF-8");
        const auto cps = utf8_code_points(s_.substr(i_, len), "grammar");
        i_ += len;
        return cps.at(0);
    }

    uint32_t aux_rule(const std::string& base, std::vector<Sequence> alts) {
        const auto id = static_cast<uint32_t>(g_.rules.size());
        g_.rules.push_back(Rule{base + "-" + std::to_string(id), std::move(alts)});
        return id;
    }

    int parse_int() {
        const size_t b = i_;
        long v = 0;
        while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) {
            v = v * 10 + (s_[i_++] - '0');
            if (v > kMaxRepeat) fail("repetition bound above " + std::to_string(kMaxRepeat));
        }
        if (b == i_) fail("expected a number in {m,n}");
        return static_cast<int>(v);
    }

    // Applies a postfix operator to seq[from..]: the last symbol (a literal counts as one).
    void apply_postfix(Sequence& seq, size_t from, const std::string& rule_name) {
        Element x;
        if (seq.size() - from == 1) {
            x = seq.back();
        } else {
            Sequence body(seq.begin() + static_cast<std::ptrdiff_t>(from), seq.end());
            x = Element::ref(aux_rule(rule_name, {body}));
        }
        seq.resize(from);
        const char op = s_[i_++];
        int min = 0, max = -1;
        if (op == '*')
            min = 0, max = -1;
        else if (op == '+')
            min = 1, max = -1;
        else if (op == '?')
            min = 0, max = 1;
        else {  // {m} {m,} {m,n}
            skip(false);
            min = parse_int();
            skip(false);
            max = min;
            if (i_ < s_.size() && s_[i_] == ',') {
                ++i_;
                skip(false);
                max = i_ < s_.size() && s_[i_] == '}' ? -1 : parse_int();
                skip(false);
            }
            if (i_ >= s_.size() || s_[i_] != '}') fail("expected '}'");
            ++i_;
            if (max >= 0 && max < min) fail("repetition {m,n} with n < m");
        }
        for (int k = 0; k < min; ++k) seq.push_back(x);
        if (max < 0) {
            const auto star = aux_rule(rule_name, {});
            g_.rules[star].alts = {{x, Element::ref(star)}, {}};
            seq.push_back(Element::ref(star));
        } else if (max > min) {
            uint32_t inner = 0;
            for (int k = 0; k < max - min; ++k) {
                Sequence s{x};
                if (k) s.push_back(Element::ref(inner));
                inner = aux_rule(rule_name, {s, {}});
            }
            seq.push_back(Element::ref(inner));
        }
    }

    Sequence parse_sequence(bool nested, const std::string& rule_name) {
        Sequence seq;
        size_t last = seq.size();
        bool have_last = false;
        while (i_ < s_.size()) {
            skip(nested);
            if (i_ >= s_.size()) break;
            const char c = s_[i_];
            if (c == '"') {
                ++i_;
                last = seq.size();
                while (true) {
                    if (i_ >= s_.size()) fail("unterminated literal");
                    if (s_[i_] == '"') break;
                    if (s_[i_] == '\n') fail("newline inside a literal");
                    seq.push_back(Element::point(parse_char()));
                }
                ++i_;
                // "" is the empty string: nothing to repeat.
                have_last = seq.size() > last;
            } else if (c == '[') {
                ++i_;
                Element e = Element::chars({});
                if (i_ < s_.size() && s_[i_] == '^') e.negated = true, ++i_;
                while (true) {
                    if (i_ >= s_.size()) fail("unterminated character class");
                    if (s_[i_] == ']') break;
                    const uint32_t lo = parse_char();
                    uint32_t hi = lo;
                    if (i_ + 1 < s_.size() && s_[i_] == '-' && s_[i_ + 1] != ']') {
                        ++i_;
                        hi = parse_char();
                        if (hi < lo) fail("character range out of order");
                    }
                    e.ranges.push_back({lo, hi});
                }
                ++i_;
                last = seq.size();
                seq.push_back(std::move(e));
                have_last = true;
            } else if (c == '.') {
                ++i_;
                last = seq.size();
                seq.push_back(Element::chars({}, true));
                have_last = true;
            } else if (c == '(') {
                ++i_;
                auto alts = parse_alternatives(true, rule_name);
                skip(true);
                if (i_ >= s_.size() || s_[i_] != ')') fail("expected ')'");
                ++i_;
                last = seq.size();
                seq.push_back(Element::ref(aux_rule(rule_name, std::move(alts))));
                have_last = true;
            } else if (c == '*' || c == '+' || c == '?' || c == '{') {
                if (!have_last) fail(std::string("'") + c + "' has nothing to repeat");
                apply_postfix(seq, last, rule_name);
                have_last = false;
            } else if (c == '<') {
                fail("token elements (<...>) are not supported");
            } else if (name_char(c)) {
                // A name followed by ::= starts the next rule (only at the top level).
                const size_t save = i_;
                const std::string name = parse_name();
                size_t k = i_;
                while (k < s_.size() && (s_[k] == ' ' || s_[k] == '\t')) ++k;
                if (s_.substr(k, 3) == "::=") {
                    if (nested) fail("expected ')' before rule '" + name + "'");
                    i_ = save;
                    break;
                }
                last = seq.size();
                seq.push_back(Element::ref(g_.rule_id(name)));
                have_last = true;
            } else {
                break;  // '|', ')', newline, or an error the caller reports
            }
        }
        return seq;
    }

    std::vector<Sequence> parse_alternatives(bool nested, const std::string& rule_name = "") {
        const std::string base =
            rule_name.empty() && !g_.rules.empty() ? g_.rules.back().name : rule_name;
        std::vector<Sequence> alts;
        alts.push_back(parse_sequence(nested, base));
        while (true) {
            skip(nested);
            if (i_ < s_.size() && s_[i_] == '|') {
                ++i_;
                skip(true);
                alts.push_back(parse_sequence(nested, base));
                continue;
            }
            break;
        }
        if (!nested && i_ < s_.size() && s_[i_] != '\n' && s_[i_] != '\r' && !name_char(s_[i_]))
            fail(std::string("unexpected '") + s_[i_] + "'");
        return alts;
    }

    std::string_view s_;
    size_t i_ = 0;
    Grammar g_;
};

}  // namespace

Grammar parse_gbnf(std::string_view text) {
    return Parser(text).run();
}

}  // namespace warden::constrain
