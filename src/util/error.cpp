#include "util/error.h"

namespace warden::util {

std::string printable(const std::string& s, size_t max_len) {
    std::string out;
    for (size_t i = 0; i < s.size() && i < max_len; ++i) {
        const auto c = static_cast<unsigned char>(s[i]);
        if (c < 0x20 || c == 0x7f) {
            static const char hex[] = "0123456789abcdef";
            out += "\\x";
            out += hex[c >> 4];
            out += hex[c & 15];
        } else {
            out += static_cast<char>(c);
        }
    }
    if (s.size() > max_len) out += "...";
    return out;
}

}  // namespace warden::util
