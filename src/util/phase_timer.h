#pragma once
// Start-up phase timings at debug level (`warden --log-level debug serve ...`): each mark() logs
// the seconds since the previous mark (or construction) under the phase's name, and the total
// since construction. Names and times only, never model or request contents.
#include <spdlog/spdlog.h>

#include <chrono>
#include <string_view>

namespace warden::util {

class PhaseTimer {
  public:
    explicit PhaseTimer(std::string_view what) : what_(what) {}

    // Logs "<what>: <phase> <s> s (<total> s)" and starts the next phase.
    void mark(std::string_view phase) {
        const auto now = Clock::now();
        if (spdlog::should_log(spdlog::level::debug))
            spdlog::debug("{}: {} {:.3f} s ({:.3f} s)", what_, phase, seconds(last_, now),
                          seconds(start_, now));
        last_ = now;
    }

  private:
    using Clock = std::chrono::steady_clock;
    static double seconds(Clock::time_point a, Clock::time_point b) {
        return std::chrono::duration<double>(b - a).count();
    }
    std::string_view what_;
    Clock::time_point start_ = Clock::now();
    Clock::time_point last_ = start_;
};

}  // namespace warden::util
