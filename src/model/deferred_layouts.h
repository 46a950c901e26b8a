#pragma once
// Builds matrices' deferred copies (model/weights.h, DeferredCopy) on one background thread after
// loading, and publishes each as it is done, so that serving starts on the layout the file holds
// and moves to the faster one matrix by matrix without waiting or pausing. A copy computes the
// same bits as the original (the formats' arithmetic contracts; e.g. GGUF Q8_0 blocks read in
// place and int8-g32 panels), so a step that reads some matrices from one and some from the
// other gives the same outputs as either.
//
// The thread runs a few nice steps down (util/thread_priority.h): beside busy compute threads it
// takes a small share of a core, and all of an idle one. Once a copy is published the source
// bytes' whole pages are released from the file mapping (MADV_DONTNEED: a straggling reader of
// the old layout faults them back in from the file, so nothing is read that is not there).
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "model/weights.h"

namespace warden::model {

class DeferredLayouts {
  public:
    struct Job {
        std::shared_ptr<DeferredCopy> copy;
        std::function<void(Matrix&)> build;  // packs copy->matrix
        // The mapped bytes the copy replaces (e.g. codes and their scales), released once the
        // copy is published.
        std::vector<std::span<const uint8_t>> sources;
    };

    // keep: holds the source bytes alive (the file mapping) while the thread runs.
    DeferredLayouts(std::vector<Job> jobs, std::shared_ptr<const void> keep);
    // request_stop(), then joins the thread.
    ~DeferredLayouts();
    DeferredLayouts(const DeferredLayouts&) = delete;
    DeferredLayouts& operator=(const DeferredLayouts&) = delete;

    // Stops after the copy being built; the rest stay unpublished, their matrices reading the
    // original layout. wait() returns once the thread has stopped.
    void request_stop() { stop_.store(true, std::memory_order_relaxed); }
    // Blocks until every copy is published or the thread stopped (tests, benchmarks that time the
    // final layout).
    void wait() const;
    int64_t total() const { return static_cast<int64_t>(jobs_.size()); }
    int64_t published() const { return published_.load(std::memory_order_acquire); }
    int64_t copy_bytes() const { return copy_bytes_; }

  private:
    void run();

    std::vector<Job> jobs_;
    std::shared_ptr<const void> keep_;
    int64_t copy_bytes_ = 0;
    std::atomic<int64_t> published_{0};
    std::atomic<bool> stop_{false};
    mutable std::mutex mu_;
    mutable std::condition_variable done_cv_;
    bool done_ = false;
    std::thread thread_;
};

}  // namespace warden::model
