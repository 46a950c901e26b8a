#include "util/memory_info.h"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <sstream>
#include <string>

namespace warden::util {

namespace {

std::optional<std::string> read_text(const std::string& path) {
    std::ifstream in(path);
    if (!in) return std::nullopt;
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

std::optional<uint64_t> parse_u64(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    uint64_t v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || end == s.data()) return std::nullopt;
    return v;
}

// A cgroup file holding one number ("max" for no limit: nullopt).
std::optional<uint64_t> read_u64(const std::string& path) {
    const auto text = read_text(path);
    if (!text) return std::nullopt;
    return parse_u64(*text);
}

std::optional<uint64_t> cgroup_room() {
    const auto self = read_text("/proc/self/cgroup");
    if (!self) return std::nullopt;
    const auto cg = parse_memory_cgroup(*self);
    if (!cg) return std::nullopt;
    const std::string dir = (cg->v2 ? "/sys/fs/cgroup" : "/sys/fs/cgroup/memory") +
                            std::string(cg->path == "/" ? "" : cg->path);
    const auto limit = read_u64(dir + (cg->v2 ? "/memory.max" : "/memory.limit_in_bytes"));
    auto usage = read_u64(dir + (cg->v2 ? "/memory.current" : "/memory.usage_in_bytes"));
    // v1 reports "no limit" as a huge page-rounded number; anything above 2^60 is no limit.
    if (!limit || !usage || *limit >= (uint64_t{1} << 60)) return std::nullopt;
    // Usage counts the page cache; its inactive part is reclaimed before the OOM killer runs (the
    // working set, as container runtimes compute it).
    if (const auto stat = read_text(dir + "/memory.stat")) {
        const auto inactive =
            parse_stat_field(*stat, cg->v2 ? "inactive_file" : "total_inactive_file");
        if (inactive) *usage -= std::min(*usage, *inactive);
    }
    return *limit > *usage ? *limit - *usage : 0;
}

}  // namespace

std::optional<uint64_t> parse_stat_field(std::string_view stat, std::string_view key) {
    for (size_t at = 0; at < stat.size();) {
        size_t eol = stat.find('\n', at);
        if (eol == std::string_view::npos) eol = stat.size();
        const std::string_view line = stat.substr(at, eol - at);
        at = eol + 1;
        if (line.size() > key.size() && line.substr(0, key.size()) == key &&
            line[key.size()] == ' ')
            return parse_u64(line.substr(key.size() + 1));
    }
    return std::nullopt;
}

std::optional<uint64_t> parse_mem_available(std::string_view meminfo) {
    constexpr std::string_view kKey = "MemAvailable:";
    for (size_t at = 0; at < meminfo.size();) {
        size_t eol = meminfo.find('\n', at);
        if (eol == std::string_view::npos) eol = meminfo.size();
        std::string_view line = meminfo.substr(at, eol - at);
        at = eol + 1;
        if (line.substr(0, kKey.size()) != kKey) continue;
        line.remove_prefix(kKey.size());
        const auto kib = parse_u64(line);
        if (!kib || line.find("kB") == std::string_view::npos) return std::nullopt;
        return *kib * 1024;
    }
    return std::nullopt;
}

std::optional<CgroupPath> parse_memory_cgroup(std::string_view text) {
    std::optional<CgroupPath> v2;
    for (size_t at = 0; at < text.size();) {
        size_t eol = text.find('\n', at);
        if (eol == std::string_view::npos) eol = text.size();
        const std::string_view line = text.substr(at, eol - at);
        at = eol + 1;
        const size_t c1 = line.find(':');
        const size_t c2 = c1 == std::string_view::npos ? c1 : line.find(':', c1 + 1);
        if (c2 == std::string_view::npos) continue;
        const std::string_view controllers = line.substr(c1 + 1, c2 - c1 - 1);
        const std::string_view path = line.substr(c2 + 1);
        if (line.substr(0, c1) == "0" && controllers.empty()) {
            v2 = CgroupPath{path, true};
            continue;
        }
        // A v1 hierarchy with the memory controller wins over the v2 line of a hybrid setup.
        for (size_t p = 0; p <= controllers.size();) {
            size_t comma = controllers.find(',', p);
            if (comma == std::string_view::npos) comma = controllers.size();
            if (controllers.substr(p, comma - p) == "memory") return CgroupPath{path, false};
            p = comma + 1;
        }
    }
    return v2;
}

std::optional<uint64_t> available_memory_bytes() {
    std::optional<uint64_t> avail;
    if (const auto meminfo = read_text("/proc/meminfo")) avail = parse_mem_available(*meminfo);
    if (const auto room = cgroup_room()) avail = avail ? std::min(*avail, *room) : *room;
    return avail;
}

}  // namespace warden::util
