#pragma once
// Set-up shared by the quantized-matmul tests (test_matmul_quant.cpp and the AMX tests): a random
// matrix quantized into a runtime format and packed at a deliberately misaligned address, a
// matmul on one ISA, and a bit-for-bit comparison of two outputs.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/matmul.h"
#include "kernels/matmul_quant.h"
#include "kernels_test_util.h"
#include "quant/quantizer.h"
#include "tensor/weight_format.h"

namespace warden::kernels::testing {

struct QMat {
    WeightMatrix w;
    std::vector<uint8_t> buf;
};

// A [rows, cols] matrix of random values in [-1, 1) (from `seed`) quantized into `fmt` by the
// default quantizer; its packed bytes start one byte into the buffer (misaligned on purpose).
inline QMat make_qmat(const std::string& fmt, int64_t rows, int64_t cols, uint32_t seed) {
    QMat m;
    m.w = weight_layout(tensor::parse_weight_format(fmt), rows, cols);
    m.buf.assign(static_cast<size_t>(quant_packed_bytes(m.w)) + 1, 0);
    const auto vals = random_floats(static_cast<size_t>(rows * cols), seed);
    for (int64_t r = 0; r < rows; ++r)
        pack_quant_row(
            m.w, r, quant::default_quantizer().quantize_row(m.w, vals.data() + r * cols, nullptr),
            m.buf.data() + 1);
    m.w.data = m.buf.data() + 1;
    return m;
}

// y [n, w.rows] = x * W^T on `isa`, single-threaded, every row.
inline std::vector<float> run_isa(Isa isa, const WeightMatrix& w, const float* x, int64_t n) {
    std::vector<float> y(static_cast<size_t>(n * w.rows), -1.0f);
    matmul_rows(isa, w, x, n, y.data(), 0, w.rows);
    return y;
}

// Fails the test (fatally) at the first element whose bits differ.
inline void expect_bits(const std::vector<float>& got, const std::vector<float>& want,
                        const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t i = 0; i < got.size(); ++i)
        ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i]))
            << what << " i=" << i << " got=" << got[i] << " want=" << want[i];
}

}  // namespace warden::kernels::testing
