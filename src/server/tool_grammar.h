#pragma once
// tool_choice "required" and a named tool, enforced by constrained decoding: the grammar of the
// tool calls the request allows, written in the model's tool-call format (the parser the
// server reads them back with), each call's arguments constrained by its tool's JSON Schema.
#include <nlohmann/json.hpp>
#include <string>

#include "constrain/grammar.h"

namespace warden::server {

// parser: a chat_output tool-parser name; tools: the request's checked `tools`; only: the named
// tool ("" = any of them, i.e. "required"); parallel: one or more calls (else exactly one).
// Throws ApiError(400) naming the field when a schema cannot be enforced, or the format has no
// constrained form.
constrain::Grammar tool_call_grammar(const std::string& parser, const nlohmann::json& tools,
                                     const std::string& only, bool parallel);

}  // namespace warden::server
