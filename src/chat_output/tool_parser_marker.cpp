#include "chat_output/tool_parser_marker.h"

#include <algorithm>

namespace warden::chat_output::detail {

namespace {
constexpr size_t npos = std::string::npos;
bool starts_with(std::string_view s, std::string_view p) {
    return s.substr(0, p.size()) == p;
}
}  // namespace

void MarkerToolParser::feed(std::string_view text, bool final, OutputDelta& out) {
    buf_.append(text);
    for (;;) {
        bool progressed = false;
        switch (state_) {
            case State::Text:
                progressed = text_step(final, out);
                break;
            case State::Section:
                progressed = section_step(final, out);
                break;
            case State::Call:
                progressed = call_step(final, out);
                break;
        }
        if (!progressed) break;
    }
}

bool MarkerToolParser::text_step(bool final, OutputDelta& out) {
    size_t best = npos;
    const std::string* marker = nullptr;
    bool section = false;
    auto consider = [&](const std::string& mk, bool is_section) {
        const size_t p = buf_.find(mk);
        if (p != npos && (p < best || (p == best && mk.size() > marker->size()))) {
            best = p;
            marker = &mk;
            section = is_section;
        }
    };
    for (const auto& s : m_.section_begin) consider(s, true);
    consider(m_.call_begin, false);
    if (marker) {
        out.content.append(buf_, 0, best);
        buf_.erase(0, best + marker->size());
        if (section) {
            state_ = State::Section;
        } else {
            state_ = State::Call;
            call_in_section_ = false;
            call_marker_ = *marker;
        }
        return true;
    }
    size_t hold = 0;
    if (!final) {
        for (const auto& s : m_.section_begin) hold = std::max(hold, partial_marker(buf_, s));
        hold = std::max(hold, partial_marker(buf_, m_.call_begin));
    }
    out.content.append(buf_, 0, buf_.size() - hold);
    buf_.erase(0, buf_.size() - hold);
    return false;
}

bool MarkerToolParser::section_step(bool final, OutputDelta& out) {
    const size_t i = buf_.find_first_not_of(" \t\r\n");
    if (i == npos) {
        if (final) buf_.clear();
        return false;
    }
    buf_.erase(0, i);
    if (starts_with(buf_, m_.call_begin)) {
        buf_.erase(0, m_.call_begin.size());
        state_ = State::Call;
        call_in_section_ = true;
        call_marker_ = m_.call_begin;
        return true;
    }
    for (const auto& e : m_.section_end)
        if (starts_with(buf_, e)) {
            buf_.erase(0, e.size());
            state_ = State::Text;
            return true;
        }
    if (!final) {
        bool maybe = starts_with(m_.call_begin, buf_);
        for (const auto& e : m_.section_end) maybe = maybe || starts_with(e, buf_);
        if (maybe) return false;
    }
    // Stray text inside the section: the section is over, the text is read as answer text.
    (void)out;
    state_ = State::Text;
    return true;
}

bool MarkerToolParser::call_step(bool final, OutputDelta& out) {
    const size_t end = buf_.find(m_.call_end);
    const bool closed = end != npos || final;
    const size_t body_len =
        end != npos ? end : buf_.size() - (final ? 0 : partial_marker(buf_, m_.call_end));
    const std::string_view body(buf_.data(), body_len);
    emit_.update(calls_, scan(body, closed), out);
    if (!closed) return false;
    if (emit_.announced()) {
        ++calls_;
    } else {  // never became a call: the text is the model's answer as written
        out.content += call_marker_;
        out.content.append(body);
        if (end != npos) out.content += m_.call_end;
    }
    emit_.reset();
    buf_.erase(0, end != npos ? end + m_.call_end.size() : buf_.size());
    state_ = call_in_section_ ? State::Section : State::Text;
    return true;
}

namespace {

// ---- Hermes (Qwen2.5, Qwen3): <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>
class HermesParser : public MarkerToolParser {
  public:
    HermesParser() : MarkerToolParser(Markers{{}, {}, "<tool_call>", "</tool_call>"}) {}

  protected:
    CallScan scan(std::string_view body, bool complete) const override {
        return scan_json_call(body, scan_json_object(body), complete);
    }
};

// The arguments after a separator marker, written as JSON text: surrounding whitespace is not
// part of them (trailing whitespace is held back until more text shows it is inside).
std::string json_args_after(std::string_view rest, bool complete) {
    const std::string_view a = trim(rest);
    if (a.empty() && complete) return "{}";
    return std::string(a);
}

// ---- Kimi-K2:
// <|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>{...}<|tool_call_end|>
class KimiK2Parser : public MarkerToolParser {
  public:
    KimiK2Parser()
        : MarkerToolParser(Markers{{"<|tool_calls_section_begin|>", "<|tool_call_section_begin|>"},
                                   {"<|tool_calls_section_end|>", "<|tool_call_section_end|>"},
                                   "<|tool_call_begin|>",
                                   "<|tool_call_end|>"}) {}

  protected:
    CallScan scan(std::string_view body, bool complete) const override {
        CallScan c;
        static constexpr std::string_view kArg = "<|tool_call_argument_begin|>";
        const size_t p = body.find(kArg);
        if (p == npos) return c;
        const std::string_view id = trim(body.substr(0, p));
        // "functions.get_weather:0" -> "get_weather"
        std::string_view name = id.substr(0, id.rfind(':'));
        if (starts_with(name, "functions.")) name.remove_prefix(10);
        if (name.empty()) return c;
        c.name_known = true;
        c.id = std::string(id);
        c.name = std::string(name);
        c.args = json_args_after(body.substr(p + kArg.size()), complete);
        return c;
    }
};

// ---- DeepSeek-V3.1: <｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>; also the
// V3 / R1 form
// <｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{...}\n```<｜tool▁call▁end｜>.
class DeepSeekV31Parser : public MarkerToolParser {
  public:
    DeepSeekV31Parser()
        : MarkerToolParser(Markers{{"<｜tool▁calls▁begin｜>"},
                                   {"<｜tool▁calls▁end｜>"},
                                   "<｜tool▁call▁begin｜>",
                                   "<｜tool▁call▁end｜>"}) {}

  protected:
    CallScan scan(std::string_view body, bool complete) const override {
        CallScan c;
        static constexpr std::string_view kSep = "<｜tool▁sep｜>";
        const size_t p = body.find(kSep);
        if (p == npos) return c;
        std::string_view name = trim(body.substr(0, p));
        std::string_view rest = body.substr(p + kSep.size());
        if (name == "function" && !starts_with(trim(rest), "{")) {
            const size_t nl = rest.find('\n');
            if (nl == npos) {
                if (!complete) return c;
                name = trim(rest);
                rest = {};
            } else {
                name = trim(rest.substr(0, nl));
                rest = rest.substr(nl + 1);
                const size_t fence = rest.find("```json");
                if (fence != npos) rest = rest.substr(fence + 7);
                const size_t close = rest.find("```");
                if (close != npos)
                    rest = rest.substr(0, close);
                else if (!complete)
                    rest = rest.substr(0, rest.size() - partial_marker(rest, "```"));
            }
        }
        if (name.empty()) return c;
        c.name_known = true;
        c.name = std::string(name);
        c.args = json_args_after(rest, complete);
        return c;
    }
};

// ---- GLM-4.5 / 4.6:
// <tool_call>NAME\n<arg_key>K</arg_key>\n<arg_value>V</arg_value>...</tool_call>
class Glm45Parser : public MarkerToolParser {
  public:
    explicit Glm45Parser(const nlohmann::json& tools)
        : MarkerToolParser(Markers{{}, {}, "<tool_call>", "</tool_call>"}) {
        if (!tools.is_array()) return;
        for (const auto& t : tools) {
            if (!t.is_object() || !t.contains("function") || !t["function"].is_object()) continue;
            const auto& f = t["function"];
            if (!f.contains("name") || !f["name"].is_string()) continue;
            const auto params = f.value("parameters", nlohmann::json::object());
            if (params.is_object() && params.contains("properties") &&
                params["properties"].is_object())
                props_[f["name"].get<std::string>()] = params["properties"];
        }
    }

  protected:
    CallScan scan(std::string_view body, bool complete) const override {
        CallScan c;
        static constexpr std::string_view kK0 = "<arg_key>", kK1 = "</arg_key>",
                                          kV0 = "<arg_value>", kV1 = "</arg_value>";
        size_t ne = std::min(body.find('\n'), body.find(kK0));
        if (ne == npos) {
            if (!complete) return c;
            ne = body.size();
        }
        const std::string_view name = trim(body.substr(0, ne));
        if (name.empty() || name.find('<') != npos) return c;
        c.name_known = true;
        c.name = std::string(name);
        const auto props = props_.find(c.name);
        c.args = "{";
        bool any = false;
        for (size_t pos = ne;;) {
            const size_t k0 = body.find(kK0, pos);
            if (k0 == npos) break;
            const size_t k1 = body.find(kK1, k0);
            if (k1 == npos) break;
            const size_t v0 = body.find(kV0, k1);
            if (v0 == npos) break;
            const size_t v1 = body.find(kV1, v0);
            if (v1 == npos) break;
            const std::string key(trim(body.substr(k0 + kK0.size(), k1 - k0 - kK0.size())));
            const std::string value(body.substr(v0 + kV0.size(), v1 - v0 - kV0.size()));
            const nlohmann::json* schema = nullptr;
            if (props != props_.end() && props->second.contains(key)) schema = &props->second[key];
            if (any) c.args += ", ";
            c.args += dump(nlohmann::json(key)) + ": " + convert(value, schema);
            any = true;
            pos = v1 + kV1.size();
        }
        if (complete) c.args += "}";
        return c;
    }

  private:
    static std::string dump(const nlohmann::json& j) {
        return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    }
    // The template writes strings raw and other values as JSON: the schema's type decides,
    // else whatever parses as JSON is JSON.
    static std::string convert(const std::string& v, const nlohmann::json* schema) {
        bool is_string = false;
        if (schema && schema->is_object() && schema->contains("type")) {
            const auto& t = (*schema)["type"];
            is_string = t == "string" ||
                        (t.is_array() && std::find(t.begin(), t.end(), "string") != t.end() &&
                         t.size() == 1);
        }
        if (!is_string) {
            try {
                return dump(nlohmann::json::parse(v));
            } catch (const nlohmann::json::exception&) {
            }
        }
        return dump(nlohmann::json(v));
    }
    std::unordered_map<std::string, nlohmann::json> props_;
};

}  // namespace

std::unique_ptr<ToolCallParser> make_hermes_parser() {
    return std::make_unique<HermesParser>();
}
std::unique_ptr<ToolCallParser> make_kimi_k2_parser() {
    return std::make_unique<KimiK2Parser>();
}
std::unique_ptr<ToolCallParser> make_glm45_parser(const nlohmann::json& tools) {
    return std::make_unique<Glm45Parser>(tools);
}
std::unique_ptr<ToolCallParser> make_deepseek_v31_parser() {
    return std::make_unique<DeepSeekV31Parser>();
}

}  // namespace warden::chat_output::detail
