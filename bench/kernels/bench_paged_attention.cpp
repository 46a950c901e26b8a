// Decode attention alone (kernels::paged_attention, no weights): S sequences of CTX tokens, one
// query each, over L layers of SmolLM2-135M's shape (9 query heads, 3 kv heads, head dim 64),
// pages of P tokens in the real storage layout (a page holds every layer). Prints the best
// time per step over REPS and the KV bytes read per second. Page ids are a permutation (every
// third page), as a pool that has served a while hands them out.
//   bench_paged_attention FORMAT(bf16|fp8_e4m3|int8) S CTX REPS [THREADS=2] [P=16] [L=30]
// Build: scripts/build.sh build -DWARDEN_BENCH=ON (build/bench_paged_attention).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/paged_attention.h"
#include "util/huge_page_arena.h"
#include "util/thread_pool.h"

using namespace warden;
using namespace warden::kernels;

int main(int argc, char** argv) {
    if (argc < 5) {
        std::fprintf(stderr, "usage: %s FORMAT S CTX REPS [THREADS] [PAGE] [LAYERS]\n", argv[0]);
        return 2;
    }
    const std::string fmt = argv[1];
    const int64_t S = std::atoll(argv[2]), ctx = std::atoll(argv[3]);
    const int reps = std::atoi(argv[4]), threads = argc > 5 ? std::atoi(argv[5]) : 2;
    const int64_t P = argc > 6 ? std::atoll(argv[6]) : 16, L = argc > 7 ? std::atoll(argv[7]) : 30;
    const int64_t H = 9, G = 3, D = 64;
    PagedKvStorage st;
    st.type = fmt == "bf16" ? KvType::BF16 : fmt == "int8" ? KvType::INT8 : KvType::FP8_E4M3;
    st.page_size = P;
    st.n_layers = L;
    st.n_kv_heads = G;
    st.head_dim = D;
    const int64_t per_seq = (ctx + P - 1) / P, n_pages = S * per_seq + 1;  // page 0: the template
    st.page_stride = st.bytes_per_page();
    // The engine's page pool maps its storage through HugePageArena (2 MiB pages where the kernel
    // gives them, src/kv/page_pool.cpp); a heap vector here read the pages through 4 KiB pages, a
    // TLB miss for nearly every (page, layer, head) run, which the engine does not pay.
    // BENCH_PAGES_4K=1 keeps the heap buffer.
    std::vector<uint8_t> heap;
    util::ArenaBuffer arena;
    uint8_t* base = nullptr;
    if (std::getenv("BENCH_PAGES_4K") != nullptr) {
        heap.resize(static_cast<size_t>(n_pages * st.page_stride));
        base = heap.data();
    } else {
        arena = util::HugePageArena::map(static_cast<size_t>(n_pages * st.page_stride),
                                         /*populate=*/true);
        base = arena.data();
    }
    st.base = base;
    std::mt19937 rng(1);
    std::normal_distribution<float> nd;
    std::vector<float> k(static_cast<size_t>(P * G * D)), v(k.size());
    const int32_t tmpl = 0;
    for (int64_t l = 0; l < L; ++l) {
        for (auto& x : k) x = nd(rng);
        for (auto& x : v) x = nd(rng);
        write_kv(st.layer(l), &tmpl, 0, P, k.data(), v.data());
    }
    for (int64_t p = 1; p < n_pages; ++p)
        std::memcpy(base + p * st.page_stride, base, static_cast<size_t>(st.page_stride));
    std::vector<std::vector<int32_t>> ids(static_cast<size_t>(S));
    for (int64_t i = 0; i < S * per_seq; ++i)
        ids[static_cast<size_t>(i / per_seq)].push_back(
            static_cast<int32_t>(1 + (i * 3) % (S * per_seq)));
    std::vector<float> q(static_cast<size_t>(S * H * D)), o(q.size());
    for (auto& x : q) x = nd(rng) * 0.1f;
    util::ThreadPool pool(threads);
    std::vector<PagedAttentionSeq> seqs(static_cast<size_t>(S));
    for (int64_t i = 0; i < S; ++i) {
        auto& s = seqs[static_cast<size_t>(i)];
        s.q = q.data() + i * H * D;
        s.out = o.data() + i * H * D;
        s.n_q = 1;
        s.pos0 = ctx - 1;
        s.page_ids = ids[static_cast<size_t>(i)].data();
    }
    double best = 1e30;
    for (int r = 0; r < reps; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int64_t l = 0; l < L; ++l) paged_attention(seqs, H, st.layer(l), 0.125f, pool);
        best = std::min(
            best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    const double bytes = static_cast<double>(S * ctx * L * 2 * G) *
                         static_cast<double>(st.block_bytes()) / static_cast<double>(P * G);
    std::printf(
        "format=%s seqs=%lld ctx=%lld threads=%d page=%lld layers=%lld best_ms_per_step=%.2f "
        "KV_GBps=%.2f\n",
        fmt.c_str(), static_cast<long long>(S), static_cast<long long>(ctx), threads,
        static_cast<long long>(P), static_cast<long long>(L), best * 1e3, bytes / best / 1e9);
    return 0;
}
