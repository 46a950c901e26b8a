#pragma once
// One exception type for every user-facing failure: its message is a single line that names
// the problem (file, tensor, flag, ...) and is printed as-is by the CLI before a non-zero exit.
#include <cstddef>
#include <stdexcept>
#include <string>

namespace warden::util {

class Error : public std::runtime_error {
  public:
    explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// Text from an untrusted file (a key, a tensor name) made safe for a one-line message:
// control bytes escaped as \xNN, cut after max_len bytes.
std::string printable(const std::string& s, size_t max_len = 200);

// Throws Error(message) when cond is false. For validating untrusted input (files, flags,
// requests), not for bugs: an internal invariant is a WARDEN_ASSERT (util/assert.h), which aborts.
inline void check(bool cond, const std::string& message) {
    if (!cond) throw Error(message);
}
// The same for a literal message, which then costs nothing while cond holds: through the
// std::string overload a literal longer than the small-string buffer was a heap allocation and
// free on every call, and decode makes hundreds of checked kernel calls per token.
inline void check(bool cond, const char* message) {
    if (!cond) throw Error(message);
}

}  // namespace warden::util
