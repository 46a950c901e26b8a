// /metrics: the process' own metrics under the Prometheus client libraries' standard names
// (process_resident_memory_bytes, process_cpu_seconds_total, process_open_fds, ...), read from
// /proc/self, the HTTP answers counted by route and status, and the structured-output token-mask
// cache's hits and misses (constrain/mask_counters.h).
#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>

#include "constrain/mask_counters.h"
#include "server/api.h"
#include "util/huge_page_arena.h"

namespace warden::server {

namespace {

std::string num(double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.9g", v);
    return buf;
}

int64_t open_fds() {
    int64_t n = 0;
    if (DIR* d = opendir("/proc/self/fd")) {
        while (const dirent* e = readdir(d))
            if (e->d_name[0] != '.') ++n;
        closedir(d);
        --n;  // the directory stream's own descriptor
    }
    return n;
}

int64_t max_fds() {
    rlimit rl{};
    return getrlimit(RLIMIT_NOFILE, &rl) == 0 ? static_cast<int64_t>(rl.rlim_cur) : 0;
}

int64_t resident_bytes(int64_t& virtual_bytes) {
    std::ifstream f("/proc/self/statm");
    int64_t pages_virtual = 0, pages_resident = 0;
    f >> pages_virtual >> pages_resident;
    const int64_t page = sysconf(_SC_PAGESIZE);
    virtual_bytes = pages_virtual * page;
    return pages_resident * page;
}

double cpu_seconds() {
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    auto s = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
    return s(ru.ru_utime) + s(ru.ru_stime);
}

const double kStartTime =
    std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();

}  // namespace

std::string Api::metrics_body() {
    std::string o = eng_.metrics().prometheus();
    auto one = [&](const char* name, const char* type, const char* help, double v) {
        o += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" +
             name + " " + num(v) + "\n";
    };
    const constrain::MaskCounters mc = constrain::mask_counters();
    one("warden:structured_output_mask_cache_hits_total", "counter",
        "constrained steps whose token mask was cached", static_cast<double>(mc.hits));
    one("warden:structured_output_mask_cache_misses_total", "counter",
        "constrained steps whose token mask was computed", static_cast<double>(mc.misses));
    one("warden:structured_output_mask_compute_seconds_total", "counter",
        "time spent computing the token masks of the misses", mc.miss_seconds);
    one("warden:memory_populate_pending_bytes", "gauge",
        "bytes of the KV pool not yet made resident by its background thread (0: RSS has settled)",
        static_cast<double>(util::HugePageArena::populate_pending_bytes()));
    int64_t vbytes = 0;
    const int64_t rss = resident_bytes(vbytes);
    one("process_resident_memory_bytes", "gauge", "resident memory size in bytes",
        static_cast<double>(rss));
    one("process_virtual_memory_bytes", "gauge", "virtual memory size in bytes",
        static_cast<double>(vbytes));
    one("process_cpu_seconds_total", "counter", "user and system CPU time in seconds",
        cpu_seconds());
    one("process_open_fds", "gauge", "open file descriptors", static_cast<double>(open_fds()));
    one("process_max_fds", "gauge", "maximum open file descriptors",
        static_cast<double>(max_fds()));
    one("process_start_time_seconds", "gauge", "start time since the Unix epoch in seconds",
        kStartTime);
    return o;
}

void Api::count_http(Route r, std::string_view method, unsigned status) {
    std::string handler = "other";
    for (const RouteInfo& ri : all_routes())
        if (ri.route == r) handler = ri.path;
    const bool known =
        method == "GET" || method == "POST" || method == "OPTIONS" || method == "HEAD";
    eng_.metrics().vllm().http_response(handler, known ? std::string(method) : "other", status);
}

}  // namespace warden::server
