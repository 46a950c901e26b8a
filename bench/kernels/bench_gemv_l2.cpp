// The compute ceiling of one batch-1 (decode) matmul kernel: one thread, one ROWS x 2048 matrix
// small enough to stay in L2 (512 rows: 0.6 MiB int4, 1 MiB int8 / fp8), called REPS times;
// prints the best call's time and the weight bytes it read per second. bench_gemv_decode reads a
// whole model's matrices from DRAM; this shows how fast a kernel could go if memory were free, so
// a kernel whose L2 figure is near its DRAM share per core is compute-bound there.
//   bench_gemv_l2 FORMAT [ROWS] [REPS]        FORMAT: a --weights name (int4, int8, fp8, ...)
// The weights are real codes: normal values (sigma 0.02) through warden's quantizer, so FP8
// holds the code mix of a quantized model (few subnormal codes) rather than random bytes. The
// kernel is the active ISA's (WARDEN_ISA=avx2|avx512|scalar) under the active decode tuning
// (WARDEN_DECODE_TUNING, kernels/decode_tuning.h).
// Build: scripts/build.sh build -DWARDEN_BENCH=ON (build/bench_gemv_l2).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/decode_tuning.h"
#include "kernels/matmul.h"
#include "kernels/matmul_quant.h"
#include "quant/quantizer.h"
#include "tensor/weight_format.h"

using namespace warden;

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s FORMAT [ROWS] [REPS]\n", argv[0]);
        return 2;
    }
    const std::string fmt = argv[1];
    const int64_t rows = argc > 2 ? std::atoll(argv[2]) : 512, cols = 2048;
    const int reps = argc > 3 ? std::atoi(argv[3]) : 2000;
    if (rows < 1 || rows > 65536 || reps < 1) {
        std::fprintf(stderr, "ROWS must be in [1, 65536] and REPS positive\n");
        return 2;
    }
    kernels::WeightMatrix w = kernels::weight_layout(tensor::parse_weight_format(fmt), rows, cols);
    if (w.type != tensor::WeightType::Q4 && w.type != tensor::WeightType::Q8 &&
        w.type != tensor::WeightType::FP8) {
        std::fprintf(stderr, "%s is not a quantized format\n", fmt.c_str());
        return 2;
    }
    std::vector<uint8_t> buf(static_cast<size_t>(kernels::quant_packed_bytes(w)), 0);
    std::mt19937 rng(1);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
        for (float& v : row) v = normal(rng);
        kernels::pack_quant_row(
            w, r, quant::default_quantizer().quantize_row(w, row.data(), nullptr), buf.data());
    }
    w.data = buf.data();
    std::vector<float> x(static_cast<size_t>(cols)), y(static_cast<size_t>(rows));
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (float& v : x) v = u(rng);
    double best = 1e30;
    for (int r = 0; r < reps; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        kernels::matmul_rows(kernels::active_isa(), w, x.data(), 1, y.data(), 0, rows);
        best = std::min(
            best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::printf(
        "format=%s isa=%s tuning=\"%s\" rows=%lld cols=%lld bytes=%zu best_us=%.2f GBps=%.1f "
        "checksum=%.6g\n",
        fmt.c_str(), kernels::isa_name(kernels::active_isa()),
        kernels::decode_tuning_summary().c_str(), static_cast<long long>(rows),
        static_cast<long long>(cols), buf.size(), best * 1e6,
        static_cast<double>(buf.size()) / best / 1e9, static_cast<double>(y[0]));
    return 0;
}
