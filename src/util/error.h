#pragma once
// One exception type for every user-facing failure: its message is a single line that names
// the problem (file, tensor, flag, ...) and is printed as-is by the CLI before a non-zero exit.
#include <stdexcept>
#include <string>

namespace warden::util {

class Error : public std::runtime_error {
public:
    explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// Throws Error(message) when cond is false. For validating untrusted input, not for bugs.
inline void check(bool cond, const std::string& message) {
    if (!cond) throw Error(message);
}

}  // namespace warden::util
