#include "util/thread_priority.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <ctime>

namespace warden::util {

bool lower_this_thread_priority(int steps) {
    // On Linux a thread id names one thread for setpriority (POSIX would mean the process).
    const auto tid = static_cast<id_t>(syscall(SYS_gettid));
    errno = 0;
    const int now = getpriority(PRIO_PROCESS, tid);
    if (now == -1 && errno != 0) return false;
    return setpriority(PRIO_PROCESS, tid, std::min(19, now + std::clamp(steps, 0, 19))) == 0;
}

double this_thread_cpu_ms() {
    timespec t{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) / 1e6;
}

}  // namespace warden::util
