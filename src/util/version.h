#pragma once
// warden's version, as `warden --version` and GET /version report it.

namespace warden::util {

inline constexpr const char* kVersion = "0.1.0";

}  // namespace warden::util
