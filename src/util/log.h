#pragma once
// Logging goes through spdlog to stderr. Log lines carry ids, counts and timings only: never
// prompt text, generated text or KV contents (unless a debug flag explicitly asks for it).
#include <spdlog/spdlog.h>

namespace warden::util {

// Sets the global level from a name (trace, debug, info, warn, error, off); throws on others.
void set_log_level(const std::string& level);

}  // namespace warden::util
