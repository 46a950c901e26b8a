#include "chat_output/json_scan.h"

#include <nlohmann/json.hpp>

namespace warden::chat_output {

namespace {

constexpr size_t npos = std::string::npos;

bool is_ws(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

size_t skip_ws(std::string_view t, size_t i) {
    while (i < t.size() && is_ws(t[i])) ++i;
    return i;
}

// One past the closing quote of the string starting at t[i] == '"', or npos.
size_t string_end(std::string_view t, size_t i) {
    for (++i; i < t.size(); ++i) {
        if (t[i] == '\\') {
            ++i;
        } else if (t[i] == '"') {
            return i + 1;
        }
    }
    return npos;
}

}  // namespace

size_t json_value_end(std::string_view t, size_t pos) {
    size_t i = skip_ws(t, pos);
    if (i >= t.size()) return npos;
    const char c = t[i];
    if (c == '"') return string_end(t, i);
    if (c == '{' || c == '[') {
        int depth = 0;
        for (; i < t.size(); ++i) {
            const char d = t[i];
            if (d == '"') {
                const size_t e = string_end(t, i);
                if (e == npos) return npos;
                i = e - 1;
            } else if (d == '{' || d == '[') {
                ++depth;
            } else if (d == '}' || d == ']') {
                if (--depth == 0) return i + 1;
            }
        }
        return npos;
    }
    // A literal or number: up to the next delimiter.
    size_t j = i;
    while (j < t.size() && !is_ws(t[j]) && t[j] != ',' && t[j] != '}' && t[j] != ']') ++j;
    if (j == i || j == t.size()) return npos;
    return j;
}

const JsonMember* JsonObjectScan::find(std::string_view key) const {
    for (const auto& m : members)
        if (m.key == key) return &m;
    return nullptr;
}

JsonObjectScan scan_json_object(std::string_view t) {
    JsonObjectScan s;
    size_t i = skip_ws(t, 0);
    if (i >= t.size()) return s;
    if (t[i] != '{') {
        s.malformed = true;
        return s;
    }
    s.is_object = true;
    ++i;
    for (;;) {
        i = skip_ws(t, i);
        if (i >= t.size()) return s;
        if (t[i] == '}') {
            s.end = i + 1;
            return s;
        }
        if (t[i] == ',' && !s.members.empty()) {
            i = skip_ws(t, i + 1);
            if (i >= t.size()) return s;
        }
        if (t[i] != '"') {
            s.malformed = true;
            return s;
        }
        const size_t ke = string_end(t, i);
        if (ke == npos) return s;
        JsonMember m;
        try {
            m.key = nlohmann::json::parse(t.substr(i, ke - i)).get<std::string>();
        } catch (const nlohmann::json::exception&) {
            s.malformed = true;
            return s;
        }
        i = skip_ws(t, ke);
        if (i >= t.size()) return s;
        if (t[i] != ':') {
            s.malformed = true;
            return s;
        }
        i = skip_ws(t, i + 1);
        if (i >= t.size()) return s;
        m.value_begin = i;
        m.value_end = json_value_end(t, i);
        s.members.push_back(m);
        if (m.value_end == npos) return s;
        i = m.value_end;
    }
}

}  // namespace warden::chat_output
