#include "chat_output/reasoning_parser.h"

#include "chat_output/tool_parser_common.h"
#include "util/error.h"

namespace warden::chat_output {

ReasoningParser::ReasoningParser(std::string open, std::string close, bool starts_inside)
    : open_(std::move(open)),
      close_(std::move(close)),
      state_(starts_inside ? State::Inside : State::Start),
      saw_(starts_inside) {}

void ReasoningParser::feed(std::string_view text, bool final, std::string& reasoning,
                           std::string& content) {
    buf_.append(text);
    for (;;) {
        switch (state_) {
            case State::Start: {
                const size_t i = buf_.find_first_not_of(" \t\r\n");
                if (i == std::string::npos) {
                    if (!final) return;
                    state_ = State::Answer;
                    break;
                }
                const std::string_view rest = std::string_view(buf_).substr(i);
                if (rest.substr(0, open_.size()) == open_) {
                    buf_.erase(0, i + open_.size());
                    state_ = State::Inside;
                    saw_ = true;
                } else if (!final && std::string_view(open_).substr(0, rest.size()) == rest) {
                    return;
                } else {
                    state_ = State::Answer;
                }
                break;
            }
            case State::Inside: {
                const size_t p = buf_.find(close_);
                if (p != std::string::npos) {
                    reasoning.append(buf_, 0, p);
                    buf_.erase(0, p + close_.size());
                    state_ = State::Answer;
                    break;
                }
                const size_t hold = final ? 0 : detail::partial_marker(buf_, close_);
                reasoning.append(buf_, 0, buf_.size() - hold);
                buf_.erase(0, buf_.size() - hold);
                return;
            }
            case State::Answer:
                content += buf_;
                buf_.clear();
                return;
        }
    }
}

const std::vector<std::string>& reasoning_parser_names() {
    static const std::vector<std::string> names = {"deepseek_r1", "qwen3", "glm45", "kimi_k2",
                                                   "deepseek_v3"};
    return names;
}

std::unique_ptr<ReasoningParser> make_reasoning_parser(const std::string& name,
                                                       bool starts_inside) {
    for (const auto& n : reasoning_parser_names())
        if (n == name)
            return std::make_unique<ReasoningParser>("<think>", "</think>", starts_inside);
    throw util::Error("unknown reasoning parser '" + name + "'");
}

std::string detect_reasoning_parser(std::string_view t) {
    if (t.find("</think>") == std::string_view::npos) return "";
    if (t.find("<arg_key>") != std::string_view::npos) return "glm45";
    if (t.find("<|im_middle|>") != std::string_view::npos) return "kimi_k2";
    if (t.find("<｜Assistant｜>") != std::string_view::npos) return "deepseek_r1";
    return "qwen3";
}

bool prompt_opens_reasoning(std::string_view prompt) {
    const std::string_view t = detail::trim(prompt);
    constexpr std::string_view open = "<think>";
    return t.size() >= open.size() && t.substr(t.size() - open.size()) == open;
}

}  // namespace warden::chat_output
