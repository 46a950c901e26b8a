#pragma once
// Tokens and syntax tree of the Jinja subset (lexer: jinja_lexer.cpp, parser: jinja_parser.cpp,
// evaluation: jinja_eval.cpp).
#include <memory>
#include <string>
#include <vector>

#include "chat_template/jinja_value.h"

namespace warden::chat_template::jinja {

struct Token {
    enum class Type {
        Text,
        VarBegin,
        VarEnd,
        BlockBegin,
        BlockEnd,
        Name,
        String,
        Int,
        Float,
        Op,
        Eof
    };
    Type type;
    std::string value;
    int line = 1, col = 1;
};

// Splits a template into tokens with HF's environment: trim_blocks, lstrip_blocks, newlines
// normalized to \n, one trailing newline dropped. Throws util::Error "line L, column C: ...".
std::vector<Token> lex(const std::string& source);

struct Expr;
using ExprP = std::unique_ptr<Expr>;

struct Expr {
    enum class Kind {
        Const,
        Name,
        GetAttr,
        GetItem,
        Slice,
        Call,
        Filter,
        Test,
        Unary,
        Binary,
        Cond,
        ListLit,
        DictLit
    };
    Kind kind;
    int line = 0, col = 0;
    Value value;              // Const
    std::string name;         // Name, GetAttr attribute, Filter/Test name, Unary/Binary operator
    bool negated = false;     // Test: `is not`
    bool tuple = false;       // ListLit: a tuple literal
    std::vector<ExprP> kids;  // operands; Slice: target, start, stop, step (null when absent)
    std::vector<std::pair<std::string, ExprP>> kwargs;  // Call/Filter/Test keyword arguments
};

struct Node;
using NodeP = std::unique_ptr<Node>;
using Body = std::vector<NodeP>;

struct Node {
    enum class Kind {
        Text,
        Output,
        If,
        For,
        Set,
        SetBlock,
        Macro,
        CallBlock,
        FilterBlock,
        Break,
        Continue,
        Scope
    };
    Kind kind;
    int line = 0, col = 0;
    std::string text;                // Text; Macro name; FilterBlock filter name
    ExprP expr;                      // Output; For iterable; Set value; CallBlock call
    ExprP target;                    // Set/SetBlock target (Name or GetAttr)
    std::vector<std::string> names;  // For targets; Set tuple targets; Macro/CallBlock params
    std::vector<ExprP> defaults;     // Macro/CallBlock param defaults (null when none)
    ExprP cond;                      // For filter condition
    std::vector<std::pair<ExprP, Body>> branches;  // If: (condition, body) for if/elif
    Body body;                       // For/Macro/CallBlock/SetBlock/FilterBlock/Scope body
    Body else_body;                  // If else; For else
    std::vector<ExprP> filter_args;  // FilterBlock arguments
};

struct Template {
    Body body;
};

// Parses tokens into a template. Throws util::Error "line L, column C: ..." on syntax errors.
Template parse(const std::vector<Token>& tokens);

// Rendering limits (runaway templates end with util::Error instead of hanging).
struct Limits {
    size_t max_output = 64u << 20;  // bytes of rendered text (and of any one string value)
    size_t max_steps = 2'000'000;   // evaluated nodes + loop iterations
    int max_depth = 200;            // nested macro calls / expression evaluation depth
};

// Renders with `globals` (a dict) as the outermost scope.
std::string render(const Template& t, const Value& globals, const Limits& limits = {});

}  // namespace warden::chat_template::jinja
