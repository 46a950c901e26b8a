#pragma once
// Tool-call formats delimited by marker strings (Hermes, Kimi-K2, GLM-4.5, DeepSeek-V3.1): the
// shared streaming state machine, and one scanner per format for the text inside a call.
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "chat_output/tool_parser.h"
#include "chat_output/tool_parser_common.h"

namespace warden::chat_output::detail {

struct Markers {
    std::vector<std::string> section_begin;  // empty: calls stand alone in the text
    std::vector<std::string> section_end;
    std::string call_begin, call_end;
};

class MarkerToolParser : public ToolCallParser {
  public:
    void feed(std::string_view text, bool final, OutputDelta& out) override;

  protected:
    explicit MarkerToolParser(Markers m) : m_(std::move(m)) {}
    // body: the call's text after its begin marker, without the end marker; complete: nothing
    // more of it will come.
    virtual CallScan scan(std::string_view body, bool complete) const = 0;

  private:
    enum class State { Text, Section, Call };
    bool text_step(bool final, OutputDelta& out);
    bool section_step(bool final, OutputDelta& out);
    bool call_step(bool final, OutputDelta& out);

    Markers m_;
    State state_ = State::Text;
    bool call_in_section_ = false;
    std::string buf_;          // received and not yet consumed
    std::string call_marker_;  // the begin marker of the call being read
    CallEmitter emit_;
    int calls_ = 0;
};

std::unique_ptr<ToolCallParser> make_hermes_parser();
std::unique_ptr<ToolCallParser> make_kimi_k2_parser();
std::unique_ptr<ToolCallParser> make_glm45_parser(const nlohmann::json& tools);
std::unique_ptr<ToolCallParser> make_deepseek_v31_parser();
std::unique_ptr<ToolCallParser> make_llama3_json_parser();

}  // namespace warden::chat_output::detail
