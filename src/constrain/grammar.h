#pragma once
// A context-free grammar over Unicode code points, the one representation every structured-output
// form compiles to (JSON Schema, json_object, regex, choice, GBNF text). Rules are alternatives of
// sequences; a sequence element is a set of code points (a literal is a run of one-point sets) or
// a reference to a rule. Repetition and optional parts are expressed by auxiliary rules (the GBNF
// parser and the compilers write them as right recursion, which the matcher runs without growing
// its stacks).
//
// Grammars compose structurally (literal(), sequence(), alternatives(), repeat()), which is how a
// caller wraps a JSON Schema in literal text, e.g. a tool call:
//   sequence({literal("<tool_call>\n"), json_schema_grammar(schema), literal("\n</tool_call>")})
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace warden::constrain {

// A specification (schema, regex, grammar) that cannot be compiled. `keyword` names what was
// refused (a JSON Schema keyword, a regex construct, a GBNF rule) for the API's 400 message.
class SpecError : public std::runtime_error {
  public:
    SpecError(std::string keyword_, const std::string& message)
        : std::runtime_error(message), keyword(std::move(keyword_)) {}
    std::string keyword;
};

struct CharRange {
    uint32_t lo = 0, hi = 0;  // inclusive code points
};

struct Element {
    enum class Kind : uint8_t { Chars, Ref };
    Kind kind = Kind::Chars;
    bool negated = false;           // Chars: every code point NOT in ranges
    std::vector<CharRange> ranges;  // Chars
    uint32_t rule = 0;              // Ref

    static Element chars(std::vector<CharRange> r, bool negated = false);
    static Element point(uint32_t cp) { return chars({{cp, cp}}); }
    static Element ref(uint32_t rule);
    bool matches(uint32_t cp) const;
};

using Sequence = std::vector<Element>;

struct Rule {
    std::string name;
    std::vector<Sequence> alts;  // an empty Sequence is the empty alternative
};

struct Grammar {
    std::vector<Rule> rules;
    uint32_t root = 0;

    // Index of the rule named `name`, creating an empty one if absent.
    uint32_t rule_id(const std::string& name);
    // Throws SpecError when a rule is undefined (no alternatives), the root derives no finite
    // string, or a rule is left-recursive (directly or through nullable prefixes), which the
    // matcher cannot run.
    void validate() const;
    // GBNF text of the grammar (llama.cpp syntax); parse_gbnf(to_gbnf()) is equivalent.
    std::string to_gbnf() const;
};

// Building blocks. Each returns a standalone grammar whose root is the whole; composition
// renames nothing a caller sees (rules are copied with fresh ids).
Grammar literal(std::string_view utf8);  // exactly this text (must be valid UTF-8)
Grammar sequence(const std::vector<Grammar>& parts);
Grammar alternatives(const std::vector<Grammar>& options);
// parts repeated min..max times (max < 0: unbounded).
Grammar repeat(const Grammar& g, int min, int max);

// Code point ranges sorted, clipped to U+10FFFF, overlapping and adjacent ones merged; with
// `negated`, their complement over all code points instead.
std::vector<CharRange> normalize_ranges(std::vector<CharRange> r, bool negated);

// Decodes UTF-8 into code points; throws SpecError(keyword, ...) on invalid input.
std::vector<uint32_t> utf8_code_points(std::string_view s, const std::string& keyword);
// One code point as GBNF writes it inside a "literal" (in_class false) or a [class].
std::string gbnf_escape(uint32_t cp, bool in_class);
// A GBNF "literal" for UTF-8 text.
std::string gbnf_literal(std::string_view utf8);

}  // namespace warden::constrain
