#include "tools/bench/runner.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <random>
#include <thread>

namespace warden::tools::bench {

LevelResult run_level(const Endpoint& ep, const ClientOptions& co,
                      const std::vector<BenchRequest>& reqs, int64_t concurrency, double rate,
                      uint64_t seed, Clock::time_point deadline) {
    const size_t n = reqs.size();
    LevelResult out;
    out.records.resize(n);
    // Scheduled send times, relative to the level's start (open loop only).
    std::vector<double> sched_s(n, 0.0);
    if (rate > 0) {
        std::mt19937_64 rng(seed + 17);
        std::exponential_distribution<double> gap(rate);
        double t = 0;
        for (size_t i = 0; i < n; ++i) {
            sched_s[i] = t;
            t += gap(rng);
        }
    }
    std::atomic<size_t> next{0};
    std::mutex mu;
    Clock::time_point first_send = Clock::time_point::max(), last_end = Clock::time_point::min();
    const auto start = Clock::now();
    auto worker = [&] {
        StreamClient client(ep, co);
        while (true) {
            const size_t i = next.fetch_add(1);
            if (i >= n) return;
            const auto due = start + std::chrono::duration_cast<Clock::duration>(
                                         std::chrono::duration<double>(sched_s[i]));
            RequestRecord rec;
            if (due >= deadline || Clock::now() >= deadline) {
                rec.error = "not sent: the run's deadline passed";
            } else {
                if (rate > 0) std::this_thread::sleep_until(due);
                const auto sent = Clock::now();
                rec = client.send(reqs[i], deadline);
                rec.wait_ms =
                    rate > 0 ? std::chrono::duration<double, std::milli>(sent - due).count() : 0.0;
                const auto end = Clock::now();
                std::lock_guard<std::mutex> lock(mu);
                first_send = std::min(first_send, sent);
                last_end = std::max(last_end, end);
            }
            rec.index = static_cast<int64_t>(i);
            out.records[i] = std::move(rec);
        }
    };
    const size_t nthreads =
        std::min<size_t>(static_cast<size_t>(std::max<int64_t>(concurrency, 1)), n);
    std::vector<std::thread> threads;
    threads.reserve(nthreads);
    for (size_t t = 0; t < nthreads; ++t) threads.emplace_back(worker);
    for (auto& t : threads) t.join();
    if (first_send != Clock::time_point::max())
        out.duration_s = std::chrono::duration<double>(last_end - first_send).count();
    return out;
}

}  // namespace warden::tools::bench
