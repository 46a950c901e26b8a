// util::ThreadPool: parallel_for covers [0, n) exactly once in grain-aligned chunks, and run()
// can be called back to back thousands of times without losing or duplicating a call. A
// watchdog turns a deadlock into a failure instead of a hung test binary.
//
// Iteration counts are modest for pools larger than the 2 cores CI has: with more threads than
// free cores one run() can cost a scheduler time slice rather than microseconds.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "util/thread_pool.h"

namespace warden::util {
namespace {

class Watchdog {
  public:
    Watchdog(const char* what, std::chrono::seconds limit)
        : thread_([this, what, limit] {
              std::unique_lock<std::mutex> lock(mu_);
              if (!cv_.wait_for(lock, limit, [&] { return done_; })) {
                  std::fprintf(stderr, "watchdog: %s did not finish within %lld s (deadlock?)\n",
                               what, static_cast<long long>(limit.count()));
                  std::abort();
              }
          }) {}
    ~Watchdog() {
        {
            std::lock_guard<std::mutex> lock(mu_);
            done_ = true;
        }
        cv_.notify_all();
        thread_.join();
    }

  private:
    std::mutex mu_;
    std::condition_variable cv_;
    bool done_ = false;
    std::thread thread_;
};

TEST(ThreadPool, SizeAndDefault) {
    EXPECT_GE(ThreadPool::default_threads(), 1);
    ThreadPool def(0);
    EXPECT_EQ(def.size(), ThreadPool::default_threads());
    ThreadPool neg(-3);
    EXPECT_EQ(neg.size(), ThreadPool::default_threads());
    ThreadPool three(3);
    EXPECT_EQ(three.size(), 3);
}

TEST(ThreadPool, ParallelForCoversRangeExactlyOnce) {
    Watchdog dog("ParallelForCoversRangeExactlyOnce", std::chrono::seconds(120));
    const int64_t ns[] = {0, 1, 2, 3, 7, 31, 32, 33, 64, 65, 255, 257, 1000, 4099};
    for (int threads : {1, 2, 3, 5}) {
        ThreadPool pool(threads);
        for (int64_t n : ns) {
            for (int64_t grain : {int64_t{0}, int64_t{1}, int64_t{3}, int64_t{16}, int64_t{64}, n,
                                  n + 1, int64_t{1} << 20}) {
                std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
                std::atomic<int> calls{0}, bad{0};
                const int64_t g = grain < 1 ? 1 : grain;
                pool.parallel_for(n, grain, [&](int64_t b, int64_t e) {
                    calls.fetch_add(1);
                    // Non-empty, in range, starts on a grain boundary, whole grains unless last.
                    if (!(0 <= b && b < e && e <= n) || b % g != 0 ||
                        (e != n && (e - b) % g != 0)) {
                        bad.fetch_add(1);
                        return;
                    }
                    for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
                });
                ASSERT_EQ(bad.load(), 0)
                    << "threads=" << threads << " n=" << n << " grain=" << grain;
                ASSERT_LE(calls.load(), threads);
                for (int64_t i = 0; i < n; ++i)
                    ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1)
                        << "index " << i << " threads=" << threads << " n=" << n
                        << " grain=" << grain;
            }
        }
        // Negative n is an empty range.
        bool called = false;
        pool.parallel_for(-5, 1, [&](int64_t, int64_t) { called = true; });
        EXPECT_FALSE(called);
    }
}

TEST(ThreadPool, RunCallsEveryIndexOncePerCallRepeatedly) {
    Watchdog dog("RunCallsEveryIndexOncePerCallRepeatedly", std::chrono::seconds(120));
    for (int threads : {1, 2, 3, 4}) {
        ThreadPool pool(threads);
        std::vector<int> counts(static_cast<size_t>(threads),
                                0);  // each index writes only its slot
        std::atomic<int> bad{0};
        const int iters = threads <= 2 ? 3000 : 500;
        for (int it = 0; it < iters; ++it) {
            pool.run([&](int index, int n) {
                if (n != threads || index < 0 || index >= n) {
                    bad.fetch_add(1);
                    return;
                }
                ++counts[static_cast<size_t>(index)];
            });
            // run() returned, so every call of this round has finished and is visible here.
            for (int t = 0; t < threads; ++t)
                ASSERT_EQ(counts[static_cast<size_t>(t)], it + 1)
                    << "threads=" << threads << " iter=" << it;
        }
        EXPECT_EQ(bad.load(), 0);
    }
}

TEST(ThreadPool, ParallelForSumsRepeatedly) {
    Watchdog dog("ParallelForSumsRepeatedly", std::chrono::seconds(120));
    ThreadPool pool(2);
    std::vector<int64_t> data(10007);
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<int64_t>(i) * 3 - 7;
    const int64_t want = [&] {
        int64_t s = 0;
        for (auto v : data) s += v;
        return s;
    }();
    for (int it = 0; it < 500; ++it) {
        std::atomic<int64_t> sum{0};
        pool.parallel_for(static_cast<int64_t>(data.size()), 1 + it % 97,
                          [&](int64_t b, int64_t e) {
                              int64_t s = 0;
                              for (int64_t i = b; i < e; ++i) s += data[static_cast<size_t>(i)];
                              sum.fetch_add(s);
                          });
        ASSERT_EQ(sum.load(), want) << "iter " << it;
    }
}

// prefetch_slice: for any size and worker count the slices are contiguous, in order, in whole
// 64-byte lines (but the last), and cover [0, min(n, cap)) exactly once.
TEST(ThreadPool, PrefetchSlicesTileTheRange) {
    const size_t cap = ThreadPool::kMaxPrefetchBytes;
    for (const size_t n :
         {size_t{0}, size_t{1}, size_t{63}, size_t{64}, size_t{65}, size_t{1000}, size_t{4095},
          size_t{2} << 20, (size_t{2} << 20) + 7, cap - 1, cap, cap + 1, SIZE_MAX}) {
        for (size_t workers = 1; workers <= 17; ++workers) {
            const size_t want = std::min(n, cap);
            size_t next = 0;
            for (size_t w = 0; w < workers; ++w) {
                const auto [b, e] = ThreadPool::prefetch_slice(n, workers, w);
                ASSERT_EQ(b, next) << "n=" << n << " workers=" << workers << " w=" << w;
                ASSERT_LE(b, e);
                ASSERT_LE(e, want);
                if (e < want) {
                    ASSERT_EQ(e % 64, 0u) << "n=" << n << " workers=" << workers << " w=" << w;
                }
                next = e;
            }
            ASSERT_EQ(next, want) << "n=" << n << " workers=" << workers;
            // No worker idles while another has more than its share plus a line.
            const auto [b0, e0] = ThreadPool::prefetch_slice(n, workers, 0);
            EXPECT_LE(e0 - b0, (want + workers - 1) / workers + 64)
                << "n=" << n << " workers=" << workers;
        }
    }
    EXPECT_EQ(ThreadPool::prefetch_slice(100, 0, 0), (std::pair<size_t, size_t>{100, 100}));
    EXPECT_EQ(ThreadPool::prefetch_slice(100, 2, 2), (std::pair<size_t, size_t>{100, 100}));
}

// prefetch_while_idle in a running pool: the slices the workers finish add up to each range (how
// the slices tile it is PrefetchSlicesTileTheRange's job), a new range replaces the old one, and
// jobs run normally meanwhile.
TEST(ThreadPool, PrefetchWhileIdleCoversRangeOnce) {
    Watchdog dog("PrefetchWhileIdleCoversRangeOnce", std::chrono::seconds(120));
    std::vector<char> buf(3 * 1000 * 1000 + 77);
    for (int threads = 2; threads <= 5; ++threads) {
        ThreadPool pool(threads);
        uint64_t want = 0;
        // Ranges start 3 bytes into the buffer: not line-aligned.
        for (const size_t n :
             {buf.size() - 3, size_t{1}, size_t{61}, size_t{62}, size_t{4096 * 3 + 2}}) {
            pool.prefetch_while_idle(buf.data() + 3, n);
            want += n;
            // Workers pick a range up while spinning between jobs; a job wakes any that slept.
            const auto t0 = std::chrono::steady_clock::now();
            while (pool.prefetched_bytes() < want &&
                   std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60)) {
                std::atomic<int> ran{0};
                pool.run([&](int, int) { ran.fetch_add(1); });
                ASSERT_EQ(ran.load(), threads);
                std::this_thread::sleep_for(std::chrono::microseconds(100));
            }
            ASSERT_EQ(pool.prefetched_bytes(), want) << threads << " threads, range " << n;
        }
        pool.prefetch_while_idle(nullptr, 12345);  // no range (a null hint must not crash a worker)
        std::atomic<int> ran{0};
        pool.run([&](int, int) { ran.fetch_add(1); });
        EXPECT_EQ(ran.load(), threads);
    }
    ThreadPool one(1);  // no workers: the hint is ignored
    one.prefetch_while_idle(buf.data(), buf.size());
    EXPECT_EQ(one.prefetched_bytes(), 0u);
}

TEST(ThreadPool, ConstructAndDestroyRepeatedly) {
    Watchdog dog("ConstructAndDestroyRepeatedly", std::chrono::seconds(120));
    for (int it = 0; it < 100; ++it) {
        ThreadPool pool(1 + it % 4);
        if (it % 2) {
            std::atomic<int> n{0};
            pool.run([&](int, int) { n.fetch_add(1); });
            ASSERT_EQ(n.load(), pool.size());
        }
    }
}

}  // namespace
}  // namespace warden::util
