// Decode tunings (kernels/decode_tuning.h) against each other, for int4 and int8 weights, on a host
// whose memory bandwidth moves while they run. One process holds the 16 Llama-3.2-1B layers of one
// weight format (the shapes of bench_gemv_decode, random codes, valid scales) and, ITERS times,
// takes a read-loop reading over a short window, runs PASSES decode passes (batch 1, fused q/k/v
// and gate/up) under each tuning in turn (the order rotates every iteration), and takes another
// reading. Each pass is then set against the bandwidth of the seconds it ran in, and the summary
// splits the iterations by that bandwidth: on the 2-vCPU VMs these benchmarks run on, the read loop
// sits near 32 GB/s most of the time and near 50 for a minute or two now and then, and a kernel
// that keeps up with the first can fall behind the second (docs/WEIGHT_QUANT.md, Decode tuning per
// CPU: the Zen 4 entry).
//   bench_tuning_ab FORMAT ITERS PASSES SPEC [SPEC ...]
// SPEC: WARDEN_DECODE_TUNING's syntax on top of this CPU's table ("-" for the table itself), or
// one of two plain read loops over the same weight bytes, no arithmetic, that show what the pass's
// structure costs apart from the kernel: "read:matmul" forks and joins the pool once per matmul
// call of the decode pass, as the kernels do, each thread reading a fixed contiguous share of each
// matrix; "read:pass" reads the same shares in one pool job per pass (no join between matrices).
// Prints one line per iteration (bracket readings and each tuning's GB/s), then per regime (all;
// the brackets' mean under 40 GB/s; at 45 or more) each tuning's median GB/s, its median
// fraction of the brackets' mean, and how often it drew the most.
// Build: scripts/build.sh build -DWARDEN_BENCH=ON (build/bench_tuning_ab, with -march=native:
// the read loops, brackets included, then read with the widest loads the CPU has; see
// read_bytes).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kernels/decode_tuning.h"
#include "kernels/matmul.h"
#include "kernels/matmul_quant.h"
#include "small_scales.h"
#include "tensor/weight_format.h"
#include "util/huge_page_arena.h"
#include "util/thread_pool.h"

using namespace warden;

namespace {

struct Mat {
    kernels::WeightMatrix w;
    util::ArenaBuffer buf;
    std::vector<float> y;
};

util::HugePageArena& arena() {
    static util::HugePageArena a;
    return a;
}

// Random codes with valid small scales (f16 0x2000 ~ 0.0078) in every scale slot, as
// bench_gemv_decode makes them: values do not matter for speed, finite arithmetic does.
Mat make(const tensor::WeightFormat& f, int64_t rows, int64_t cols, std::mt19937_64& rng) {
    Mat m;
    m.w = kernels::weight_layout(f, rows, cols);
    m.buf = arena().allocate(static_cast<size_t>(kernels::quant_packed_bytes(m.w)));
    for (size_t i = 0; i + 8 <= m.buf.size(); i += 8) {
        const uint64_t v = rng();
        std::memcpy(m.buf.data() + i, &v, 8);
    }
    bench::set_small_scales(m.w, m.buf.data());
    m.w.data = m.buf.data();
    m.y.resize(static_cast<size_t>(rows));
    return m;
}

// Read bandwidth of two threads streaming halves of a 1 GiB buffer, whole passes for at least
// `seconds` (bench/membw.cpp's --seconds reading, in-process so no load time falls between).
double read_gbps(const std::vector<uint64_t>& buf, double seconds) {
    std::atomic<uint64_t> sink{0};
    const size_t n = buf.size();
    const auto t0 = std::chrono::steady_clock::now();
    double elapsed = 0;
    size_t passes = 0;
    do {
        std::thread th[2];
        for (int t = 0; t < 2; ++t)
            th[t] = std::thread([&, t] {
                uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
                for (size_t i = t * n / 2; i + 4 <= (t + 1) * n / 2; i += 4) {
                    s0 += buf[i];
                    s1 += buf[i + 1];
                    s2 += buf[i + 2];
                    s3 += buf[i + 3];
                }
                sink += s0 + s1 + s2 + s3;
            });
        for (auto& x : th) x.join();
        ++passes;
        elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    } while (elapsed < seconds);
    if (sink.load() == 1) std::fputs("", stderr);  // keeps the sums alive
    return static_cast<double>(passes * n * 8) / elapsed / 1e9;
}

// A sum over [p, p + n) (n a multiple of 64) in whole 64-byte loads where the build has them
// (-march=native on an AVX-512 CPU), four lines per turn. Load width matters here: each load in
// flight holds a slot of the core's load queue, so 8- or 16-byte loads keep fewer lines in
// flight per core than 64-byte ones, and where one core's share of the bandwidth is high (the
// fast minutes) a narrow loop can fall behind for that reason alone.
using Line = uint64_t __attribute__((vector_size(64)));
uint64_t read_bytes(const uint8_t* p, size_t n) {
    Line s[4] = {};
    size_t i = 0;
    for (; i + 256 <= n; i += 256) {
        Line v[4];
        std::memcpy(v, p + i, sizeof v);
        for (int k = 0; k < 4; ++k) s[k] += v[k];
    }
    for (; i + 64 <= n; i += 64) {  // the last lines of a share
        Line v;
        std::memcpy(&v, p + i, sizeof v);
        s[0] += v;
    }
    const Line t = s[0] + s[1] + s[2] + s[3];
    uint64_t sum = 0;
    for (int k = 0; k < 8; ++k) sum += t[k];
    return sum;
}

// Thread t's contiguous share (whole lines, the pool's own split) of each matrix in `ms`, read.
uint64_t read_share(const std::vector<Mat*>& ms, int t, int threads) {
    uint64_t s = 0;
    for (const Mat* m : ms) {
        const auto [b, e] = util::ThreadPool::prefetch_slice(
            m->buf.size(), static_cast<size_t>(threads), static_cast<size_t>(t));
        s += read_bytes(m->buf.data() + b, e - b);
    }
    return s;
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 6) {
        std::fprintf(stderr,
                     "usage: %s FORMAT ITERS PASSES SPEC SPEC [SPEC ...]  (SPEC: "
                     "WARDEN_DECODE_TUNING syntax, - for this CPU's table)\n",
                     argv[0]);
        return 2;
    }
    tensor::WeightFormat fmt;
    try {
        fmt = tensor::parse_weight_format(argv[1]);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "%s\n", e.what());
        return 2;
    }
    if (fmt.type != tensor::WeightType::Q4 && fmt.type != tensor::WeightType::Q8) {
        std::fprintf(stderr,
                     "FORMAT must be an int4 or int8 format (int4, int4-g128, int8, ...)\n");
        return 2;
    }
    const int iters = std::atoi(argv[2]), passes = std::atoi(argv[3]);
    if (iters < 1 || iters > 100000 || passes < 1 || passes > 1000) {
        std::fprintf(stderr, "ITERS must be in [1, 100000] and PASSES in [1, 1000]\n");
        return 2;
    }
    std::vector<std::string> specs;
    std::vector<kernels::DecodeTuning> tunings;
    for (int i = 4; i < argc; ++i) {
        kernels::DecodeTuning t = kernels::vendor_decode_tuning();
        if (std::strcmp(argv[i], "read:matmul") == 0 || std::strcmp(argv[i], "read:pass") == 0) {
            specs.push_back(argv[i]);
            tunings.push_back(t);
            continue;
        }
        if (std::strcmp(argv[i], "-") != 0 && !kernels::parse_decode_tuning(argv[i], t, t)) {
            std::fprintf(stderr, "not a WARDEN_DECODE_TUNING spec: %s\n", argv[i]);
            return 2;
        }
        specs.push_back(std::strcmp(argv[i], "-") == 0 ? std::string("table:") + t.source
                                                       : argv[i]);
        tunings.push_back(t);
    }
    const int nt = static_cast<int>(tunings.size());

    std::vector<uint64_t> big(size_t{1} << 27);  // 1 GiB, far beyond the LLC
    for (size_t i = 0; i < big.size(); ++i) big[i] = i;
    std::mt19937_64 rng(1);
    const int64_t d = 2048, ff = 8192, kv = 512, layers = 16;
    std::vector<std::vector<Mat>> L(layers);
    int64_t bytes = 0;
    for (auto& l : L)
        for (const auto& [r, c] :
             {std::pair{d, d}, {kv, d}, {kv, d}, {d, d}, {ff, d}, {ff, d}, {d, ff}}) {
            l.push_back(make(fmt, r, c, rng));
            bytes += static_cast<int64_t>(l.back().buf.size());
        }
    std::vector<float> x(static_cast<size_t>(ff));
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (auto& v : x) v = u(rng);
    util::ThreadPool pool(2);
    auto mm = [&](const std::vector<Mat*>& ms) {
        kernels::MatmulOut o[3];
        size_t k = 0;
        for (Mat* m : ms) o[k++] = {&m->w, m->y.data()};
        kernels::matmul_multi(std::span<const kernels::MatmulOut>(o, k), x.data(), 1, pool);
    };
    // The decode pass's matmul calls, in order: fused q/k/v, o, fused gate/up, down.
    std::vector<std::vector<Mat*>> calls;
    for (auto& l : L) {
        calls.push_back({&l[0], &l[1], &l[2]});
        calls.push_back({&l[3]});
        calls.push_back({&l[4], &l[5]});
        calls.push_back({&l[6]});
    }
    std::atomic<uint64_t> sink{0};
    auto read_call = [&](const std::vector<Mat*>& ms) {
        pool.run([&](int t, int threads) { sink += read_share(ms, t, threads); });
    };
    auto read_pass = [&] {
        pool.run([&](int t, int threads) {
            for (const auto& ms : calls) sink += read_share(ms, t, threads);
        });
    };
    std::printf("format %s, %.1f MB per pass, 2 threads\n", argv[1],
                static_cast<double>(bytes) / 1e6);

    struct Iter {
        double bracket;
        std::vector<double> gbps;
    };
    std::vector<Iter> log;
    for (int it = 0; it < iters; ++it) {
        const double pre = read_gbps(big, 0.25);
        Iter rec{0, std::vector<double>(static_cast<size_t>(nt))};
        std::printf("%d pre %.1f", it, pre);
        for (int k = 0; k < nt; ++k) {
            const int i = (k + it) % nt;
            kernels::set_decode_tuning(tunings[static_cast<size_t>(i)]);
            const auto t0 = std::chrono::steady_clock::now();
            const std::string& spec = specs[static_cast<size_t>(i)];
            for (int p = 0; p < passes; ++p) {
                if (spec == "read:pass") {
                    read_pass();
                } else if (spec == "read:matmul") {
                    for (const auto& ms : calls) read_call(ms);
                } else {
                    for (const auto& ms : calls) mm(ms);
                }
            }
            const double s =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            rec.gbps[static_cast<size_t>(i)] = static_cast<double>(bytes) * passes / s / 1e9;
        }
        const double post = read_gbps(big, 0.25);
        rec.bracket = (pre + post) / 2;
        for (int i = 0; i < nt; ++i)
            std::printf(" | %s %.1f", specs[static_cast<size_t>(i)].c_str(),
                        rec.gbps[static_cast<size_t>(i)]);
        std::printf(" | post %.1f\n", post);
        std::fflush(stdout);
        log.push_back(rec);
    }

    if (sink.load() == 1) std::fputs("", stderr);  // keeps the read loops' sums alive
    const struct {
        const char* name;
        double lo, hi;
    } regimes[] = {{"all", 0, 1e9},
                   {"brackets under 40 GB/s", 0, 40},
                   {"brackets at 45 GB/s or more", 45, 1e9}};
    for (const auto& g : regimes) {
        std::vector<const Iter*> sel;
        for (const Iter& r : log)
            if (r.bracket >= g.lo && r.bracket < g.hi) sel.push_back(&r);
        std::vector<double> br;
        for (const Iter* r : sel) br.push_back(r->bracket);
        std::printf("%s: %zu iterations, bracket median %.1f GB/s\n", g.name, sel.size(),
                    median(br));
        if (sel.empty()) continue;
        for (int i = 0; i < nt; ++i) {
            std::vector<double> v, frac;
            int wins = 0;
            for (const Iter* r : sel) {
                const double gb = r->gbps[static_cast<size_t>(i)];
                v.push_back(gb);
                frac.push_back(100.0 * gb / r->bracket);
                wins += std::max_element(r->gbps.begin(), r->gbps.end()) - r->gbps.begin() == i;
            }
            std::printf(
                "  %-32s median %.1f GB/s, %.0f%% of its brackets, drew the most in %d of %zu\n",
                specs[static_cast<size_t>(i)].c_str(), median(v), median(frac), wins, sel.size());
        }
    }
    return 0;
}
