#pragma once
// Tool-call parsers: split a model's output into answer text and the tool calls it wrote in its
// family's format, incrementally (streaming) with the same result as parsing it whole.
//   hermes        Qwen2.5 / Qwen3 / Hermes: <tool_call>\n{"name": ..., "arguments":
//   {...}}\n</tool_call> llama3_json   Llama 3.1 / 3.2: the output is {"name": ..., "parameters":
//   {...}} (optionally
//                 after <|python_tag|>), several separated by ';'
//   kimi_k2       <|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:IDX
//                 <|tool_call_argument_begin|>{...}<|tool_call_end|>...<|tool_calls_section_end|>
//   glm45         GLM-4.5 / 4.6: <tool_call>NAME\n<arg_key>K</arg_key>\n<arg_value>V</arg_value>
//                 ...</tool_call> (V raw for strings, JSON otherwise; the tool schema decides)
//   deepseek_v31  <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}
//                 <｜tool▁call▁end｜>...<｜tool▁calls▁end｜>
// Output that does not form a call (no name, bad structure) is returned as answer text; a call
// whose name was read stays a call even when the output ends inside it (finish_reason tells).
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "chat_output/output_delta.h"

namespace warden::chat_output {

class ToolCallParser {
  public:
    virtual ~ToolCallParser() = default;
    // Consumes the next piece of output; `final`: nothing follows. Appends to out.content and
    // out.calls what can no longer change (text that might begin a marker is held back).
    virtual void feed(std::string_view text, bool final, OutputDelta& out) = 0;
};

// The parser names (vLLM's --tool-call-parser names).
const std::vector<std::string>& tool_parser_names();
// tools: the request's `tools` array (GLM-4.5 reads parameter types from it); may be null.
// Throws util::Error for an unknown name.
std::unique_ptr<ToolCallParser> make_tool_parser(const std::string& name,
                                                 const nlohmann::json& tools);
// The parser whose format a chat template writes tool calls in, or "" when it has none.
std::string detect_tool_parser(std::string_view template_source);

}  // namespace warden::chat_output
