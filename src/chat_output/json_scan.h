#pragma once
// Scanning a JSON object that may still be arriving (a tool call the model is writing): where
// each top-level member's value starts and, once it is complete, where it ends. No allocation
// of the values themselves and no full validation: the caller slices and decodes what it needs.
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace warden::chat_output {

struct JsonMember {
    std::string key;                       // decoded key
    size_t value_begin = 0;                // offset of the value's first byte
    size_t value_end = std::string::npos;  // one past its last byte; npos: not complete yet
};

struct JsonObjectScan {
    bool is_object = false;           // the text (after leading whitespace) starts with '{'
    bool malformed = false;           // bytes that cannot continue a JSON object
    size_t end = std::string::npos;   // one past the closing '}'; npos: not closed yet
    std::vector<JsonMember> members;  // in order; the last may be incomplete
    const JsonMember* find(std::string_view key) const;
};

// Scans `text` from its start (leading whitespace skipped).
JsonObjectScan scan_json_object(std::string_view text);

// The end (one past) of the JSON value starting at text[pos] (after whitespace), or npos when the
// text ends first or the value is malformed. Scalars end at the first delimiter after them, so
// a number at the very end of the text counts as incomplete.
size_t json_value_end(std::string_view text, size_t pos);

}  // namespace warden::chat_output
