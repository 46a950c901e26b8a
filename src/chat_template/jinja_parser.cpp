// Recursive-descent parser for the Jinja subset, with jinja2's operator precedence:
// cond-expr < or < and < not < compare (==, in, ...) < +,- < ~ < *,/,//,% < ** < unary -,+ <
// postfix (., [], ()) and filters/tests (|f, is t).
#include <charconv>
#include <set>

#include "chat_template/jinja_ast.h"
#include "util/error.h"

namespace warden::chat_template::jinja {

namespace {

using T = Token::Type;

class Parser {
  public:
    explicit Parser(const std::vector<Token>& toks) : t_(toks) {}

    Template run() {
        Template tpl;
        std::string end;
        tpl.body = parse_body({}, end);
        return tpl;
    }

  private:
    const std::vector<Token>& t_;
    size_t p_ = 0;
    int depth_ = 0;
    static constexpr int kMaxDepth = 150;

    struct DepthGuard {
        Parser& p;
        explicit DepthGuard(Parser& pp) : p(pp) {
            if (++p.depth_ > kMaxDepth) p.fail(p.cur(), "template nested too deeply");
        }
        ~DepthGuard() { --p.depth_; }
    };

    const Token& cur() const { return t_[p_]; }
    const Token& next() { return t_[p_ < t_.size() - 1 ? p_++ : p_]; }

    [[noreturn]] void fail(const Token& at, const std::string& msg) const {
        throw util::Error("chat template syntax error at line " + std::to_string(at.line) +
                          ", column " + std::to_string(at.col) + ": " + msg);
    }
    static std::string describe(const Token& t) {
        switch (t.type) {
            case T::Eof:
                return "end of template";
            case T::VarEnd:
                return "'}}'";
            case T::BlockEnd:
                return "'%}'";
            case T::VarBegin:
                return "'{{'";
            case T::BlockBegin:
                return "'{%'";
            case T::Text:
                return "text";
            default:
                return "'" + util::printable(t.value, 40) + "'";
        }
    }

    bool is_op(const char* op) const { return cur().type == T::Op && cur().value == op; }
    bool is_name(const char* n) const { return cur().type == T::Name && cur().value == n; }
    void expect_op(const char* op) {
        if (!is_op(op)) fail(cur(), std::string("expected '") + op + "', got " + describe(cur()));
        next();
    }
    std::string expect_name() {
        if (cur().type != T::Name) fail(cur(), "expected a name, got " + describe(cur()));
        return next().value;
    }
    void expect_block_end() {
        if (cur().type != T::BlockEnd) fail(cur(), "expected '%}', got " + describe(cur()));
        next();
    }

    ExprP make(Expr::Kind k, const Token& at) {
        auto e = std::make_unique<Expr>();
        e->kind = k;
        e->line = at.line;
        e->col = at.col;
        return e;
    }
    NodeP make_node(Node::Kind k, const Token& at) {
        auto n = std::make_unique<Node>();
        n->kind = k;
        n->line = at.line;
        n->col = at.col;
        return n;
    }

    // Statements until one of `ends` (a block whose first name is in ends); the matched end
    // name is stored in `end` and the parser stays after that name.
    Body parse_body(const std::set<std::string>& ends, std::string& end) {
        DepthGuard g(*this);
        Body body;
        while (true) {
            const Token& tk = cur();
            if (tk.type == T::Eof) {
                if (!ends.empty()) {
                    std::string want;
                    for (const auto& e : ends) want += (want.empty() ? "'" : " or '") + e + "'";
                    fail(tk, "unexpected end of template, expected " + want);
                }
                return body;
            }
            if (tk.type == T::Text) {
                auto n = make_node(Node::Kind::Text, tk);
                n->text = next().value;
                body.push_back(std::move(n));
            } else if (tk.type == T::VarBegin) {
                next();
                auto n = make_node(Node::Kind::Output, tk);
                n->expr = parse_tuple();
                if (cur().type != T::VarEnd) fail(cur(), "expected '}}', got " + describe(cur()));
                next();
                body.push_back(std::move(n));
            } else if (tk.type == T::BlockBegin) {
                next();
                const Token& name_tok = cur();
                if (name_tok.type != T::Name)
                    fail(name_tok, "expected a statement name, got " + describe(name_tok));
                if (ends.count(name_tok.value)) {
                    end = next().value;
                    return body;
                }
                body.push_back(parse_statement());
            } else {
                fail(tk, "unexpected " + describe(tk));
            }
        }
    }

    NodeP parse_statement() {
        const Token& tk = cur();
        const std::string kw = next().value;
        std::string end;
        if (kw == "if") {
            auto n = make_node(Node::Kind::If, tk);
            ExprP c = parse_expr();
            expect_block_end();
            while (true) {
                Body b = parse_body({"elif", "else", "endif"}, end);
                n->branches.emplace_back(std::move(c), std::move(b));
                if (end == "elif") {
                    c = parse_expr();
                    expect_block_end();
                    continue;
                }
                if (end == "else") {
                    expect_block_end();
                    n->else_body = parse_body({"endif"}, end);
                }
                expect_block_end();
                return n;
            }
        }
        if (kw == "for") {
            auto n = make_node(Node::Kind::For, tk);
            const bool paren = is_op("(");
            if (paren) next();
            n->names.push_back(expect_name());
            while (is_op(",")) {
                next();
                if (is_name("in")) break;
                n->names.push_back(expect_name());
            }
            if (paren) expect_op(")");
            if (!is_name("in")) fail(cur(), "expected 'in', got " + describe(cur()));
            next();
            n->expr = parse_tuple(false);
            if (is_name("if")) {
                next();
                n->cond = parse_expr();
            }
            if (is_name("recursive")) fail(cur(), "recursive for loops are not supported");
            expect_block_end();
            n->body = parse_body({"else", "endfor"}, end);
            if (end == "else") {
                expect_block_end();
                n->else_body = parse_body({"endfor"}, end);
            }
            expect_block_end();
            return n;
        }
        if (kw == "set") {
            const Token& tt = cur();
            std::string first = expect_name();
            if (is_op(".")) {
                next();
                auto n = make_node(Node::Kind::Set, tk);
                auto target = make(Expr::Kind::GetAttr, tt);
                auto base = make(Expr::Kind::Name, tt);
                base->name = first;
                target->kids.push_back(std::move(base));
                target->name = expect_name();
                n->target = std::move(target);
                expect_op("=");
                n->expr = parse_tuple();
                expect_block_end();
                return n;
            }
            std::vector<std::string> names{first};
            while (is_op(",")) {
                next();
                names.push_back(expect_name());
            }
            if (is_op("=")) {
                next();
                auto n = make_node(Node::Kind::Set, tk);
                n->names = std::move(names);
                n->expr = parse_tuple();
                expect_block_end();
                return n;
            }
            if (names.size() != 1) fail(cur(), "expected '='");
            auto n = make_node(Node::Kind::SetBlock, tk);
            n->names = std::move(names);
            expect_block_end();
            n->body = parse_body({"endset"}, end);
            expect_block_end();
            return n;
        }
        if (kw == "macro") {
            auto n = make_node(Node::Kind::Macro, tk);
            n->text = expect_name();
            parse_params(*n);
            expect_block_end();
            n->body = parse_body({"endmacro"}, end);
            if (cur().type == T::Name) next();
            expect_block_end();
            return n;
        }
        if (kw == "call") {
            auto n = make_node(Node::Kind::CallBlock, tk);
            if (is_op("(")) parse_params(*n);
            n->expr = parse_expr();
            if (n->expr->kind != Expr::Kind::Call) fail(tk, "expected a call after 'call'");
            expect_block_end();
            n->body = parse_body({"endcall"}, end);
            expect_block_end();
            return n;
        }
        if (kw == "filter") {
            auto n = make_node(Node::Kind::FilterBlock, tk);
            n->text = expect_name();
            if (is_op("(")) {
                next();
                while (!is_op(")")) {
                    n->filter_args.push_back(parse_expr());
                    if (!is_op(",")) break;
                    next();
                }
                expect_op(")");
            }
            expect_block_end();
            n->body = parse_body({"endfilter"}, end);
            expect_block_end();
            return n;
        }
        if (kw == "generation") {  // HF's assistant-mask extension: renders its body unchanged
            auto n = make_node(Node::Kind::Scope, tk);
            expect_block_end();
            n->body = parse_body({"endgeneration"}, end);
            expect_block_end();
            return n;
        }
        if (kw == "break" || kw == "continue") {
            auto n = make_node(kw == "break" ? Node::Kind::Break : Node::Kind::Continue, tk);
            expect_block_end();
            return n;
        }
        fail(tk, "unknown or unexpected tag '" + util::printable(kw, 40) + "'");
    }

    void parse_params(Node& n) {
        expect_op("(");
        while (!is_op(")")) {
            n.names.push_back(expect_name());
            if (is_op("=")) {
                next();
                n.defaults.push_back(parse_expr());
            } else {
                n.defaults.push_back(nullptr);
            }
            if (!is_op(",")) break;
            next();
        }
        expect_op(")");
    }

    // Expression or bare tuple `a, b`.
    ExprP parse_tuple(bool with_cond = true) {
        const Token& at = cur();
        ExprP e = with_cond ? parse_expr() : parse_or();
        if (!is_op(",")) return e;
        auto t = make(Expr::Kind::ListLit, at);
        t->tuple = true;
        t->kids.push_back(std::move(e));
        while (is_op(",")) {
            next();
            if (cur().type == T::VarEnd || cur().type == T::BlockEnd || is_op("=") || is_name("if"))
                break;
            t->kids.push_back(with_cond ? parse_expr() : parse_or());
        }
        return t;
    }

    ExprP parse_expr() {
        DepthGuard g(*this);
        const Token& at = cur();
        ExprP e = parse_or();
        while (is_name("if")) {
            next();
            auto c = make(Expr::Kind::Cond, at);
            c->kids.push_back(std::move(e));
            c->kids.push_back(parse_or());
            if (is_name("else")) {
                next();
                c->kids.push_back(parse_expr());
            } else {
                c->kids.push_back(nullptr);
            }
            e = std::move(c);
        }
        return e;
    }

    ExprP binary(const Token& at, const std::string& op, ExprP a, ExprP b) {
        auto e = make(Expr::Kind::Binary, at);
        e->name = op;
        e->kids.push_back(std::move(a));
        e->kids.push_back(std::move(b));
        return e;
    }

    ExprP parse_or() {
        ExprP e = parse_and();
        while (is_name("or")) {
            const Token& at = next();
            e = binary(at, "or", std::move(e), parse_and());
        }
        return e;
    }
    ExprP parse_and() {
        ExprP e = parse_not();
        while (is_name("and")) {
            const Token& at = next();
            e = binary(at, "and", std::move(e), parse_not());
        }
        return e;
    }
    ExprP parse_not() {
        DepthGuard g(*this);
        if (is_name("not")) {
            const Token& at = next();
            auto e = make(Expr::Kind::Unary, at);
            e->name = "not";
            e->kids.push_back(parse_not());
            return e;
        }
        return parse_compare();
    }
    ExprP parse_compare() {
        ExprP e = parse_math1();
        while (true) {
            const Token& at = cur();
            std::string op;
            if (at.type == T::Op && (at.value == "==" || at.value == "!=" || at.value == "<" ||
                                     at.value == ">" || at.value == "<=" || at.value == ">=")) {
                op = next().value;
            } else if (is_name("in")) {
                next();
                op = "in";
            } else if (is_name("not") && p_ + 1 < t_.size() && t_[p_ + 1].type == T::Name &&
                       t_[p_ + 1].value == "in") {
                next();
                next();
                op = "not in";
            } else {
                return e;
            }
            e = binary(at, op, std::move(e), parse_math1());
        }
    }
    ExprP parse_math1() {
        ExprP e = parse_concat();
        while (is_op("+") || is_op("-")) {
            const Token& at = next();
            e = binary(at, at.value, std::move(e), parse_concat());
        }
        return e;
    }
    ExprP parse_concat() {
        ExprP e = parse_math2();
        while (is_op("~")) {
            const Token& at = next();
            e = binary(at, "~", std::move(e), parse_math2());
        }
        return e;
    }
    ExprP parse_math2() {
        ExprP e = parse_pow();
        while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
            const Token& at = next();
            e = binary(at, at.value, std::move(e), parse_pow());
        }
        return e;
    }
    ExprP parse_pow() {
        ExprP e = parse_unary();
        while (is_op("**")) {
            const Token& at = next();
            e = binary(at, "**", std::move(e), parse_unary());
        }
        return e;
    }
    ExprP parse_unary(bool with_filter = true) {
        DepthGuard g(*this);
        ExprP e;
        if (is_op("-") || is_op("+")) {
            const Token& at = next();
            e = make(Expr::Kind::Unary, at);
            e->name = at.value;
            e->kids.push_back(parse_unary(false));
        } else {
            e = parse_postfix(parse_primary());
        }
        if (with_filter) e = parse_filter_expr(std::move(e));
        return e;
    }

    ExprP parse_primary() {
        DepthGuard g(*this);
        const Token& at = cur();
        switch (at.type) {
            case T::Name: {
                next();
                const std::string& v = at.value;
                if (v == "true" || v == "True") return constant(at, Value::boolean(true));
                if (v == "false" || v == "False") return constant(at, Value::boolean(false));
                if (v == "none" || v == "None") return constant(at, Value::none());
                auto e = make(Expr::Kind::Name, at);
                e->name = v;
                return e;
            }
            case T::String: {
                std::string s = next().value;
                while (cur().type == T::String) s += next().value;
                return constant(at, Value::string(std::move(s)));
            }
            case T::Int: {
                next();
                int64_t v = 0;
                auto r = std::from_chars(at.value.data(), at.value.data() + at.value.size(), v);
                if (r.ec != std::errc()) fail(at, "integer literal out of range");
                return constant(at, Value::integer(v));
            }
            case T::Float: {
                next();
                return constant(at, Value::number(std::strtod(at.value.c_str(), nullptr)));
            }
            case T::Op: {
                if (at.value == "(") {
                    next();
                    if (is_op(")")) {
                        next();
                        auto e = make(Expr::Kind::ListLit, at);
                        e->tuple = true;
                        return e;
                    }
                    ExprP e = parse_tuple();
                    expect_op(")");
                    return e;
                }
                if (at.value == "[") {
                    next();
                    auto e = make(Expr::Kind::ListLit, at);
                    while (!is_op("]")) {
                        e->kids.push_back(parse_expr());
                        if (!is_op(",")) break;
                        next();
                    }
                    expect_op("]");
                    return e;
                }
                if (at.value == "{") {
                    next();
                    auto e = make(Expr::Kind::DictLit, at);
                    while (!is_op("}")) {
                        e->kids.push_back(parse_expr());
                        expect_op(":");
                        e->kids.push_back(parse_expr());
                        if (!is_op(",")) break;
                        next();
                    }
                    expect_op("}");
                    return e;
                }
                break;
            }
            default:
                break;
        }
        fail(at, "unexpected " + describe(at));
    }

    ExprP constant(const Token& at, Value v) {
        auto e = make(Expr::Kind::Const, at);
        e->value = std::move(v);
        return e;
    }

    ExprP parse_postfix(ExprP e) {
        while (true) {
            const Token& at = cur();
            if (is_op(".")) {
                next();
                auto g = make(Expr::Kind::GetAttr, at);
                if (cur().type == T::Name) {
                    g->name = next().value;
                } else if (cur().type == T::Int) {  // foo.0 is foo[0]
                    g->kind = Expr::Kind::GetItem;
                    g->kids.push_back(std::move(e));
                    g->kids.push_back(constant(cur(), Value::integer(std::stoll(cur().value))));
                    next();
                    e = std::move(g);
                    continue;
                } else {
                    fail(cur(), "expected an attribute name, got " + describe(cur()));
                }
                g->kids.push_back(std::move(e));
                e = std::move(g);
            } else if (is_op("[")) {
                next();
                e = parse_subscript(at, std::move(e));
            } else if (is_op("(")) {
                e = parse_call(at, std::move(e));
            } else {
                return e;
            }
        }
    }

    ExprP parse_subscript(const Token& at, ExprP target) {
        ExprP parts[3];
        int n = 0;
        bool slice = false;
        while (true) {
            if (is_op(":")) {
                slice = true;
                if (++n > 2) fail(cur(), "bad slice");
                next();
                continue;
            }
            if (is_op("]")) break;
            if (parts[n]) fail(cur(), "expected ']' or ':', got " + describe(cur()));
            parts[n] = parse_expr();
        }
        expect_op("]");
        if (!slice) {
            if (!parts[0]) fail(at, "empty subscript");
            auto e = make(Expr::Kind::GetItem, at);
            e->kids.push_back(std::move(target));
            e->kids.push_back(std::move(parts[0]));
            return e;
        }
        auto e = make(Expr::Kind::Slice, at);
        e->kids.push_back(std::move(target));
        for (auto& p : parts) e->kids.push_back(std::move(p));
        return e;
    }

    void parse_args(Expr& e) {
        expect_op("(");
        while (!is_op(")")) {
            if (cur().type == T::Name && p_ + 1 < t_.size() && t_[p_ + 1].type == T::Op &&
                t_[p_ + 1].value == "=") {
                std::string k = next().value;
                next();
                e.kwargs.emplace_back(std::move(k), parse_expr());
            } else {
                if (!e.kwargs.empty()) fail(cur(), "positional argument after keyword argument");
                e.kids.push_back(parse_expr());
            }
            if (!is_op(",")) break;
            next();
        }
        expect_op(")");
    }

    ExprP parse_call(const Token& at, ExprP callee) {
        auto e = make(Expr::Kind::Call, at);
        e->kids.push_back(std::move(callee));
        parse_args(*e);
        return e;
    }

    ExprP parse_filter_expr(ExprP e) {
        while (true) {
            const Token& at = cur();
            if (is_op("|")) {
                next();
                auto f = make(Expr::Kind::Filter, at);
                f->name = expect_name();
                f->kids.push_back(std::move(e));
                if (is_op("(")) parse_args(*f);
                e = std::move(f);
            } else if (is_name("is")) {
                next();
                auto t = make(Expr::Kind::Test, at);
                if (is_name("not")) {
                    next();
                    t->negated = true;
                }
                t->name = expect_name();
                t->kids.push_back(std::move(e));
                if (is_op("(")) {
                    parse_args(*t);
                } else if ((cur().type == T::Name || cur().type == T::String ||
                            cur().type == T::Int || cur().type == T::Float || is_op("[") ||
                            is_op("{")) &&
                           !is_name("else") && !is_name("or") && !is_name("and") &&
                           !is_name("if") && !is_name("in") && !is_name("not") && !is_name("is")) {
                    t->kids.push_back(parse_postfix(parse_primary()));
                }
                e = std::move(t);
            } else if (is_op("(")) {
                e = parse_call(at, std::move(e));
            } else {
                return e;
            }
        }
    }
};

}  // namespace

Template parse(const std::vector<Token>& tokens) {
    return Parser(tokens).run();
}

}  // namespace warden::chat_template::jinja
