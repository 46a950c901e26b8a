#pragma once
// One background thread running posted jobs in order, for work that must leave a latency-bound
// thread (e.g. checksumming a large buffer off the scheduler's step loop). The destructor runs
// every job still queued, then joins.
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace warden::util {

class SerialWorker {
  public:
    // lower_priority_by > 0: the thread runs that many nice steps below the process (see
    // util::lower_this_thread_priority), for work that must not slow a latency-bound thread
    // sharing its core.
    explicit SerialWorker(int lower_priority_by = 0);
    ~SerialWorker();
    SerialWorker(const SerialWorker&) = delete;
    SerialWorker& operator=(const SerialWorker&) = delete;

    // Thread-safe; never blocks on the job itself. A job must not throw.
    void post(std::function<void()> job);

  private:
    void loop();

    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<std::function<void()>> jobs_;
    bool stop_ = false;
    std::thread thread_;  // last: starts after the members above exist
};

}  // namespace warden::util
