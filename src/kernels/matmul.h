#pragma once
// Linear layers: y = x * W^T for a batch of token rows. Weights are stored row-major as
// [out_features, in_features] (one output channel per row, as in HF checkpoints), activations
// and outputs are f32, accumulation is f32 whatever the weight format.
#include <cstdint>

#include "kernels/cpu_features.h"
#include "util/thread_pool.h"

namespace warden::kernels {

enum class WeightType { F32, BF16 };

struct WeightMatrix {
    WeightType type = WeightType::F32;
    int64_t rows = 0;            // out_features
    int64_t cols = 0;            // in_features
    const void* data = nullptr;  // [rows, cols] of f32 or bf16 (uint16_t bits)
};

// y[n, w.rows] = x[n, w.cols] * W^T. Splits output rows over the pool; for n > 1 each weight
// tile is loaded once and reused across token rows (prefill is compute-bound, decode is
// bandwidth-bound: n == 1 must stream each weight byte exactly once).
void matmul(const WeightMatrix& w, const float* x, int64_t n, float* y, util::ThreadPool& pool);

// Same computation with an explicit ISA on rows [row_begin, row_end) of W, single-threaded.
// Used by tests to compare every variant against Isa::Scalar.
void matmul_rows(Isa isa, const WeightMatrix& w, const float* x, int64_t n, float* y,
                 int64_t row_begin, int64_t row_end);

}  // namespace warden::kernels
