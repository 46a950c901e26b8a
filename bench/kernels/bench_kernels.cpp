// Kernel micro-benchmarks: memory-read roofline, decode matvec (bandwidth) and prefill GEMM
// (compute). Build: scripts/build.sh build -DWARDEN_BENCH=ON (build/bench_kernels).
// Run: build/bench_kernels [threads=2]   (WARDEN_ISA=scalar|avx2|avx512 picks the kernels)
// Weights are rotated over several copies (>= 256 MiB in total) so each matvec streams from
// DRAM rather than from a warm 32 MiB L3. Weights use the packed panel layout of
// kernels/matmul.h (packed_weight_elems elements; the values are uniform, so the fill does not
// need pack_weight_row).
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/matmul.h"
#include "util/thread_pool.h"

using namespace warden;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

double thread_cpu_seconds() {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// Sum of 64-bit words over 4 equal quarters read side by side, 4 independent AVX2
// accumulators: the plain "read every byte once" loop the matvec is compared with. Four
// concurrent streams (like the matvec's 4 weight panels) because a single sequential stream
// does not reach DRAM bandwidth on one Zen core (prefetcher concurrency limits it).
__attribute__((target("avx2"))) uint64_t read_sum(const uint8_t* p, size_t bytes) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    const size_t q = (bytes / 4) & ~size_t{63};
    const uint8_t *p0 = p, *p1 = p + q, *p2 = p + 2 * q, *p3 = p + 3 * q;
    for (size_t i = 0; i + 64 <= q; i += 64) {
        a0 = _mm256_add_epi64(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p0 + i)));
        a1 = _mm256_add_epi64(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p1 + i)));
        a2 = _mm256_add_epi64(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p2 + i)));
        a3 = _mm256_add_epi64(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p3 + i)));
        a0 = _mm256_add_epi64(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p0 + i + 32)));
        a1 = _mm256_add_epi64(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p1 + i + 32)));
        a2 = _mm256_add_epi64(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p2 + i + 32)));
        a3 = _mm256_add_epi64(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p3 + i + 32)));
    }
    alignas(32) uint64_t out[4];
    _mm256_store_si256(reinterpret_cast<__m256i*>(out),
                       _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3)));
    return out[0] + out[1] + out[2] + out[3];
}

// GB per CPU-second of one thread: immune to the scheduler handing our core to another
// process (these machines are shared), so it is the figure to compare ratios on.
double read_gb_per_cpu_s(const uint8_t* buf, size_t bytes) {
    double best = 1e30;
    volatile uint64_t sink = 0;
    for (int rep = 0; rep < 5; ++rep) {
        const double c0 = thread_cpu_seconds();
        const uint64_t s = read_sum(buf, bytes);
        if (s == 42) sink = s;
        best = std::min(best, thread_cpu_seconds() - c0);
    }
    (void)sink;
    return bytes / best / 1e9;
}

double mem_read_gbs(util::ThreadPool& pool, const uint8_t* buf, size_t bytes) {
    double best = 1e30;
    volatile uint64_t sink = 0;
    for (int rep = 0; rep < 5; ++rep) {
        auto t0 = Clock::now();
        pool.run([&](int t, int nt) {
            const size_t per = (bytes / nt) & ~size_t{255};
            const uint64_t s = read_sum(buf + per * t, per);
            if (s == 42) sink = s;
        });
        best = std::min(best, seconds_since(t0));
    }
    (void)sink;
    return bytes / best / 1e9;
}

void* alloc64(size_t bytes) {
    void* p = std::aligned_alloc(64, (bytes + 63) & ~size_t{63});
    std::memset(p, 1, bytes);  // fault the pages in, non-zero data
    return p;
}

double matvec_gbs(util::ThreadPool& pool, tensor::WeightType type, int64_t rows, int64_t cols,
                  double* per_cpu_s) {
    const size_t elt = type == tensor::WeightType::BF16 ? 2 : 4;
    const size_t bytes = kernels::packed_weight_elems(rows, cols) * elt;
    const int copies = static_cast<int>(std::max<size_t>(2, (256u << 20) / bytes));
    std::vector<void*> mats;
    for (int c = 0; c < copies; ++c) {
        void* p = alloc64(bytes);
        if (type == tensor::WeightType::BF16) {  // finite bf16 values (0x3f80 = 1.0)
            auto* h = static_cast<uint16_t*>(p);
            for (size_t i = 0; i < bytes / 2; ++i) h[i] = 0x3f80;
        } else {
            auto* f = static_cast<float*>(p);
            for (size_t i = 0; i < bytes / 4; ++i) f[i] = 1.0f;
        }
        mats.push_back(p);
    }
    std::vector<float> x(cols, 0.5f), y(rows);
    double best = 1e30;
    for (int rep = 0; rep < 4 * copies; ++rep) {
        kernels::WeightMatrix w{type, rows, cols, mats[rep % copies]};
        auto t0 = Clock::now();
        kernels::matmul(w, x.data(), 1, y.data(), pool);
        if (rep >= copies) best = std::min(best, seconds_since(t0));  // first round warms up
    }
    util::ThreadPool one(1);
    double best_cpu = 1e30;
    for (int rep = 0; rep < 2 * copies; ++rep) {
        kernels::WeightMatrix w{type, rows, cols, mats[rep % copies]};
        const double c0 = thread_cpu_seconds();
        kernels::matmul(w, x.data(), 1, y.data(), one);
        best_cpu = std::min(best_cpu, thread_cpu_seconds() - c0);
    }
    *per_cpu_s = bytes / best_cpu / 1e9;
    for (void* p : mats) std::free(p);
    return bytes / best / 1e9;
}

// Returns wall-clock GFLOP/s on `pool`; *per_cpu_s gets GFLOP per CPU-second of the calling
// thread on a 1-thread pool (robust against other processes stealing the shared cores).
double gemm_gflops(util::ThreadPool& pool, tensor::WeightType type, int64_t rows, int64_t cols,
                   int64_t n, double* per_cpu_s) {
    const size_t elt = type == tensor::WeightType::BF16 ? 2 : 4;
    const int64_t elems = kernels::packed_weight_elems(rows, cols);
    void* wp = alloc64(elems * elt);
    if (type == tensor::WeightType::BF16) {
        auto* h = static_cast<uint16_t*>(wp);
        for (int64_t i = 0; i < elems; ++i) h[i] = static_cast<uint16_t>(0x3c00 + (i & 0xff));
    } else {
        auto* f = static_cast<float*>(wp);
        for (int64_t i = 0; i < elems; ++i) f[i] = 0.01f * static_cast<float>(i & 0xff);
    }
    std::vector<float> x(n * cols, 0.25f), y(n * rows);
    kernels::WeightMatrix w{type, rows, cols, wp};
    double best = 1e30;
    for (int rep = 0; rep < 4; ++rep) {
        auto t0 = Clock::now();
        kernels::matmul(w, x.data(), n, y.data(), pool);
        best = std::min(best, seconds_since(t0));
    }
    util::ThreadPool one(1);
    double best_cpu = 1e30;
    for (int rep = 0; rep < 2; ++rep) {
        const double c0 = thread_cpu_seconds();
        kernels::matmul(w, x.data(), n, y.data(), one);
        best_cpu = std::min(best_cpu, thread_cpu_seconds() - c0);
    }
    *per_cpu_s = 2.0 * n * rows * cols / best_cpu / 1e9;
    std::free(wp);
    return 2.0 * n * rows * cols / best / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
    const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
    std::printf("isa=%s threads=%d\n", kernels::isa_name(kernels::active_isa()), threads);
    util::ThreadPool pool1(1), pool(threads);

    const size_t mem_bytes = size_t{512} << 20;
    auto* buf = static_cast<uint8_t*>(alloc64(mem_bytes));
    const double bw1 = mem_read_gbs(pool1, buf, mem_bytes);
    const double bw = mem_read_gbs(pool, buf, mem_bytes);
    const double bw_cpu = read_gb_per_cpu_s(buf, mem_bytes);
    std::free(buf);
    std::printf(
        "memory read: %.1f GB/s wall (1 thread), %.1f GB/s wall (%d threads), "
        "%.1f GB per CPU-second (1 thread)\n",
        bw1, bw, threads, bw_cpu);

    const int64_t shapes[2][2] = {{2048, 8192}, {8192, 2048}};  // {rows(out), cols(in)}
    for (auto type : {tensor::WeightType::BF16, tensor::WeightType::F32}) {
        const char* tn = type == tensor::WeightType::BF16 ? "bf16" : "f32";
        for (const auto& s : shapes) {
            double per_cpu = 0.0;
            const double g = matvec_gbs(pool, type, s[0], s[1], &per_cpu);
            std::printf(
                "matvec %-4s %5lldx%-5lld n=1: %6.1f GB/s wall = %5.1f%% of read wall; "
                "%6.1f GB per CPU-s = %5.1f%% of read per CPU-s\n",
                tn, static_cast<long long>(s[0]), static_cast<long long>(s[1]), g, 100.0 * g / bw,
                per_cpu, 100.0 * per_cpu / bw_cpu);
        }
    }
    const int64_t gshapes[2][2] = {{2048, 2048}, {5632, 2048}};
    for (auto type : {tensor::WeightType::BF16, tensor::WeightType::F32})
        for (const auto& s : gshapes)
            for (int64_t n : {64, 128, 512}) {
                double per_cpu = 0.0;
                const double gf = gemm_gflops(pool, type, s[0], s[1], n, &per_cpu);
                std::printf(
                    "gemm   %-4s %5lldx%-5lld n=%-3lld: %6.1f GFLOP/s wall (%d threads), "
                    "%6.1f GFLOP/s per CPU-second (1 thread)\n",
                    type == tensor::WeightType::BF16 ? "bf16" : "f32", static_cast<long long>(s[0]),
                    static_cast<long long>(s[1]), static_cast<long long>(n), gf, threads, per_cpu);
            }
    return 0;
}
