#pragma once
// The chat request's `reasoning_effort` (OpenAI), passed to the chat template the way vLLM
// does: as the template variable `reasoning_effort` (templates with effort levels read it),
// and as `enable_thinking` = (effort != "none") for templates with a thinking switch. Variables
// the request's `chat_template_kwargs` set win. A template that reads neither variable would
// change nothing, so the field is refused there (400) instead of silently ignored.
#include <nlohmann/json.hpp>
#include <string>

namespace warden::server {

// Adds the variables `reasoning_effort` asks for to `kwargs` (the request's
// chat_template_kwargs); template_source: the model's chat template. Nothing when the field is
// absent or null; ApiError(400) naming it for a bad value or a template that reads neither.
void apply_reasoning_effort(const nlohmann::json& body, const std::string& template_source,
                            nlohmann::json& kwargs);

}  // namespace warden::server
