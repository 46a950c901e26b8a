// Cost of a multi-row (M tokens) step's matmuls on one thread, for speculative verification and
// small-batch decode: the default model's shapes (SmolLM2-135M: 30 layers of q/k/v 576/192/192 x
// 576, o 576 x 576, gate/up 1536 x 576, down 576 x 1536 in LAYER_FORMAT, and the 49152 x 576 head
// in HEAD_FORMAT; any weight format, bf16 and f32 included), every matrix its own weights, so a
// step streams them from memory as decode does.
//   bench_multirow [LAYER_FORMAT=int4-g32-asym] [HEAD_FORMAT=int8-g32] [REPS=5] [M...]
// For each M (default 1 2 4 5 8 9 16 17) prints the best step thread CPU time of the layers and of
// the head (ms), their cost per extra row against M = 1, and integer ops (2 per multiply-add) per
// cycle at GHZ (environment, default 2.6, this VM's TSC; the core may clock higher, so these are
// upper bounds) and as a fraction of the measured peak: a loop of 12 independent 512-bit vpdpbusd
// chains on this core (64 multiply-adds each), which needs no clock figure. Kernels: the active
// ISA's (WARDEN_ISA), single-threaded (matmul_rows).
// Build: scripts/build.sh build -DWARDEN_BENCH=ON (build/bench_multirow).
#include <immintrin.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/matmul.h"
#include "kernels/matmul_quant.h"
#include "small_scales.h"
#include "tensor/weight_format.h"

using namespace warden;

namespace {

struct Mat {
    kernels::WeightMatrix w;
    std::vector<uint8_t> buf;
};

// Random codes with valid small scales (f16 0x2000): values do not matter for speed.
Mat make(const std::string& fmt, int64_t rows, int64_t cols, std::mt19937& rng) {
    Mat m;
    const tensor::WeightFormat f = tensor::parse_weight_format(fmt);
    m.w = kernels::weight_layout(f, rows, cols);
    if (!f.quantized()) {  // f32 / bf16 panels: small finite values
        const int64_t elems = kernels::packed_weight_elems(rows, cols);
        m.buf.resize(static_cast<size_t>(elems * (f.type == tensor::WeightType::BF16 ? 2 : 4)));
        std::uniform_real_distribution<float> u(-0.1f, 0.1f);
        std::vector<float> row(static_cast<size_t>(cols));
        for (int64_t r = 0; r < rows; ++r) {
            for (float& v : row) v = u(rng);
            kernels::pack_weight_row(f.type, cols, r, row.data(), m.buf.data());
        }
        m.w.data = m.buf.data();
        return m;
    }
    m.buf.resize(static_cast<size_t>(kernels::quant_packed_bytes(m.w)));
    for (auto& b : m.buf) b = static_cast<uint8_t>(rng());
    bench::set_small_scales(m.w, m.buf.data());
    m.w.data = m.buf.data();
    return m;
}

// Thread CPU time: on a machine shared with other work, wall time would count their slices.
double now_s() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Multiply-add ops (2 per multiply-add) per second of 512-bit vpdpbusd on this core, from 12
// independent accumulator chains (more than the instruction's latency x throughput).
__attribute__((target("avx512f,avx512vnni"))) double vnni_peak_ops() {
    constexpr int kChains = 12;
    constexpr int64_t kIters = 2'000'000;
    __m512i c[kChains];
    for (int i = 0; i < kChains; ++i) c[i] = _mm512_set1_epi32(i);
    const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(5);
    const double t0 = now_s();
    for (int64_t it = 0; it < kIters; ++it)
        for (int i = 0; i < kChains; ++i) {
            c[i] = _mm512_dpbusd_epi32(c[i], a, b);
            asm volatile("" : "+v"(c[i]));
        }
    const double t = now_s() - t0;
    int32_t sum = 0;
    for (int i = 0; i < kChains; ++i) {
        alignas(64) int32_t lanes[16];
        _mm512_store_si512(lanes, c[i]);
        sum += lanes[0];
    }
    asm volatile("" : : "r"(sum));
    return 2.0 * 64.0 * kChains * static_cast<double>(kIters) / t;
}

}  // namespace

int main(int argc, char** argv) {
    const std::string lfmt = argc > 1 ? argv[1] : "int4-g32-asym";
    const std::string hfmt = argc > 2 ? argv[2] : "int8-g32";
    const int reps = argc > 3 ? std::atoi(argv[3]) : 5;
    std::vector<int64_t> ms;
    for (int i = 4; i < argc; ++i) ms.push_back(std::atoll(argv[i]));
    if (ms.empty()) ms = {1, 2, 4, 5, 8, 9, 16, 17};
    for (int64_t m : ms)
        if (m < 1 || m > 512) {
            std::fprintf(stderr, "M must be in [1, 512]\n");
            return 2;
        }
    const char* ghz_env = std::getenv("GHZ");
    const double ghz = ghz_env ? std::atof(ghz_env) : 2.6;
    const int64_t d = 576, ff = 1536, kv = 192, layers = 30, vocab = 49152;
    std::mt19937 rng(1);
    std::vector<Mat> L;
    int64_t layer_macs = 0;  // multiply-adds per token
    for (int64_t l = 0; l < layers; ++l)
        for (auto [r, c] : {std::pair{d, d}, {kv, d}, {kv, d}, {d, d}, {ff, d}, {ff, d}, {d, ff}}) {
            L.push_back(make(lfmt, r, c, rng));
            layer_macs += r * c;
        }
    const Mat head = make(hfmt, vocab, d, rng);
    const int64_t head_macs = vocab * d;
    std::vector<float> x(static_cast<size_t>(512 * ff)), y(static_cast<size_t>(512 * vocab));
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (float& v : x) v = u(rng);
    const kernels::Isa isa = kernels::active_isa();
    double peak = 0;  // ops/s
    for (int r = 0; r < 3; ++r)
        peak = std::max(peak, isa == kernels::Isa::AVX512 ? vnni_peak_ops() : 0.0);
    std::printf(
        "isa=%s layers=%s head=%s reps=%d ghz=%.2f (1 thread) vnni_peak=%.1f Gop/s = %.1f "
        "op/c\n",
        kernels::isa_name(isa), lfmt.c_str(), hfmt.c_str(), reps, ghz, peak / 1e9,
        peak / (ghz * 1e9));
    std::printf("%4s %10s %10s %12s %12s %12s %12s %10s %10s\n", "M", "layers_ms", "head_ms",
                "layers_+row", "head_+row", "layers_op/c", "head_op/c", "layers_pk", "head_pk");
    double l1 = 0, h1 = 0;
    for (int64_t m : ms) {
        double lb = 1e30, hb = 1e30;
        for (int r = 0; r < reps; ++r) {
            double t0 = now_s();
            for (const Mat& mat : L)
                kernels::matmul_rows(isa, mat.w, x.data(), m, y.data(), 0, mat.w.rows);
            const double t1 = now_s();
            kernels::matmul_rows(isa, head.w, x.data(), m, y.data(), 0, head.w.rows);
            const double t2 = now_s();
            lb = std::min(lb, t1 - t0);
            hb = std::min(hb, t2 - t1);
        }
        if (m == 1) l1 = lb, h1 = hb;
        const auto per_row = [&](double t, double t_1) {
            return m > 1 && t_1 > 0 ? (t - t_1) / static_cast<double>(m - 1) * 1e3 : 0.0;
        };
        const auto opc = [&](int64_t macs, double t) {
            return 2.0 * static_cast<double>(macs * m) / (t * ghz * 1e9);
        };
        const auto of_peak = [&](int64_t macs, double t) {
            return peak > 0 ? 2.0 * static_cast<double>(macs * m) / t / peak : 0.0;
        };
        std::printf("%4lld %10.3f %10.3f %12.3f %12.3f %12.1f %12.1f %10.2f %10.2f\n",
                    static_cast<long long>(m), lb * 1e3, hb * 1e3, per_row(lb, l1), per_row(hb, h1),
                    opc(layer_macs, lb), opc(head_macs, hb), of_peak(layer_macs, lb),
                    of_peak(head_macs, hb));
    }
    return 0;
}
