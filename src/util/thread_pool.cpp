#include "util/thread_pool.h"

#include <algorithm>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace warden::util {

namespace {
inline void cpu_relax() {
#if defined(__x86_64__)
    _mm_pause();
#endif
}
// ~20-50 us of spinning: covers the gap between the parallel loops of one decode step. (17 us on
// a Sapphire Rapids-class VM, where a pause takes 11 ns; spinning 100 us by the clock instead
// made batch-1 decode there no faster.)
constexpr int kSpinIterations = 1500;
constexpr size_t kLine = 64;
// Cache lines prefetched per turn of the spin loop, between checks for a new job: small, so a
// new job is noticed after at most 8 prefetch issues (not timed).
constexpr int kPrefetchLinesPerTurn = 8;

inline void prefetch_line(const char* p) {
    // Locality 2 (x86: prefetcht1, into L2 and below): the range is larger than L1, and on
    // Zen-class cores lines that leave L2 land in the shared L3, where the next job still finds
    // them.
    __builtin_prefetch(p, 0, 2);
}
}  // namespace

std::pair<size_t, size_t> ThreadPool::prefetch_slice(size_t n, size_t workers, size_t w) {
    if (workers == 0 || w >= workers) return {n, n};
    n = std::min(n, kMaxPrefetchBytes);  // keeps the sums below from wrapping
    const size_t per = ((n + workers - 1) / workers + kLine - 1) / kLine * kLine;  // whole lines
    const size_t b = std::min(n, per * w);
    return {b, std::min(n, b + per)};
}

void ThreadPool::prefetch_while_idle(const void* data, size_t bytes) {
    if (n_threads_ == 1) return;
    const std::lock_guard<std::mutex> lock(pf_mu_);
    pf_data_ = static_cast<const char*>(data);
    pf_bytes_ = data == nullptr ? 0 : std::min(bytes, kMaxPrefetchBytes);
    pf_seq_.fetch_add(1, std::memory_order_relaxed);
}

int ThreadPool::default_threads() {
    unsigned n = std::thread::hardware_concurrency();
    return n == 0 ? 1 : static_cast<int>(n);
}

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads <= 0 ? default_threads() : n_threads) {
    for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
    stop_.store(true);
    generation_.fetch_add(1);
    generation_.notify_all();
    for (auto& t : workers_) t.join();
}

void ThreadPool::worker(int index) {
    uint64_t seen = 0;
    // This worker's slice [pf_cur, pf_end) of the current prefetch_while_idle range.
    uint64_t pf_seen = 0;
    const char* pf_cur = nullptr;
    const char* pf_end = nullptr;
    size_t pf_slice = 0;
    for (;;) {
        int spins = 0;
        while (generation_.load(std::memory_order_acquire) == seen && spins < kSpinIterations) {
            if (pf_seq_.load(std::memory_order_relaxed) != pf_seen) {
                // try_lock: a worker that would block here (the caller is storing a new range, or
                // another worker is reading it) spins instead, so it keeps watching for a job.
                std::unique_lock<std::mutex> lock(pf_mu_, std::try_to_lock);
                if (!lock.owns_lock()) {
                    cpu_relax();
                    ++spins;
                    continue;
                }
                pf_seen = pf_seq_.load(std::memory_order_relaxed);
                // A null range has 0 bytes (prefetch_while_idle), so this slice is empty.
                const auto [b, e] = prefetch_slice(pf_bytes_, static_cast<size_t>(n_threads_ - 1),
                                                   static_cast<size_t>(index - 1));
                pf_cur = pf_data_ + b;
                pf_end = pf_data_ + e;
                pf_slice = e - b;
            }
            if (pf_cur < pf_end) {
                for (int i = 0; i < kPrefetchLinesPerTurn && pf_cur < pf_end; ++i) {
                    prefetch_line(pf_cur);
                    pf_cur += std::min<size_t>(kLine, static_cast<size_t>(pf_end - pf_cur));
                }
                if (pf_cur == pf_end) pf_done_bytes_.fetch_add(pf_slice, std::memory_order_relaxed);
                continue;  // prefetch turns do not count as spins
            }
            cpu_relax();
            ++spins;
        }
        if (generation_.load() == seen) {
            // Announce the sleep before re-checking: run() notifies only when someone sleeps,
            // and seq_cst on both sides means either it sees us or we see its new generation.
            sleepers_.fetch_add(1);
            while (generation_.load() == seen) generation_.wait(seen);
            sleepers_.fetch_sub(1);
        }
        seen = generation_.load(std::memory_order_acquire);
        if (stop_.load()) return;
        try {
            (*job_)(index, n_threads_);
        } catch (...) {
            if (!has_error_.exchange(true)) error_ = std::current_exception();
        }
        pending_.fetch_sub(1, std::memory_order_acq_rel);
    }
}

void ThreadPool::run(const std::function<void(int, int)>& fn) {
    if (n_threads_ == 1) {
        fn(0, 1);
        return;
    }
    job_ = &fn;
    error_ = nullptr;
    has_error_.store(false);
    pending_.store(n_threads_ - 1, std::memory_order_relaxed);
    generation_.fetch_add(1);  // seq_cst: publishes job_ and pending_
    if (sleepers_.load() > 0) generation_.notify_all();
    std::exception_ptr mine;
    try {
        fn(0, n_threads_);
    } catch (...) {
        mine = std::current_exception();
    }
    // Wait for the others even on error: they still run `fn`, which lives in our caller's frame.
    // Yield when they are slow (a descheduled worker on a busy machine).
    for (int spins = 0; pending_.load(std::memory_order_acquire) != 0; ++spins) {
        if (spins < kSpinIterations)
            cpu_relax();
        else
            std::this_thread::yield();
    }
    if (mine) std::rethrow_exception(mine);
    if (has_error_.load()) std::rethrow_exception(error_);
}

void ThreadPool::parallel_for(int64_t n, int64_t grain,
                              const std::function<void(int64_t, int64_t)>& fn) {
    if (n <= 0) return;
    grain = std::clamp<int64_t>(grain, 1, n);  // also keeps (n + grain - 1) from overflowing
    const int64_t n_chunks_total = (n + grain - 1) / grain;
    if (n_threads_ == 1 || n_chunks_total == 1) {
        fn(0, n);
        return;
    }
    run([&](int t, int nt) {
        const int64_t per = (n_chunks_total + nt - 1) / nt;
        const int64_t b = std::min(n, static_cast<int64_t>(t) * per * grain);
        const int64_t e = std::min(n, b + per * grain);
        if (b < e) fn(b, e);
    });
}

}  // namespace warden::util
