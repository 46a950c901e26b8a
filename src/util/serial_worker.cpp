#include "util/serial_worker.h"

#include "util/thread_priority.h"

namespace warden::util {

SerialWorker::SerialWorker(int lower_priority_by)
    : thread_([this, lower_priority_by] {
          if (lower_priority_by > 0) (void)lower_this_thread_priority(lower_priority_by);
          loop();
      }) {}

SerialWorker::~SerialWorker() {
    {
        std::lock_guard lk(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
}

void SerialWorker::post(std::function<void()> job) {
    {
        std::lock_guard lk(mu_);
        jobs_.push_back(std::move(job));
    }
    cv_.notify_one();
}

void SerialWorker::loop() {
    for (;;) {
        std::function<void()> job;
        {
            std::unique_lock lk(mu_);
            cv_.wait(lk, [&] { return stop_ || !jobs_.empty(); });
            if (jobs_.empty()) return;  // stopping, and nothing left to run
            job = std::move(jobs_.front());
            jobs_.pop_front();
        }
        job();
    }
}

}  // namespace warden::util
