#pragma once
// A practical regular-expression subset compiled to grammar: literals and escapes (\d \w \s and
// their negations, \. \n \t \xHH \uHHHH ...), classes [a-z] [^...], '.', groups (...) (?:...)
// (?P<name>...) (?<name>...), alternation, quantifiers * + ? {m} {m,} {m,n} (lazy forms too:
// same language). ^ and $ are accepted at the ends only. Backreferences, lookaround, word
// boundaries and other assertions are refused (SpecError naming the construct).
#include <string>
#include <string_view>

#include "constrain/grammar.h"

namespace warden::constrain {

// A GBNF expression (parenthesized, usable inside a rule) for text fully matching `re`.
// json_string: the expression generates the *inside of a JSON string* whose decoded value
// matches: '"', '\' and control characters are written escaped, '.' and negated classes never
// produce them raw. search: JSON Schema's pattern semantics (a match anywhere: a side without
// its ^ or $ anchor allows any text there); otherwise the whole text must match.
std::string regex_to_gbnf(std::string_view re, bool json_string = false, bool search = false);

// The grammar of text that fully matches `re` (vLLM's guided_regex semantics).
Grammar regex_grammar(std::string_view re);

}  // namespace warden::constrain
