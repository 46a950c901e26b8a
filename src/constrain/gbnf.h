#pragma once
// GBNF, the grammar text format of llama.cpp (grammars/README.md there), parsed into a Grammar:
//   root ::= "{" ws pair ("," ws pair)* "}"      rules, one per line (continued after | or inside
//   pair ::= [a-z]+ ":" ws ( "true" | "false" )  parentheses), "root" is the start rule
// Elements: "literal", [class] / [^class] with ranges, . (any code point), rule names, ( groups ),
// postfix * + ? {m} {m,} {m,n}; escapes \n \r \t \\ \" \[ \] \- \^ \xHH \uHHHH \UHHHHHHHH;
// # comments. llama.cpp's token-level elements (<[id]>, <token>) are refused.
#include <string_view>

#include "constrain/grammar.h"

namespace warden::constrain {

// Throws SpecError("grammar", message with the line) on a syntax error, an undefined rule, a
// missing root or a grammar the matcher cannot run (Grammar::validate).
Grammar parse_gbnf(std::string_view text);

}  // namespace warden::constrain
