#include "model/deferred_layouts.h"

#include <chrono>

#include "util/log.h"
#include "util/mapped_file.h"
#include "util/thread_priority.h"

namespace warden::model {

namespace {
// Weight 110 against the compute threads' 1024 while both want a core (util/thread_priority.h).
constexpr int kCopyNice = 10;
}  // namespace

DeferredLayouts::DeferredLayouts(std::vector<Job> jobs, std::shared_ptr<const void> keep)
    : jobs_(std::move(jobs)), keep_(std::move(keep)) {
    for (const Job& j : jobs_) copy_bytes_ += j.copy->matrix.bytes();
    if (jobs_.empty()) {
        done_ = true;
        return;
    }
    thread_ = std::thread([this] { run(); });
}

DeferredLayouts::~DeferredLayouts() {
    request_stop();
    if (thread_.joinable()) thread_.join();
}

void DeferredLayouts::wait() const {
    std::unique_lock lock(mu_);
    done_cv_.wait(lock, [this] { return done_; });
}

void DeferredLayouts::run() {
    (void)util::lower_this_thread_priority(kCopyNice);
    const auto t0 = std::chrono::steady_clock::now();
    for (Job& j : jobs_) {
        if (stop_.load(std::memory_order_relaxed)) break;
        j.build(j.copy->matrix);
        j.copy->published.store(true, std::memory_order_release);
        published_.fetch_add(1, std::memory_order_acq_rel);
        for (const std::span<const uint8_t> r : j.sources)
            util::release_mapped_pages(r.data(), r.size());
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    spdlog::debug("weights: {} of {} matrices in their deferred layout ({} MiB) after {:.2f} s",
                  published(), total(), copy_bytes_ >> 20, s);
    {
        std::lock_guard lock(mu_);
        done_ = true;
    }
    done_cv_.notify_all();
}

}  // namespace warden::model
