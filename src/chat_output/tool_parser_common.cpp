#include "chat_output/tool_parser_common.h"

#include <nlohmann/json.hpp>

namespace warden::chat_output::detail {

size_t partial_marker(std::string_view text, std::string_view marker) {
    const size_t most = std::min(text.size(), marker.size() - 1);
    for (size_t k = most; k > 0; --k)
        if (text.substr(text.size() - k) == marker.substr(0, k)) return k;
    return 0;
}

std::string_view trim(std::string_view s) {
    const char* ws = " \t\r\n";
    const size_t b = s.find_first_not_of(ws);
    if (b == std::string_view::npos) return {};
    return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

CallScan scan_json_call(std::string_view body, const JsonObjectScan& s, bool complete) {
    CallScan c;
    if (!s.is_object) return c;
    const JsonMember* name = s.find("name");
    if (!name || name->value_end == std::string::npos || body[name->value_begin] != '"') return c;
    try {
        c.name = nlohmann::json::parse(
                     body.substr(name->value_begin, name->value_end - name->value_begin))
                     .get<std::string>();
    } catch (const nlohmann::json::exception&) {
        return c;
    }
    if (c.name.empty()) return c;
    c.name_known = true;
    const JsonMember* args = s.find("arguments");
    if (!args) args = s.find("parameters");
    if (!args) {
        if (complete || s.end != std::string::npos) c.args = "{}";
        return c;
    }
    const bool quoted = body[args->value_begin] == '"';
    if (args->value_end != std::string::npos) {
        const std::string_view v =
            body.substr(args->value_begin, args->value_end - args->value_begin);
        if (quoted) {  // arguments written as a JSON string holding the JSON text
            try {
                c.args = nlohmann::json::parse(v).get<std::string>();
            } catch (const nlohmann::json::exception&) {
                c.args = std::string(v);
            }
        } else {
            c.args = std::string(v);
        }
    } else if (!quoted) {
        c.args = std::string(body.substr(args->value_begin));
    }
    return c;
}

void CallEmitter::update(int index, const CallScan& scan, OutputDelta& out) {
    if (!scan.name_known) return;
    if (!announced_) {
        ToolCallDelta d;
        d.index = index;
        d.first = true;
        d.id = scan.id;
        d.name = scan.name;
        d.arguments = scan.args;
        out.calls.push_back(std::move(d));
        announced_ = true;
        args_sent_ = scan.args;
        return;
    }
    // A later scan extends the text sent; anything else would contradict it and is not sent.
    if (scan.args.size() > args_sent_.size() &&
        scan.args.compare(0, args_sent_.size(), args_sent_) == 0) {
        ToolCallDelta d;
        d.index = index;
        d.arguments = scan.args.substr(args_sent_.size());
        out.calls.push_back(std::move(d));
        args_sent_ = scan.args;
    }
}

}  // namespace warden::chat_output::detail
