// How much memory this process can still make resident: the kernel's MemAvailable, capped by
// the memory cgroup's limit less its usage (cgroup v2 memory.max / memory.current, or v1
// memory.limit_in_bytes / memory.usage_in_bytes). Used to refuse, at start, a buffer that could
// only be backed by the OOM killer.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace warden::util {

// Bytes available, or nullopt where neither /proc/meminfo nor a cgroup limit can be read.
std::optional<uint64_t> available_memory_bytes();

// The parsers, for tests: MemAvailable from /proc/meminfo's text; the cgroup path of the memory
// controller from /proc/self/cgroup's text (v2 "0::/path", or v1 "N:memory:/path" or
// "N:...,memory,...:/path"), with whether it is v2.
std::optional<uint64_t> parse_mem_available(std::string_view meminfo);
struct CgroupPath {
    std::string_view path;
    bool v2 = false;
};
std::optional<CgroupPath> parse_memory_cgroup(std::string_view proc_self_cgroup);
// A "key value" line of a cgroup's memory.stat.
std::optional<uint64_t> parse_stat_field(std::string_view memory_stat, std::string_view key);

}  // namespace warden::util
