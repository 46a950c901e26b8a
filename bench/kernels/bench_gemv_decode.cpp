// Batch-1 decode GEMV throughput of one weight format on the Llama-3.2-1B layer shapes (16 layers
// of q/k/v/o/gate/up/down, optional 32000-row head), without the rest of the model: measures how
// close the matmul kernels + thread dispatch get to the memory roofline.
//   bench_gemv_decode FORMAT THREADS REPS [fused|separate] [head|nohead] [N]
// N (default 1, at most 512, the engine's default step budget): tokens per step, for the
// batched-decode / prefill GEMM.
// FORMAT: a --weights name (int4, int4-g128, int8, ...) or bf16. Weight bytes are random codes
// with valid scales (values do not matter for speed). Prints bytes per token, best and median
// ms per token over REPS passes, and GB/s. Weights come from util::HugePageArena, as the engine's
// do (2 MiB pages where available); BENCH_PAGES_4K=1 in the environment takes them from the heap
// instead, which is 4 KiB pages where transparent huge pages are in `madvise` mode (as here).
// Build: scripts/build.sh build -DWARDEN_BENCH=ON (build/bench_gemv_decode).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/matmul.h"
#include "kernels/matmul_quant.h"
#include "small_scales.h"
#include "tensor/weight_format.h"
#include "util/huge_page_arena.h"
#include "util/thread_pool.h"

using namespace warden;

struct Mat {
    kernels::WeightMatrix w;
    util::ArenaBuffer buf;
    std::vector<float> y;
};

static constexpr int64_t kMaxTokens = 512;

static util::ArenaBuffer weight_bytes(size_t n) {
    static util::HugePageArena arena;
    static const bool small_pages = std::getenv("BENCH_PAGES_4K") != nullptr;
    return small_pages ? util::ArenaBuffer(n) : arena.allocate(n);
}

static Mat make(const std::string& fmt, int64_t rows, int64_t cols, int64_t ntok,
                std::mt19937& rng) {
    Mat m;
    if (fmt == "bf16") {
        m.w = kernels::WeightMatrix{tensor::WeightType::BF16, rows, cols, nullptr};
        m.buf = weight_bytes(static_cast<size_t>(kernels::packed_weight_elems(rows, cols)) * 2);
        auto* p = reinterpret_cast<uint16_t*>(m.buf.data());
        for (size_t i = 0; i < m.buf.size() / 2; ++i)
            p[i] = static_cast<uint16_t>(0x3c00 + (rng() & 0xff));
    } else {
        m.w = kernels::weight_layout(tensor::parse_weight_format(fmt), rows, cols);
        m.buf = weight_bytes(static_cast<size_t>(kernels::quant_packed_bytes(m.w)));
        for (size_t i = 0; i < m.buf.size(); ++i) m.buf.data()[i] = static_cast<uint8_t>(rng());
        bench::set_small_scales(m.w, m.buf.data());
    }
    m.w.data = m.buf.data();
    m.y.resize(static_cast<size_t>(rows * ntok));
    return m;
}

int main(int argc, char** argv) {
    if (argc < 4) {
        std::fprintf(stderr, "usage: %s FORMAT THREADS REPS [fused|separate] [head]\n", argv[0]);
        return 2;
    }
    const std::string fmt = argv[1];
    const int threads = std::atoi(argv[2]), reps = std::atoi(argv[3]);
    const bool fused = argc <= 4 || std::string(argv[4]) == "fused";
    const bool head = argc > 5 && std::string(argv[5]) == "head";
    // Tokens per step (n > 1: the prefill / batched-decode GEMM; throughput reported per token).
    const int64_t ntok = argc > 6 ? std::atoll(argv[6]) : 1;
    if (ntok < 1 || ntok > kMaxTokens) {
        std::fprintf(stderr, "N must be in [1, %lld]\n", static_cast<long long>(kMaxTokens));
        return 2;
    }
    const int64_t d = 2048, ff = 8192, kv = 512, layers = 16, vocab = 32000;
    std::mt19937 rng(1);
    std::vector<std::vector<Mat>> L(layers);
    int64_t bytes = 0, params = 0;
    for (int64_t l = 0; l < layers; ++l) {
        L[l].push_back(make(fmt, d, d, ntok, rng));
        L[l].push_back(make(fmt, kv, d, ntok, rng));
        L[l].push_back(make(fmt, kv, d, ntok, rng));
        L[l].push_back(make(fmt, d, d, ntok, rng));
        L[l].push_back(make(fmt, ff, d, ntok, rng));
        L[l].push_back(make(fmt, ff, d, ntok, rng));
        L[l].push_back(make(fmt, d, ff, ntok, rng));
        for (auto& m : L[l]) {
            bytes += static_cast<int64_t>(m.buf.size());
            params += m.w.rows * m.w.cols;
        }
    }
    Mat H;
    if (head) {
        H = make(fmt, vocab, d, ntok, rng);
        bytes += static_cast<int64_t>(H.buf.size());
        params += H.w.rows * H.w.cols;
    }
    std::vector<float> x(static_cast<size_t>(ff * ntok));
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (auto& v : x) v = u(rng);
    util::ThreadPool pool(threads);
    auto mm = [&](std::initializer_list<Mat*> ms, const float* in) {
        if (fused) {
            kernels::MatmulOut o[3];
            size_t k = 0;
            for (Mat* m : ms) o[k++] = {&m->w, m->y.data()};
            kernels::matmul_multi(std::span<const kernels::MatmulOut>(o, k), in, ntok, pool);
        } else {
            for (Mat* m : ms) kernels::matmul(m->w, in, ntok, m->y.data(), pool);
        }
    };
    std::vector<double> ms;
    for (int r = 0; r < reps; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int64_t l = 0; l < layers; ++l) {
            auto& M = L[l];
            mm({&M[0], &M[1], &M[2]}, x.data());
            mm({&M[3]}, x.data());
            mm({&M[4], &M[5]}, x.data());
            mm({&M[6]}, x.data());
        }
        if (head) mm({&H}, x.data());
        ms.push_back(
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                .count());
    }
    std::sort(ms.begin(), ms.end());
    const double best = ms.front(), med = ms[ms.size() / 2];
    std::printf(
        "format=%s threads=%d mode=%s head=%d bytes_per_token=%.1fMB best_ms=%.2f median_ms=%.2f "
        "best_GBps=%.2f "
        "best_tok_s=%.2f n=%lld best_GMACps=%.1f\n",
        fmt.c_str(), threads, fused ? "fused" : "separate", head ? 1 : 0, bytes / 1e6, best, med,
        bytes / best / 1e6, 1000.0 * static_cast<double>(ntok) / best, static_cast<long long>(ntok),
        static_cast<double>(params) * static_cast<double>(ntok) / best / 1e6);
    return 0;
}
