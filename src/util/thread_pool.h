#pragma once
// A fixed pool of worker threads for data-parallel loops. Kernels split their output rows
// over the pool with parallel_for; the calling thread takes a share too, so a pool of N
// threads uses N cores. Workers spin briefly before sleeping (on a futex, via atomic wait)
// because decode issues hundreds of small parallel loops per token and a wake-up per loop
// would dominate; the spin is short so an oversubscribed machine is not starved.
#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace warden::util {

class ThreadPool {
  public:
    // n_threads <= 0 means one per online core.
    explicit ThreadPool(int n_threads = 0);
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int size() const { return n_threads_; }

    // Calls fn(thread_index, n_threads) once on each of the pool's threads and waits. Each call
    // decides its own share of the work from its index. If any call throws, run() still waits
    // for all of them, then rethrows the first exception.
    void run(const std::function<void(int, int)>& fn);

    // Splits [0, n) into contiguous chunks, each a multiple of `grain` (except the last),
    // one chunk per thread, and calls fn(begin, end) for each non-empty chunk.
    void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

    // A hint for the idle time between run() calls: workers that would otherwise spin waiting
    // for the next job issue software prefetches over [data, data + bytes) instead, each worker
    // its own contiguous slice (prefetch_slice), checking for a new job every 8 lines. Decode
    // calls it with the start of the next weight matrix before the calling thread's serial work
    // between two pool jobs (norms, RoPE, KV writes), so the memory system streams weights while
    // it would otherwise sit idle. The hint stays until the next call replaces it (a run() in
    // between does not clear it: workers resume their slice when they spin again), and the
    // range need not stay valid: nothing is read, and a prefetch never faults. Sleeping
    // workers are not woken for it. Ranges are capped at kMaxPrefetchBytes.
    void prefetch_while_idle(const void* data, size_t bytes);
    static constexpr size_t kMaxPrefetchBytes = size_t{1} << 30;
    // Worker w's slice [begin, end) of a range of n bytes shared by `workers` workers (w in
    // [0, workers)): contiguous, whole 64-byte lines except at the end, together covering [0, n)
    // exactly once.
    static std::pair<size_t, size_t> prefetch_slice(size_t n, size_t workers, size_t w);
    // Bytes whose prefetch the workers have finished, summed over every range so far: a worker
    // adds its slice when it has issued all of it (a replaced, unfinished slice adds nothing).
    uint64_t prefetched_bytes() const { return pf_done_bytes_.load(std::memory_order_relaxed); }

    static int default_threads();

  private:
    void worker(int index);

    int n_threads_;
    std::vector<std::thread> workers_;
    const std::function<void(int, int)>* job_ = nullptr;
    std::atomic<uint64_t> generation_{0};
    std::atomic<int> sleepers_{0};
    std::atomic<int> pending_{0};
    std::atomic<bool> stop_{false};
    std::exception_ptr error_;  // first exception thrown by a worker during run()
    std::atomic<bool> has_error_{false};
    // prefetch_while_idle's range, under pf_mu_; pf_seq_ changes with it, so a worker takes the
    // lock only when there is a new range to read.
    std::mutex pf_mu_;
    const char* pf_data_ = nullptr;
    size_t pf_bytes_ = 0;
    std::atomic<uint64_t> pf_seq_{0};
    std::atomic<uint64_t> pf_done_bytes_{0};
};

}  // namespace warden::util
