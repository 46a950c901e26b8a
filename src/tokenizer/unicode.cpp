#include "tokenizer/unicode.h"

namespace warden::tokenizer::detail {

Utf8Step utf8_next(std::string_view s, size_t pos) {
    const auto c = static_cast<uint8_t>(s[pos]);
    if (c < 0x80) return {Utf8Status::Valid, 1, c};
    if (c < 0xC2 || c > 0xF4) return {Utf8Status::Invalid, 1, 0};
    size_t need = 0;
    uint8_t lo = 0x80, hi = 0xBF;
    uint32_t cp = 0;
    if (c < 0xE0) {
        need = 1;
        cp = c & 0x1Fu;
    } else if (c < 0xF0) {
        need = 2;
        cp = c & 0x0Fu;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else {
        need = 3;
        cp = c & 0x07u;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    }
    for (size_t k = 1; k <= need; ++k) {
        if (pos + k >= s.size()) return {Utf8Status::Incomplete, k, 0};
        const auto b = static_cast<uint8_t>(s[pos + k]);
        if (b < lo || b > hi) return {Utf8Status::Invalid, k, 0};
        cp = (cp << 6) | (b & 0x3Fu);
        lo = 0x80;
        hi = 0xBF;
    }
    return {Utf8Status::Valid, need + 1, cp};
}

void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

std::string sanitize_utf8(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    size_t i = 0;
    while (i < s.size()) {
        const Utf8Step st = utf8_next(s, i);
        if (st.status == Utf8Status::Valid) {
            out.append(s.substr(i, st.len));
        } else {
            out.append(kReplacementChar);
        }
        i += st.len;
    }
    return out;
}

namespace {

struct ByteTables {
    std::array<std::string, 256> to_unicode;
    std::array<int16_t, 324> from_unicode{};  // code points < 324 cover every mapped value

    ByteTables() {
        from_unicode.fill(-1);
        uint32_t next = 256;
        for (uint32_t b = 0; b < 256; ++b) {
            const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
            const uint32_t cp = printable ? b : next++;
            append_utf8(to_unicode[b], cp);
            from_unicode[cp] = static_cast<int16_t>(b);
        }
    }
};

const ByteTables& tables() {
    static const ByteTables t;
    return t;
}

}  // namespace

const std::array<std::string, 256>& byte_to_unicode() {
    return tables().to_unicode;
}

int unicode_to_byte(uint32_t cp) {
    const auto& t = tables().from_unicode;
    return cp < t.size() ? t[cp] : -1;
}

}  // namespace warden::tokenizer::detail
