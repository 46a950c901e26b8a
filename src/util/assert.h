#pragma once
// WARDEN_ASSERT(cond, msg): an internal invariant. When it fails the program has a bug, not a
// bad input: the process prints "warden: internal error at FILE:LINE: COND: MSG" to stderr and
// aborts (in every build type, like util::check it costs one branch while cond holds). Nothing
// catches it, so a broken invariant never turns into an HTTP 400 or a "bad file" message.
//
// Input validation (a user's file, flag or request) uses util::check / util::Error instead
// (util/error.h): that message is for the user, and the caller may recover.
#include <cstdio>
#include <cstdlib>

namespace warden::util {

[[noreturn]] inline void assert_fail(const char* file, int line, const char* cond,
                                     const char* msg) {
    std::fprintf(stderr, "warden: internal error at %s:%d: %s: %s\n", file, line, cond, msg);
    std::fflush(stderr);
    std::abort();
}

}  // namespace warden::util

#define WARDEN_ASSERT(cond, msg)                                         \
    do {                                                                 \
        if (!(cond)) [[unlikely]]                                        \
            ::warden::util::assert_fail(__FILE__, __LINE__, #cond, msg); \
    } while (0)
