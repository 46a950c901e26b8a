#include "chat_output/chat_output.h"

namespace warden::chat_output {

ChatOutputParser::ChatOutputParser(std::unique_ptr<ReasoningParser> reasoning,
                                   std::unique_ptr<ToolCallParser> tools, bool parallel_calls)
    : reasoning_(std::move(reasoning)), tools_(std::move(tools)), parallel_(parallel_calls) {}

OutputDelta ChatOutputParser::feed(std::string_view text, bool final) {
    OutputDelta out;
    std::string answer;
    if (reasoning_)
        reasoning_->feed(text, final, out.reasoning, answer);
    else
        answer.assign(text);
    std::string content;
    if (tools_) {
        OutputDelta t;
        tools_->feed(answer, final, t);
        content = std::move(t.content);
        for (auto& c : t.calls) {
            if (!parallel_ && c.index > 0) continue;
            if (c.first) calls_ = std::max(calls_, c.index + 1);
            out.calls.push_back(std::move(c));
        }
    } else {
        content = std::move(answer);
    }
    // Leading whitespace dropped; trailing whitespace held until text follows it.
    std::string_view c = content;
    if (!content_started_) {
        const size_t from = c.find_first_not_of(" \t\r\n");
        c.remove_prefix(from == std::string_view::npos ? c.size() : from);
    }
    const size_t last = c.find_last_not_of(" \t\r\n");
    if (last == std::string_view::npos) {
        ws_held_.append(c);
    } else {
        content_started_ = true;
        out.content = std::move(ws_held_);
        out.content.append(c.substr(0, last + 1));
        ws_held_.assign(c.substr(last + 1));
    }
    if (final) {
        if (calls_ == 0) out.content += ws_held_;
        ws_held_.clear();
    }
    return out;
}

void accumulate(ParsedOutput& into, const OutputDelta& d) {
    into.reasoning += d.reasoning;
    into.content += d.content;
    for (const auto& c : d.calls) {
        if (c.index >= static_cast<int>(into.calls.size()))
            into.calls.resize(static_cast<size_t>(c.index) + 1);
        auto& call = into.calls[static_cast<size_t>(c.index)];
        if (c.first) {
            call.id = c.id;
            call.name = c.name;
        }
        call.arguments += c.arguments;
    }
}

ParsedOutput parse_whole(ChatOutputParser& p, std::string_view text) {
    ParsedOutput out;
    accumulate(out, p.feed(text, true));
    return out;
}

}  // namespace warden::chat_output
