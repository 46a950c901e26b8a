// Jinja lexer with the whitespace rules of Hugging Face's environment (trim_blocks=True,
// lstrip_blocks=True, keep_trailing_newline=False), mirroring jinja2/lexer.py.
#include <cctype>
#include <cstring>

#include "chat_template/jinja_ast.h"
#include "util/error.h"

namespace warden::chat_template::jinja {

namespace {

bool is_ws(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

class Lexer {
  public:
    explicit Lexer(std::string src) : s_(std::move(src)) {}

    std::vector<Token> run() {
        bool line_starting = true;
        while (pos_ < s_.size()) {
            // Find the next tag start.
            size_t t = s_.find('{', pos_);
            while (t != std::string::npos && t + 1 < s_.size() && s_[t + 1] != '{' &&
                   s_[t + 1] != '%' && s_[t + 1] != '#')
                t = s_.find('{', t + 1);
            if (t == std::string::npos || t + 1 >= s_.size()) {
                emit_text(s_.substr(pos_), pos_);
                pos_ = s_.size();
                break;
            }
            std::string text = s_.substr(pos_, t - pos_);
            const size_t text_pos = pos_;
            const char kind = s_[t + 1];
            const char sign = t + 2 < s_.size() ? s_[t + 2] : '\0';
            if (sign == '-') {
                while (!text.empty() && is_ws(text.back())) text.pop_back();
            } else if (sign != '+' && kind != '{') {
                const size_t nl = text.rfind('\n');
                const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
                if (l_pos > 0 || line_starting) {
                    bool all_ws = l_pos < text.size();
                    for (size_t k = l_pos; k < text.size(); ++k) all_ws = all_ws && is_ws(text[k]);
                    if (all_ws) text.resize(l_pos);
                }
            }
            emit_text(text, text_pos);
            pos_ = t + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
            if (kind == '#') {
                lex_comment(t);
            } else if (kind == '%' && try_raw(t)) {
                // raw block consumed
            } else {
                lex_tag(kind == '{', t);
            }
            line_starting = pos_ > 0 && s_[pos_ - 1] == '\n';
        }
        Token eof{Token::Type::Eof, "", 0, 0};
        set_pos(eof, s_.size());
        toks_.push_back(eof);
        return std::move(toks_);
    }

  private:
    std::string s_;
    size_t pos_ = 0;
    std::vector<Token> toks_;

    [[noreturn]] void fail(size_t at, const std::string& msg) const {
        Token t;
        set_pos(t, at);
        throw util::Error("chat template syntax error at line " + std::to_string(t.line) +
                          ", column " + std::to_string(t.col) + ": " + msg);
    }

    void set_pos(Token& t, size_t at) const {
        if (at < cache_at_) cache_at_ = cache_line_start_ = 0, cache_line_ = 1;
        for (size_t k = cache_at_; k < at && k < s_.size(); ++k)
            if (s_[k] == '\n') {
                ++cache_line_;
                cache_line_start_ = k + 1;
            }
        cache_at_ = at;
        t.line = cache_line_;
        t.col = static_cast<int>(at - cache_line_start_) + 1;
    }
    mutable size_t cache_at_ = 0, cache_line_start_ = 0;
    mutable int cache_line_ = 1;

    void push(Token::Type type, std::string v, size_t at) {
        Token t{type, std::move(v), 0, 0};
        set_pos(t, at);
        toks_.push_back(std::move(t));
    }

    void emit_text(const std::string& text, size_t at) {
        if (!text.empty()) push(Token::Type::Text, text, at);
    }

    // After `%}`/`#}` (trim_blocks: one newline) or `-X}` (all whitespace).
    void after_end(char sign, bool block) {
        if (sign == '-') {
            while (pos_ < s_.size() && is_ws(s_[pos_])) ++pos_;
        } else if (sign != '+' && block && pos_ < s_.size() && s_[pos_] == '\n') {
            ++pos_;
        }
    }

    void lex_comment(size_t start) {
        const size_t e = s_.find("#}", pos_);
        if (e == std::string::npos) fail(start, "missing end of comment tag");
        const char sign = e > pos_ && (s_[e - 1] == '-' || s_[e - 1] == '+') ? s_[e - 1] : '\0';
        pos_ = e + 2;
        after_end(sign, true);
    }

    // {% raw %}...{% endraw %}: the content is text, verbatim.
    bool try_raw(size_t start) {
        size_t p = pos_;
        while (p < s_.size() && is_ws(s_[p])) ++p;
        if (s_.compare(p, 3, "raw") != 0) return false;
        p += 3;
        while (p < s_.size() && is_ws(s_[p])) ++p;
        char sign = '\0';
        if (p < s_.size() && (s_[p] == '-' || s_[p] == '+')) sign = s_[p++];
        if (s_.compare(p, 2, "%}") != 0) return false;
        pos_ = p + 2;
        after_end(sign, true);
        // Find {%[-+]? endraw [-+]?%}
        size_t q = pos_;
        while (true) {
            q = s_.find("{%", q);
            if (q == std::string::npos) fail(start, "missing end of raw directive");
            size_t r = q + 2;
            char lsign = '\0';
            if (r < s_.size() && (s_[r] == '-' || s_[r] == '+')) lsign = s_[r++];
            while (r < s_.size() && is_ws(s_[r])) ++r;
            if (s_.compare(r, 6, "endraw") == 0) {
                r += 6;
                while (r < s_.size() && is_ws(s_[r])) ++r;
                char rsign = '\0';
                if (r < s_.size() && (s_[r] == '-' || s_[r] == '+')) rsign = s_[r++];
                if (s_.compare(r, 2, "%}") == 0) {
                    std::string text = s_.substr(pos_, q - pos_);
                    if (lsign == '-')
                        while (!text.empty() && is_ws(text.back())) text.pop_back();
                    emit_text(text, pos_);
                    pos_ = r + 2;
                    after_end(rsign, true);
                    return true;
                }
            }
            q += 2;
        }
    }

    void lex_tag(bool variable, size_t start) {
        push(variable ? Token::Type::VarBegin : Token::Type::BlockBegin, "", start);
        int depth = 0;
        while (true) {
            while (pos_ < s_.size() && is_ws(s_[pos_])) ++pos_;
            if (pos_ >= s_.size())
                fail(start, variable ? "unexpected end of template, expected '}}'"
                                     : "unexpected end of template, expected '%}'");
            const char c = s_[pos_];
            if (depth == 0) {
                const char* close = variable ? "}}" : "%}";
                char sign = '\0';
                size_t p = pos_;
                if ((c == '-' || c == '+') && s_.compare(pos_ + 1, 2, close) == 0) sign = s_[p++];
                if (s_.compare(p, 2, close) == 0 && (sign != '+' || !variable)) {
                    push(variable ? Token::Type::VarEnd : Token::Type::BlockEnd, "", pos_);
                    pos_ = p + 2;
                    after_end(sign, !variable);
                    return;
                }
            }
            const size_t at = pos_;
            if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
                size_t e = pos_;
                while (e < s_.size() &&
                       (std::isalnum(static_cast<unsigned char>(s_[e])) || s_[e] == '_'))
                    ++e;
                push(Token::Type::Name, s_.substr(pos_, e - pos_), at);
                pos_ = e;
            } else if (std::isdigit(static_cast<unsigned char>(c))) {
                lex_number(at);
            } else if (c == '\'' || c == '"') {
                lex_string(at);
            } else {
                static const char* ops2[] = {"//", "**", "==", "!=", "<=", ">="};
                std::string op;
                for (const char* o : ops2)
                    if (s_.compare(pos_, 2, o) == 0) op = o;
                if (op.empty()) {
                    if (!std::strchr("+-*/%~<>=()[]{},.:|;", c))
                        fail(at, std::string("unexpected character '") +
                                     util::printable(std::string(1, c)) + "'");
                    op = std::string(1, c);
                }
                if (op == "(" || op == "[" || op == "{") ++depth;
                if (op == ")" || op == "]" || op == "}") {
                    if (depth == 0) fail(at, "unexpected '" + op + "'");
                    --depth;
                }
                push(Token::Type::Op, op, at);
                pos_ += op.size();
            }
        }
    }

    void lex_number(size_t at) {
        size_t e = pos_;
        auto digits = [&] {
            while (e < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[e])) ||
                                     (s_[e] == '_' && e + 1 < s_.size() &&
                                      std::isdigit(static_cast<unsigned char>(s_[e + 1])))))
                ++e;
        };
        digits();
        bool is_float = false;
        if (e + 1 < s_.size() && s_[e] == '.' &&
            std::isdigit(static_cast<unsigned char>(s_[e + 1]))) {
            ++e;
            digits();
            is_float = true;
        }
        if (e < s_.size() && (s_[e] == 'e' || s_[e] == 'E')) {
            size_t f = e + 1;
            if (f < s_.size() && (s_[f] == '+' || s_[f] == '-')) ++f;
            if (f < s_.size() && std::isdigit(static_cast<unsigned char>(s_[f]))) {
                e = f;
                digits();
                is_float = true;
            }
        }
        std::string num;
        for (size_t k = pos_; k < e; ++k)
            if (s_[k] != '_') num += s_[k];
        push(is_float ? Token::Type::Float : Token::Type::Int, num, at);
        pos_ = e;
    }

    void lex_string(size_t at) {
        const char q = s_[pos_];
        std::u32string out;
        size_t p = pos_ + 1;
        std::string raw;
        while (true) {
            if (p >= s_.size()) fail(at, "unterminated string");
            const char c = s_[p];
            if (c == q) break;
            if (c == '\\' && p + 1 < s_.size()) {
                raw += s_.substr(p, 2);
                p += 2;
                continue;
            }
            raw += c;
            ++p;
        }
        pos_ = p + 1;
        // Python unicode-escape decoding of the literal.
        const std::u32string cps = utf8_decode(raw);
        for (size_t k = 0; k < cps.size(); ++k) {
            if (cps[k] != '\\' || k + 1 >= cps.size()) {
                out += cps[k];
                continue;
            }
            const char32_t e = cps[++k];
            auto hex = [&](size_t n) -> char32_t {
                char32_t v = 0;
                for (size_t m = 0; m < n; ++m) {
                    if (k + 1 >= cps.size()) fail(at, "truncated \\x/\\u escape");
                    const char32_t h = cps[++k];
                    int d = h >= '0' && h <= '9'   ? int(h - '0')
                            : h >= 'a' && h <= 'f' ? int(h - 'a' + 10)
                            : h >= 'A' && h <= 'F' ? int(h - 'A' + 10)
                                                   : -1;
                    if (d < 0) fail(at, "bad \\x/\\u escape");
                    v = v * 16 + static_cast<char32_t>(d);
                }
                if (v > 0x10FFFF) fail(at, "bad \\U escape");
                return v;
            };
            switch (e) {
                case 'n':
                    out += U'\n';
                    break;
                case 't':
                    out += U'\t';
                    break;
                case 'r':
                    out += U'\r';
                    break;
                case '\\':
                    out += U'\\';
                    break;
                case '\'':
                    out += U'\'';
                    break;
                case '"':
                    out += U'"';
                    break;
                case 'a':
                    out += U'\a';
                    break;
                case 'b':
                    out += U'\b';
                    break;
                case 'f':
                    out += U'\f';
                    break;
                case 'v':
                    out += U'\v';
                    break;
                case '\n':
                    break;
                case 'x':
                    out += hex(2);
                    break;
                case 'u':
                    out += hex(4);
                    break;
                case 'U':
                    out += hex(8);
                    break;
                default:
                    if (e >= '0' && e <= '7') {
                        char32_t v = e - '0';
                        for (int m = 0;
                             m < 2 && k + 1 < cps.size() && cps[k + 1] >= '0' && cps[k + 1] <= '7';
                             ++m)
                            v = v * 8 + (cps[++k] - '0');
                        out += v;
                    } else {
                        out += U'\\';
                        out += e;
                    }
            }
        }
        push(Token::Type::String, utf8_encode(out), at);
    }
};

}  // namespace

std::vector<Token> lex(const std::string& source) {
    // Newlines normalized to \n; one trailing newline dropped (keep_trailing_newline=False).
    std::string s;
    s.reserve(source.size());
    for (size_t k = 0; k < source.size(); ++k) {
        if (source[k] == '\r') {
            s += '\n';
            if (k + 1 < source.size() && source[k + 1] == '\n') ++k;
        } else {
            s += source[k];
        }
    }
    if (!s.empty() && s.back() == '\n') s.pop_back();
    return Lexer(std::move(s)).run();
}

}  // namespace warden::chat_template::jinja
