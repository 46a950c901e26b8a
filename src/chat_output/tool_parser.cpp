#include "chat_output/tool_parser.h"

#include "chat_output/tool_parser_marker.h"
#include "util/error.h"

namespace warden::chat_output {

const std::vector<std::string>& tool_parser_names() {
    static const std::vector<std::string> names = {"hermes", "llama3_json", "kimi_k2", "glm45",
                                                   "deepseek_v31"};
    return names;
}

std::unique_ptr<ToolCallParser> make_tool_parser(const std::string& name,
                                                 const nlohmann::json& tools) {
    if (name == "hermes") return detail::make_hermes_parser();
    if (name == "llama3_json") return detail::make_llama3_json_parser();
    if (name == "kimi_k2") return detail::make_kimi_k2_parser();
    if (name == "glm45") return detail::make_glm45_parser(tools);
    if (name == "deepseek_v31" || name == "deepseek_v3") return detail::make_deepseek_v31_parser();
    throw util::Error("unknown tool-call parser '" + name + "'");
}

std::string detect_tool_parser(std::string_view t) {
    auto has = [&](std::string_view s) { return t.find(s) != std::string_view::npos; };
    if (has("<|tool_calls_section_begin|>") || has("<|tool_call_begin|>") || has("tool_declare"))
        return "kimi_k2";
    if (has("<arg_key>")) return "glm45";
    if (has("<｜tool▁calls▁begin｜>")) return "deepseek_v31";
    if (has("<tool_call>")) return "hermes";
    if (has("<|start_header_id|>") && (has("\"parameters\"") || has("<|python_tag|>")))
        return "llama3_json";
    return "";
}

}  // namespace warden::chat_output
