#include "server/request_id.h"

#include <sys/random.h>

#include <cerrno>
#include <cstdint>
#include <random>

namespace warden::server {

std::string random_id(std::string_view prefix) {
    static constexpr char kAlphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    constexpr size_t kLen = 24;
    std::string id(prefix);
    while (id.size() < prefix.size() + kLen) {
        uint8_t buf[32];
        ssize_t got = getrandom(buf, sizeof buf, 0);
        if (got <= 0) {
            // getrandom cannot fail on Linux >= 3.17 once the pool is initialised; fall back to
            // std::random_device (also the kernel's generator) rather than give up.
            std::random_device rd;
            for (auto& b : buf) b = static_cast<uint8_t>(rd());
            got = sizeof buf;
        }
        for (ssize_t i = 0; i < got && id.size() < prefix.size() + kLen; ++i)
            if (buf[i] < 248) id += kAlphabet[buf[i] % 62];  // 248 = 4 * 62: no modulo bias
    }
    return id;
}

}  // namespace warden::server
