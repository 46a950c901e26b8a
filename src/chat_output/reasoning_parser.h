#pragma once
// Reasoning parsers: split a thinking model's output into its reasoning and its answer,
// incrementally. The families warden runs (DeepSeek-R1 distills, Qwen3, GLM-4.5, Kimi-K2-Thinking,
// DeepSeek-V3.1 in thinking mode) all write <think>reasoning</think>answer; their difference is
// whether the opening tag is part of the output or of the prompt (the chat template's
// generation prompt may end with "<think>\n"), which the caller passes as `starts_inside`.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace warden::chat_output {

class ReasoningParser {
  public:
    // starts_inside: the prompt ends inside a reasoning block (its last non-space text is the
    // opening tag), so the output starts with reasoning.
    ReasoningParser(std::string open, std::string close, bool starts_inside);
    // Consumes the next piece of output; `final`: nothing follows. Appends to reasoning and
    // content what can no longer change. Output that does not start with the opening tag is
    // all answer; reasoning the output never closes stays reasoning.
    void feed(std::string_view text, bool final, std::string& reasoning, std::string& content);
    bool saw_reasoning() const { return saw_; }

  private:
    enum class State { Start, Inside, Answer };
    std::string open_, close_;
    State state_;
    std::string buf_;
    bool saw_ = false;
};

// vLLM's --reasoning-parser names warden accepts (all the <think> format above).
const std::vector<std::string>& reasoning_parser_names();
// Throws util::Error for an unknown name.
std::unique_ptr<ReasoningParser> make_reasoning_parser(const std::string& name, bool starts_inside);
// The reasoning parser a chat template's model needs, or "" when its template has no reasoning.
std::string detect_reasoning_parser(std::string_view template_source);
// Whether a rendered prompt ends inside a reasoning block (see ReasoningParser).
bool prompt_opens_reasoning(std::string_view prompt);

}  // namespace warden::chat_output
