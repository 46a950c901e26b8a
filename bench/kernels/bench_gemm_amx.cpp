// The W4A8/W8A8 GEMM alone, AVX-512 VNNI against AMX-INT8, and the bf16 GEMM, AVX-512 panels
// against AMX-BF16 (hi/lo split activations, kernels/matmul_bf16_tiles.h), on the 1.1B-shaped
// matrices (TinyLlama-1.1B: d_model 2048, d_ff 5632, 4 KV heads of 64) at M = 1, 8, 32, 128, 512
// tokens: one thread, matmul_rows with an explicit ISA (activation quantization included, as in a
// real call), best of REPS calls per (format, matrix, M). Prints multiply-adds per TSC cycle (2 ops
// each: ops/cycle = 2 M N K / cycles) and GOPS. The TSC ticks at the nominal clock, not the core's
// turbo clock, so ops/cycle here is per nominal cycle. An ISA the CPU or OS lacks prints a row
// saying so instead of numbers ("no AMX on this CPU (...)", kernels::amx_status()). AMX rows also
// print their share of the AMX peak, taken per TSC cycle as above: for int4/int8 the AMX-INT8
// peak, 2048 ops per core cycle (one 16x16x64 TDPB*D, 16384 multiply-adds, every 16 cycles on
// Sapphire Rapids); for bf16 the AMX-BF16 peak, 1024 (one 16x16x32 TDPBF16PS every 16 cycles),
// of which the hi/lo split (two tile multiplies per weight tile) can reach at most half.
//   bench_gemm_amx [FORMAT ...] [--reps N] [--m LIST]   FORMAT: int4 (default), int8, int8-g32,
//   bf16
// Build: scripts/build.sh build -DWARDEN_BENCH=ON (build/bench_gemm_amx).
#include <x86intrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/matmul.h"
#include "kernels/matmul_bf16_tiles.h"
#include "kernels/matmul_quant.h"
#include "quant/quantizer.h"
#include "tensor/weight_format.h"

using namespace warden;

namespace {

struct Shape {
    const char* name;
    int64_t rows, cols;
};
constexpr Shape kShapes[] = {
    {"q/o 2048x2048", 2048, 2048},
    {"k/v 256x2048", 256, 2048},
    {"gate/up 5632x2048", 5632, 2048},
    {"down 2048x5632", 2048, 5632},
};

// bf16: the panels in buf and the AMX-BF16 tile copy in tiles (as the loader makes it where
// AMX-BF16 runs).
kernels::WeightMatrix make_weights(const std::string& fmt, const Shape& s,
                                   std::vector<uint8_t>& buf, std::vector<uint8_t>& tiles) {
    kernels::WeightMatrix w =
        kernels::weight_layout(tensor::parse_weight_format(fmt), s.rows, s.cols);
    const bool bf16 = w.type == kernels::WeightType::BF16;
    buf.assign(static_cast<size_t>(bf16 ? kernels::packed_weight_elems(s.rows, s.cols) * 2
                                        : kernels::quant_packed_bytes(w)),
               0);
    std::mt19937 rng(1);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    std::vector<float> row(static_cast<size_t>(s.cols));
    for (int64_t r = 0; r < s.rows; ++r) {
        for (float& v : row) v = normal(rng);
        if (bf16)
            kernels::pack_weight_row(w.type, s.cols, r, row.data(), buf.data());
        else
            kernels::pack_quant_row(
                w, r, quant::default_quantizer().quantize_row(w, row.data(), nullptr), buf.data());
    }
    w.data = buf.data();
    if (bf16) {
        tiles.assign(static_cast<size_t>(kernels::bf16_tile_bytes(s.rows, s.cols)), 0);
        kernels::pack_bf16_tiles(w, tiles.data());
        w.tiles = tiles.data();
    }
    return w;
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<std::string> formats;
    std::vector<int64_t> ms = {1, 8, 32, 128, 512};
    int reps = 3;
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
            reps = std::atoi(argv[++i]);
        } else if (std::strcmp(argv[i], "--m") == 0 && i + 1 < argc) {
            ms.clear();
            for (const char* p = argv[++i]; *p;) {
                ms.push_back(std::atoll(p));
                while (*p && *p != ',') ++p;
                if (*p == ',') ++p;
            }
        } else {
            formats.emplace_back(argv[i]);
        }
    }
    if (formats.empty()) formats = {"int4"};
    if (reps < 1 || ms.empty() ||
        std::any_of(ms.begin(), ms.end(), [](int64_t m) { return m < 1 || m > 4096; })) {
        std::fprintf(stderr, "usage: %s [FORMAT ...] [--reps N>=1] [--m 1,8,...<=4096]\n", argv[0]);
        return 2;
    }
    std::printf("cpu: %s family 0x%x; AMX: %s\n", kernels::cpu_vendor(), kernels::cpu_family(),
                kernels::amx_status());
    std::printf("%-6s %-18s %5s %-7s %10s %10s %8s %s\n", "format", "matrix", "M", "isa", "ms",
                "ops/cycle", "GOPS", "AMX peak");
    std::mt19937 rng(2);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (const std::string& fmt : formats)
        for (const Shape& s : kShapes) {
            std::vector<uint8_t> buf, tiles;
            const kernels::WeightMatrix w = make_weights(fmt, s, buf, tiles);
            const double peak = w.type == kernels::WeightType::BF16 ? 1024.0 : 2048.0;
            for (int64_t m : ms) {
                std::vector<float> x(static_cast<size_t>(m * s.cols)),
                    y(static_cast<size_t>(m * s.rows));
                for (float& v : x) v = u(rng);
                for (kernels::Isa isa : {kernels::Isa::AVX512, kernels::Isa::AMX}) {
                    const char* name = kernels::isa_name(isa);
                    if (!kernels::isa_supported(isa)) {
                        std::printf("%-6s %-18s %5lld %-7s %s\n", fmt.c_str(), s.name,
                                    static_cast<long long>(m), name,
                                    isa == kernels::Isa::AMX ? kernels::amx_status()
                                                             : "not supported by this CPU/OS");
                        continue;
                    }
                    double best_s = 1e30;
                    uint64_t best_c = ~uint64_t{0};
                    for (int r = 0; r < reps; ++r) {
                        const auto t0 = std::chrono::steady_clock::now();
                        const uint64_t c0 = __rdtsc();
                        kernels::matmul_rows(isa, w, x.data(), m, y.data(), 0, s.rows);
                        const uint64_t c1 = __rdtsc();
                        const double sec =
                            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
                                .count();
                        best_s = std::min(best_s, sec);
                        best_c = std::min(best_c, c1 - c0);
                    }
                    const double ops = 2.0 * static_cast<double>(m * s.rows * s.cols);
                    const double per_cycle = ops / static_cast<double>(best_c);
                    std::printf("%-6s %-18s %5lld %-7s %10.3f %10.1f %8.1f", fmt.c_str(), s.name,
                                static_cast<long long>(m), name, best_s * 1e3, per_cycle,
                                ops / best_s * 1e-9);
                    if (isa == kernels::Isa::AMX) std::printf(" %.1f%%", per_cycle / peak * 100);
                    std::printf("\n");
                }
            }
        }
    return 0;
}
