#pragma once
// `--api-keys FILE`: one "KEY TENANT" pair per line (blank lines and lines starting with '#'
// are skipped). Bearer keys map to tenant names, the metrics label and concurrency unit.
#include <string>
#include <unordered_map>

namespace warden::server {

// Throws util::Error naming the file and line of the first malformed entry.
std::unordered_map<std::string, std::string> load_api_keys(const std::string& path);

}  // namespace warden::server
