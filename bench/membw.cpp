// membw: memory-read bandwidth, the denominator of the batch-1 decode roofline.
//
//   decode tokens/s <= read bandwidth / bytes read per token (weights + KV)
//
// Build: scripts/build.sh build -DWARDEN_BENCH=ON (build/bench_membw, with -march=native; it
// links nothing of warden).
// Run:
//   build/bench_membw [--mib 1024] [--reps 7] [--threads 1,2] [--streams 1] [--block 18432]
//                   [--pages 2m|4k] [--seconds 0] [--json]
//
// --pages 2m (the default) asks for 2 MiB pages (madvise MADV_HUGEPAGE on a 2 MiB-aligned buffer),
// as warden's weights get (src/util/huge_page_arena.h); --pages 4k reads the buffer on 4 KiB pages,
// for comparison. On a 2-core VM one thread read 17.7-25.8 GB/s on 4 KiB pages and 22.1-27.4 on
// 2 MiB pages (alternating); two threads differ less. Where the kernel has no transparent huge
// pages, 2m reads 4 KiB pages and says so on stderr; where they are set to `never`, it reads
// 4 KiB pages without a word (check /sys/kernel/mm/transparent_hugepage/enabled). 4k advises
// MADV_NOHUGEPAGE, so it means 4 KiB pages under the `always` setting too.
//
// --streams S (S > 1) reads each thread's slice as S interleaved streams instead of one: the
// slice is cut into blocks of --block bytes (default: one 16-row panel of a 2048-column int4-g32
// matrix) and S consecutive blocks are read a cache line from each in turn: close to the access
// pattern of a kernel that works on S weight panels at once (the AVX-512 kernels at batch 1 with
// two panels per thread, and a removed two-panel AVX2 W4A8 kernel, which alternated 256-byte
// runs). On a 2-core VM one thread reads two streams at 62-87% of one, two threads at 92-99%
// (docs/WEIGHT_QUANT.md, Tried and dropped). A slice shorter than S blocks is read as one stream.
//
// --seconds S (S > 0) makes each rep a window of at least S seconds: whole passes over the buffer
// back to back, the rep's bandwidth their bytes over their summed time. A pass over 1 GiB takes
// ~35 ms here, so the default best-of-reps reading is the best of a few 35 ms bursts, while a
// batch-1 decode run of 64 tokens lasts a second or more; on a VM whose bandwidth moves by 30%
// within seconds the burst maximum can sit above what any second-long run draws (up to 12% above on
// a Zen 4 VM; docs/BENCHMARKS.md, Batch-1 decode per weight format). A window as long as the run
// measures the bandwidth on the run's own time scale.
//
// Each thread streams over its own contiguous slice of one buffer (default 1 GiB,
// far beyond the LLC), summing 64-bit words with 4 independent accumulators so
// the loop is load-bound, not add-latency-bound (the compiler vectorizes it).
// The buffer is touched first so page faults are not timed. Threads start
// together on a barrier; a run's time is from the barrier to the last thread's
// finish. Best of --reps runs is reported (noise on shared machines only ever
// makes a run slower). GB/s are 1e9 bytes per second.
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
    std::size_t mib = 1024;
    int reps = 7;
    std::vector<int> threads = {1, 2};
    std::size_t streams = 1;
    std::size_t block = 18432;
    bool huge_pages = true;
    bool json = false;
    double seconds = 0;  // > 0: a rep reads the buffer over and over for at least this long
};

[[noreturn]] void usage() {
    std::fprintf(stderr,
                 "usage: membw [--mib N] [--reps N] [--threads 1,2,...] [--streams S] [--block "
                 "BYTES] [--pages 2m|4k] [--seconds S] [--json]\n");
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
        // A whole-string number or the usage line: no exception escapes, no "12x" read as 12 and
        // no "-1" wrapped to a huge unsigned.
        auto number = [&](const std::string& s, auto convert) {
            if (s.empty() || s[0] == '-' || s[0] == '+' || s[0] == ' ') usage();
            std::size_t used = 0;
            try {
                const auto v = convert(s, &used);
                if (used != s.size()) usage();
                return v;
            } catch (const std::logic_error&) {  // invalid_argument, out_of_range
                usage();
            }
        };
        const auto to_ul = [](const std::string& s, std::size_t* used) {
            return std::stoul(s, used);
        };
        const auto to_i = [](const std::string& s, std::size_t* used) {
            return std::stoi(s, used);
        };
        const auto to_d = [](const std::string& s, std::size_t* used) {
            return std::stod(s, used);
        };
        if (a == "--mib") {
            o.mib = number(next(), to_ul);
        } else if (a == "--reps") {
            o.reps = number(next(), to_i);
        } else if (a == "--threads") {
            o.threads.clear();
            std::string s = next();
            std::size_t pos = 0;
            while (pos < s.size()) {
                std::size_t comma = s.find(',', pos);
                if (comma == std::string::npos) comma = s.size();
                o.threads.push_back(number(s.substr(pos, comma - pos), to_i));
                pos = comma + 1;
            }
        } else if (a == "--streams") {
            o.streams = number(next(), to_ul);
        } else if (a == "--block") {
            o.block = number(next(), to_ul);
        } else if (a == "--pages") {
            const std::string p = next();
            if (p != "2m" && p != "4k") usage();
            o.huge_pages = p == "2m";
        } else if (a == "--seconds") {
            o.seconds = number(next(), to_d);
        } else if (a == "--json") {
            o.json = true;
        } else {
            usage();
        }
    }
    if (o.mib == 0 || o.reps <= 0 || o.threads.empty() || o.streams == 0 || o.streams > 16 ||
        o.block < 64 || o.block % 64 != 0 || o.block > (std::size_t{1} << 30) ||
        !(o.seconds >= 0) || o.seconds > 600)
        usage();
    for (const int t : o.threads)
        if (t < 1 || t > 1024) usage();
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

// The same sum, read as `streams` interleaved streams: groups of `streams` consecutive blocks of
// `block_words` words, one 64-byte line of each block in turn (a tail shorter than a group is read
// linearly). Two 32-byte vector adds per line, as read_sum compiles to, so the loop stays
// load-bound.
using Words4 = std::uint64_t __attribute__((vector_size(32)));
__attribute__((noinline)) std::uint64_t read_sum_interleaved(const std::uint64_t* p, std::size_t n,
                                                             std::size_t streams,
                                                             std::size_t block_words) {
    Words4 a = {0, 0, 0, 0}, b = a;
    const std::size_t group = streams * block_words;
    std::size_t g = 0;
    for (; g + group <= n; g += group)
        for (std::size_t i = 0; i < block_words; i += 8)
            for (std::size_t s = 0; s < streams; ++s) {
                Words4 x, y;
                std::memcpy(&x, p + g + s * block_words + i, sizeof x);
                std::memcpy(&y, p + g + s * block_words + i + 4, sizeof y);
                a += x;
                b += y;
            }
    const Words4 t = a + b;
    return t[0] + t[1] + t[2] + t[3] + read_sum(p + g, n - g);
}

// One timed pass with `nt` threads over words[0, n). Returns seconds.
double timed_pass(const std::uint64_t* words, std::size_t n, int nt, std::size_t streams,
                  std::size_t block_words, std::uint64_t& sink) {
    std::atomic<int> ready{0};
    std::atomic<bool> go{false};
    std::vector<std::uint64_t> sums(static_cast<std::size_t>(nt) * 8,
                                    0);  // padded: no false sharing
    std::vector<std::thread> pool;
    Clock::time_point start;
    for (int t = 0; t < nt; ++t) {
        pool.emplace_back([&, t] {
            const std::size_t b = n * static_cast<std::size_t>(t) / static_cast<std::size_t>(nt);
            const std::size_t e =
                n * static_cast<std::size_t>(t + 1) / static_cast<std::size_t>(nt);
            ready.fetch_add(1);
            while (!go.load(std::memory_order_acquire)) {
            }
            sums[static_cast<std::size_t>(t) * 8] =
                streams == 1 ? read_sum(words + b, e - b)
                             : read_sum_interleaved(words + b, e - b, streams, block_words);
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
    constexpr std::size_t kHuge = std::size_t{2} << 20;
    auto* words =
        static_cast<std::uint64_t*>(std::aligned_alloc(kHuge, (bytes + kHuge - 1) / kHuge * kHuge));
    if (words == nullptr) {
        std::fprintf(stderr, "membw: cannot allocate %zu MiB\n", o.mib);
        return 1;
    }
    if (madvise(words, bytes, o.huge_pages ? MADV_HUGEPAGE : MADV_NOHUGEPAGE) != 0 && o.huge_pages)
        std::fprintf(stderr, "membw: no transparent huge pages here; reading 4 KiB pages\n");
    for (std::size_t i = 0; i < n; ++i) words[i] = i * 0x9E3779B97F4A7C15ull;  // touch every page

    std::uint64_t sink = 0;
    if (o.json)
        std::printf("{\"buffer_mib\": %zu, \"reps\": %d, \"seconds\": %g, \"read_gbps\": {", o.mib,
                    o.reps, o.seconds);
    bool first = true;
    const std::size_t bw = o.block / sizeof(std::uint64_t);
    for (int nt : o.threads) {
        timed_pass(words, n, nt, o.streams, bw, sink);  // warm-up
        double best = 1e30;
        double worst = 0;
        const double rep_bytes = static_cast<double>(bytes);
        for (int r = 0; r < o.reps; ++r) {
            // A rep is one pass, or with --seconds as many whole passes as fill that time: its
            // bandwidth is then the sustained rate over the window, not the rate of one short
            // burst.
            double s = 0;
            int passes = 0;
            do {
                s += timed_pass(words, n, nt, o.streams, bw, sink);
                ++passes;
            } while (s < o.seconds);
            const double per_pass = s / passes;
            best = std::min(best, per_pass);
            worst = std::max(worst, per_pass);
        }
        const double gbps = rep_bytes / best / 1e9;
        const double gbps_worst = rep_bytes / worst / 1e9;
        if (o.json) {
            std::printf("%s\"%d\": %.3f", first ? "" : ", ", nt, gbps);
        } else {
            std::printf(
                "threads=%d read_GBps=%.2f (best of %d; worst %.2f) buffer=%zuMiB streams=%zu "
                "pages=%s seconds=%g\n",
                nt, gbps, o.reps, gbps_worst, o.mib, o.streams, o.huge_pages ? "2m" : "4k",
                o.seconds);
        }
        first = false;
    }
    if (o.json) std::printf("}}\n");
    std::fprintf(stderr, "checksum %llu\n", static_cast<unsigned long long>(sink));
    std::free(words);
    return 0;
}
