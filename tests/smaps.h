#pragma once
// A field of the /proc/self/smaps entry of the mapping that holds an address, for tests that
// check what the kernel did with a mapping (huge-page advice, resident bytes).
#include <cstdint>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>

namespace warden::test {

// The text after "key:" in the entry of the mapping holding p, or nullopt where no mapping holds
// it or its entry has no such field.
inline std::optional<std::string> smaps_field(const void* p, std::string_view key) {
    const auto a = reinterpret_cast<uintptr_t>(p);
    std::ifstream in("/proc/self/smaps");
    std::string line;
    bool inside = false;
    while (std::getline(in, line)) {
        unsigned long lo = 0, hi = 0;
        char dash = 0;
        std::istringstream head(line);
        // A mapping's header ("lo-hi perms offset dev inode path"): its first ':' (in dev) comes
        // after a space, where a field line ("Rss:  4 kB") has it before.
        if (head >> std::hex >> lo >> dash >> hi && dash == '-' &&
            line.find(' ') != std::string::npos && line.find(':') > line.find(' ')) {
            inside = a >= lo && a < hi;
            continue;
        }
        if (inside && line.size() > key.size() && line.compare(0, key.size(), key) == 0 &&
            line[key.size()] == ':')
            return line.substr(key.size() + 1);
    }
    return std::nullopt;
}

}  // namespace warden::test
