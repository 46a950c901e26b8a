#pragma once
// One chat completion's output as the OpenAI API returns it: the reasoning parser (if any)
// splits off reasoning_content, the tool-call parser (if any) reads tool calls out of the
// answer. Streamed (feed pieces) and whole (feed everything, final) give the same result.
// Whitespace is tidied the same way in both: the answer's leading whitespace is dropped, and
// its trailing whitespace is dropped when the output made tool calls.
#include <memory>
#include <string>
#include <string_view>

#include "chat_output/output_delta.h"
#include "chat_output/reasoning_parser.h"
#include "chat_output/tool_parser.h"

namespace warden::chat_output {

class ChatOutputParser {
  public:
    // Either may be null. parallel_calls false: only the first tool call is kept.
    ChatOutputParser(std::unique_ptr<ReasoningParser> reasoning,
                     std::unique_ptr<ToolCallParser> tools, bool parallel_calls);
    OutputDelta feed(std::string_view text, bool final);
    int tool_calls() const { return calls_; }
    bool has_reasoning_parser() const { return reasoning_ != nullptr; }

  private:
    std::unique_ptr<ReasoningParser> reasoning_;
    std::unique_ptr<ToolCallParser> tools_;
    bool parallel_;
    bool content_started_ = false;
    std::string ws_held_;  // trailing whitespace of the answer so far
    int calls_ = 0;
};

// Feeds `text` whole: the parse of a complete output.
struct ParsedOutput {
    std::string reasoning, content;
    std::vector<ToolCall> calls;  // id: the format's own id, else ""
};
ParsedOutput parse_whole(ChatOutputParser& p, std::string_view text);
// Accumulates deltas into a ParsedOutput (streamed chunks reassembled).
void accumulate(ParsedOutput& into, const OutputDelta& d);

}  // namespace warden::chat_output
