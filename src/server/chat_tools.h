#pragma once
// The chat request fields of tool calling and reasoning: `tools`, `tool_choice`,
// `parallel_tool_calls`, `chat_template_kwargs`, and the assistant messages' `tool_calls` as
// chat templates read them. Every bad value is an ApiError(400) naming the field.
#include <nlohmann/json.hpp>
#include <string>

#include "server/api_error.h"

namespace warden::server {

struct ModelInfo;

// How one chat request's output is parsed (see chat_output/).
struct ChatOutputOptions {
    nlohmann::json tools;     // the request's tools; null without
    std::string tool_parser;  // "": tool calls are not read from the output
    bool parallel_tool_calls = true;
    std::string reasoning_parser;          // "": no reasoning split
    bool reasoning_starts_inside = false;  // the rendered prompt opened a reasoning block
    // tool_choice "required" (any tool) or named (tool_choice_name): the output is constrained
    // to tool calls (tool_grammar.h)
    bool tool_required = false;
    std::string tool_choice_name;
    bool active() const { return !tool_parser.empty() || !reasoning_parser.empty(); }
};

// Reads tools / tool_choice / parallel_tool_calls into `out` (and the model's reasoning parser).
void parse_tool_fields(const nlohmann::json& body, const ModelInfo& m, ChatOutputOptions& out);

// `chat_template_kwargs`: an object of extra template variables (e.g. enable_thinking), or {}.
nlohmann::json chat_template_kwargs(const nlohmann::json& body);

// An assistant message's `tool_calls`, checked. args_as_objects: each function.arguments given
// as a JSON string becomes the object it holds, as vLLM passes them (most templates iterate or
// tojson them); false keeps the strings, as transformers passes them (for templates that
// concatenate them as text).
nlohmann::json message_tool_calls(const nlohmann::json& calls, const std::string& param,
                                  bool args_as_objects);

}  // namespace warden::server
