#include "server/api_keys.h"

#include <fstream>
#include <sstream>

#include "util/error.h"

namespace warden::server {

std::unordered_map<std::string, std::string> load_api_keys(const std::string& path) {
    std::ifstream f(path);
    util::check(static_cast<bool>(f), "cannot open --api-keys file '" + path + "'");
    std::unordered_map<std::string, std::string> keys;
    std::string line;
    int lineno = 0;
    while (std::getline(f, line)) {
        ++lineno;
        if (!line.empty() && line.back() == '\r') line.pop_back();
        const auto first = line.find_first_not_of(" \t");
        if (first == std::string::npos || line[first] == '#') continue;
        std::istringstream in(line);
        std::string key, tenant, extra;
        in >> key >> tenant;
        const std::string where = path + ":" + std::to_string(lineno);
        util::check(!key.empty() && !tenant.empty() && !(in >> extra),
                    where + ": expected 'KEY TENANT'");
        util::check(keys.emplace(key, tenant).second, where + ": duplicate key");
    }
    util::check(!keys.empty(), "--api-keys file '" + path + "' has no keys");
    return keys;
}

}  // namespace warden::server
