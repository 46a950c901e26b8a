#include "server/reasoning_effort.h"

#include <array>
#include <regex>
#include <string_view>

#include "server/api_error.h"

namespace warden::server {

namespace {

// vLLM's accepted values (a superset of OpenAI's).
constexpr std::array<std::string_view, 7> kEfforts = {"none", "minimal", "low", "medium",
                                                      "high", "xhigh",   "max"};

// The template names the variable (as a whole identifier, anywhere in its source).
bool reads(const std::string& source, const char* var) {
    return std::regex_search(source, std::regex(std::string("\\b") + var + "\\b"));
}

}  // namespace

void apply_reasoning_effort(const nlohmann::json& b, const std::string& template_source,
                            nlohmann::json& kwargs) {
    if (!b.contains("reasoning_effort") || b["reasoning_effort"].is_null()) return;
    const nlohmann::json& v = b["reasoning_effort"];
    bool known = false;
    if (v.is_string())
        for (std::string_view e : kEfforts) known = known || v.get<std::string>() == e;
    if (!known)
        throw ApiError(400,
                       "'reasoning_effort' must be one of none, minimal, low, medium, high, "
                       "xhigh, max",
                       "reasoning_effort");
    const std::string effort = v.get<std::string>();
    const bool effort_var = reads(template_source, "reasoning_effort");
    const bool thinking_var = reads(template_source, "enable_thinking");
    if (!effort_var && !thinking_var)
        throw ApiError(400,
                       "'reasoning_effort' would change nothing: this model's chat template reads "
                       "neither 'reasoning_effort' nor 'enable_thinking'",
                       "reasoning_effort", "unsupported_field");
    if (effort_var && !kwargs.contains("reasoning_effort")) kwargs["reasoning_effort"] = effort;
    if (thinking_var && !kwargs.contains("enable_thinking"))
        kwargs["enable_thinking"] = effort != "none";
}

}  // namespace warden::server
