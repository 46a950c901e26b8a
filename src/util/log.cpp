#include "util/log.h"

#include "util/error.h"

namespace warden::util {

void set_log_level(const std::string& level) {
    const auto lvl = spdlog::level::from_str(level);
    if (lvl == spdlog::level::off && level != "off")
        throw Error("unknown log level '" + level + "'");
    spdlog::set_level(lvl);
}

}  // namespace warden::util
