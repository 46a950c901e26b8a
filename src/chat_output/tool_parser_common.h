#pragma once
// Pieces the tool-call parsers share (tool_parser_*.cpp only).
#include <string>
#include <string_view>

#include "chat_output/json_scan.h"
#include "chat_output/output_delta.h"

namespace warden::chat_output::detail {

// Length of the longest suffix of `text` that is a proper prefix of `marker`: bytes that might
// be the start of a marker and must be held back until the next piece decides.
size_t partial_marker(std::string_view text, std::string_view marker);
std::string_view trim(std::string_view s);

// What can be read from a call's text so far.
struct CallScan {
    bool name_known = false;
    std::string id, name;
    std::string args;  // the arguments JSON text so far; each later scan extends it
};

// A {"name": ..., "arguments" | "parameters": ...} object (Hermes, Llama 3 JSON). `complete`:
// the call's text ends here (its end marker came, or the output ended).
CallScan scan_json_call(std::string_view body, const JsonObjectScan& s, bool complete);

// Emits the difference between what was sent for call `index` and `scan`: the first delta once
// the name is known, then argument fragments.
class CallEmitter {
  public:
    void update(int index, const CallScan& scan, OutputDelta& out);
    bool announced() const { return announced_; }
    void reset() {
        announced_ = false;
        args_sent_.clear();
    }

  private:
    bool announced_ = false;
    std::string args_sent_;
};

}  // namespace warden::chat_output::detail
