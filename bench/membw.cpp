// membw: memory-read bandwidth, the denominator of the batch-1 decode roofline.
//
//   decode tokens/s <= read bandwidth / bytes read per token (weights + KV)
//
// Build (standalone, nothing from warden):
//   g++ -O3 -march=native -pthread -o bench/out/membw bench/membw.cpp
// Run:
//   bench/out/membw [--mib 1024] [--reps 7] [--threads 1,2] [--json]
//
// Each thread streams over its own contiguous slice of one buffer (default 1 GiB,
// far beyond the LLC), summing 64-bit words with 4 independent accumulators so
// the loop is load-bound, not add-latency-bound (the compiler vectorizes it).
// The buffer is touched first so page faults are not timed. Threads start
// together on a barrier; a run's time is from the barrier to the last thread's
// finish. Best of --reps runs is reported (noise on shared machines only ever
// makes a run slower). GB/s are 1e9 bytes per second.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::size_t mib = 1024;
  int reps = 7;
  std::vector<int> threads = {1, 2};
  bool json = false;
};

[[noreturn]] void usage() {
  std::fprintf(stderr, "usage: membw [--mib N] [--reps N] [--threads 1,2,...] [--json]\n");
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) usage();
      return argv[++i];
    };
    if (a == "--mib") {
      o.mib = std::stoul(next());
    } else if (a == "--reps") {
      o.reps = std::stoi(next());
    } else if (a == "--threads") {
      o.threads.clear();
      std::string s = next();
      std::size_t pos = 0;
      while (pos < s.size()) {
        std::size_t comma = s.find(',', pos);
        if (comma == std::string::npos) comma = s.size();
        o.threads.push_back(std::stoi(s.substr(pos, comma - pos)));
        pos = comma + 1;
      }
    } else if (a == "--json") {
      o.json = true;
    } else {
      usage();
    }
  }
  if (o.mib == 0 || o.reps <= 0 || o.threads.empty()) usage();
  return o;
}

// Sum of a [begin, end) range of 64-bit words; 4 accumulators keep loads independent.
__attribute__((noinline)) std::uint64_t read_sum(const std::uint64_t* p, std::size_t n) {
  std::uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += p[i];
    s1 += p[i + 1];
    s2 += p[i + 2];
    s3 += p[i + 3];
  }
  for (; i < n; ++i) s0 += p[i];
  return s0 + s1 + s2 + s3;
}

// One timed pass with `nt` threads over words[0, n). Returns seconds.
double timed_pass(const std::uint64_t* words, std::size_t n, int nt, std::uint64_t& sink) {
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::uint64_t> sums(static_cast<std::size_t>(nt) * 8, 0);  // padded: no false sharing
  std::vector<std::thread> pool;
  Clock::time_point start;
  for (int t = 0; t < nt; ++t) {
    pool.emplace_back([&, t] {
      const std::size_t b = n * static_cast<std::size_t>(t) / static_cast<std::size_t>(nt);
      const std::size_t e = n * static_cast<std::size_t>(t + 1) / static_cast<std::size_t>(nt);
      ready.fetch_add(1);
      while (!go.load(std::memory_order_acquire)) {
      }
      sums[static_cast<std::size_t>(t) * 8] = read_sum(words + b, e - b);
    });
  }
  while (ready.load() != nt) {
  }
  start = Clock::now();
  go.store(true, std::memory_order_release);
  for (auto& th : pool) th.join();
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();
  for (int t = 0; t < nt; ++t) sink += sums[static_cast<std::size_t>(t) * 8];
  return secs;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  const std::size_t bytes = o.mib << 20;
  const std::size_t n = bytes / sizeof(std::uint64_t);
  auto* words = static_cast<std::uint64_t*>(std::aligned_alloc(4096, n * sizeof(std::uint64_t)));
  if (words == nullptr) {
    std::fprintf(stderr, "membw: cannot allocate %zu MiB\n", o.mib);
    return 1;
  }
  for (std::size_t i = 0; i < n; ++i) words[i] = i * 0x9E3779B97F4A7C15ull;  // touch every page

  std::uint64_t sink = 0;
  if (o.json) std::printf("{\"buffer_mib\": %zu, \"reps\": %d, \"read_gbps\": {", o.mib, o.reps);
  bool first = true;
  for (int nt : o.threads) {
    timed_pass(words, n, nt, sink);  // warm-up
    double best = 1e30;
    double worst = 0;
    for (int r = 0; r < o.reps; ++r) {
      const double s = timed_pass(words, n, nt, sink);
      best = std::min(best, s);
      worst = std::max(worst, s);
    }
    const double gbps = static_cast<double>(bytes) / best / 1e9;
    const double gbps_worst = static_cast<double>(bytes) / worst / 1e9;
    if (o.json) {
      std::printf("%s\"%d\": %.3f", first ? "" : ", ", nt, gbps);
    } else {
      std::printf("threads=%d read_GBps=%.2f (best of %d; worst %.2f) buffer=%zuMiB\n", nt, gbps, o.reps,
                  gbps_worst, o.mib);
    }
    first = false;
  }
  if (o.json) std::printf("}}\n");
  std::fprintf(stderr, "checksum %llu\n", static_cast<unsigned long long>(sink));
  std::free(words);
  return 0;
}
