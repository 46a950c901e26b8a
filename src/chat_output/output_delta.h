#pragma once
// What parsing a chat model's raw output yields, piece by piece: reasoning text, answer text
// and tool-call fragments. Concatenating every delta of one output gives its whole parse.
#include <string>
#include <vector>

namespace warden::chat_output {

struct ToolCallDelta {
    int index = 0;          // the call's position among this output's calls
    bool first = false;     // the call's first delta: `name` (and `id` where the format has one)
    std::string id;         // the format's own call id (Kimi-K2: "functions.NAME:IDX"), else ""
    std::string name;       // on the first delta only
    std::string arguments;  // the next piece of the arguments JSON text
};

struct OutputDelta {
    std::string reasoning;
    std::string content;
    std::vector<ToolCallDelta> calls;
    bool empty() const { return reasoning.empty() && content.empty() && calls.empty(); }
};

// One whole call, as the non-streamed response lists them.
struct ToolCall {
    std::string id, name, arguments;
};

}  // namespace warden::chat_output
