#pragma once
// UTF-8 validation. User text (prompts, stdin) is rejected if invalid instead of being fed to
// the tokenizer as garbage.
#include <cstddef>
#include <string_view>

namespace warden::util {

// Returns the byte offset of the first invalid sequence, or npos when s is valid UTF-8
// (no overlongs, no surrogates, nothing above U+10FFFF).
size_t find_invalid_utf8(std::string_view s);

// Length of the valid UTF-8 sequence starting at s[i], 0 if invalid or incomplete.
size_t utf8_sequence_length(std::string_view s, size_t i);

}  // namespace warden::util
