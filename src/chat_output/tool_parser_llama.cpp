// Llama 3.1 / 3.2 JSON tool calls: the whole output is one or more
// {"name": ..., "parameters": {...}} objects (separated by ';'), optionally after <|python_tag|>.
// Output that starts any other way is answer text.
#include "chat_output/tool_parser_common.h"
#include "chat_output/tool_parser_marker.h"

namespace warden::chat_output::detail {

namespace {

constexpr std::string_view kPythonTag = "<|python_tag|>";

class Llama3JsonParser : public ToolCallParser {
  public:
    void feed(std::string_view text, bool final, OutputDelta& out) override {
        buf_.append(text);
        while (step(final, out)) {
        }
    }

  private:
    enum class State { Start, BetweenCalls, Call, Text };

    bool step(bool final, OutputDelta& out) {
        switch (state_) {
            case State::Start: {
                const size_t i = buf_.find_first_not_of(" \t\r\n");
                if (i == std::string::npos) {
                    if (final) to_text();
                    return final;
                }
                const std::string_view rest = std::string_view(buf_).substr(i);
                if (rest.substr(0, kPythonTag.size()) == kPythonTag) {
                    buf_.erase(0, i + kPythonTag.size());
                    state_ = State::BetweenCalls;
                } else if (!final && kPythonTag.substr(0, rest.size()) == rest) {
                    return false;
                } else if (rest[0] == '{') {
                    held_ = buf_.substr(0, i);
                    buf_.erase(0, i);
                    state_ = State::Call;
                } else {
                    state_ = State::Text;
                }
                return true;
            }
            case State::BetweenCalls: {
                const size_t i = buf_.find_first_not_of(" \t\r\n;");
                if (i == std::string::npos) {
                    if (final) buf_.clear();
                    return false;
                }
                buf_.erase(0, i);
                state_ = buf_[0] == '{' ? State::Call : State::Text;
                return true;
            }
            case State::Call: {
                const JsonObjectScan s = scan_json_object(buf_);
                const bool closed = s.end != std::string::npos || s.malformed || final;
                const size_t len = s.end != std::string::npos ? s.end : buf_.size();
                const std::string_view body(buf_.data(), len);
                emit_.update(calls_, scan_json_call(body, s, closed), out);
                if (!closed) return false;
                if (!emit_.announced()) {  // JSON that is not a call: the answer as written
                    to_text();
                    return true;
                }
                ++calls_;
                emit_.reset();
                buf_.erase(0, len);
                held_.clear();
                state_ = s.malformed ? State::Text : State::BetweenCalls;
                return true;
            }
            case State::Text:
                out.content += held_;
                out.content += buf_;
                held_.clear();
                buf_.clear();
                return false;
        }
        return false;
    }
    void to_text() { state_ = State::Text; }

    State state_ = State::Start;
    std::string buf_;
    std::string held_;  // whitespace before the first object, answer text if it is no call
    CallEmitter emit_;
    int calls_ = 0;
};

}  // namespace

std::unique_ptr<ToolCallParser> make_llama3_json_parser() {
    return std::make_unique<Llama3JsonParser>();
}

}  // namespace warden::chat_output::detail
