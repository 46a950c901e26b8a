#pragma once
// UTF-8 helpers and the GPT-2 byte <-> unicode mapping used by byte-level BPE.
// Internal to the tokenizer folder.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace warden::tokenizer::detail {

enum class Utf8Status { Valid, Incomplete, Invalid };

// One step of a strict UTF-8 decoder (Unicode Table 3-7 well-formed sequences: no
// overlongs, no surrogates, nothing above U+10FFFF).
//  Valid:      `len` bytes form code point `cp`.
//  Incomplete: the `len` bytes up to the end of `s` are a valid prefix of a longer sequence.
//  Invalid:    the first `len` bytes are a maximal ill-formed subpart (replace with one U+FFFD).
struct Utf8Step {
    Utf8Status status;
    size_t len;
    uint32_t cp;
};
Utf8Step utf8_next(std::string_view s, size_t pos);

void append_utf8(std::string& out, uint32_t cp);

// Replaces every ill-formed subpart (including a truncated tail) with U+FFFD.
std::string sanitize_utf8(std::string_view s);

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";
inline constexpr std::string_view kSpmSpace = "\xE2\x96\x81";  // U+2581 "▁"

// GPT-2 bytes_to_unicode: printable bytes map to themselves, the rest to U+0100.. in order.
// Returns the UTF-8 text of the code point byte `b` maps to.
const std::array<std::string, 256>& byte_to_unicode();
// Inverse: the byte a code point stands for, or -1 when it is not one of the 256.
int unicode_to_byte(uint32_t cp);

}  // namespace warden::tokenizer::detail
