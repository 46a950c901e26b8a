// Matrix::add_bf16_tiles (model/weights.h): a bf16 matrix gains its AMX-BF16 tile copy
// (kernels/matmul_bf16_tiles.h) with the bytes the loader counts in WeightMemory::amx_tiles; other
// types gain nothing; an alias (a tied head) reads the same copy.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "kernels/matmul_bf16_tiles.h"
#include "model/weights.h"

namespace warden::model {
namespace {

TEST(WeightsBf16Tiles, AddsTheTileCopyToBf16MatricesOnly) {
    const int64_t rows = 20, cols = 40;
    Matrix m = Matrix::owned(tensor::WeightType::BF16, rows, cols);
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t k = 0; k < cols; ++k) row[static_cast<size_t>(k)] = 0.25f * (r - k);
        m.pack_row(r, row.data());
    }
    ASSERT_EQ(m.view().tiles, nullptr);
    // Two panels x two 32-column blocks x 1 KiB.
    EXPECT_EQ(m.add_bf16_tiles(), 4096);
    ASSERT_NE(m.view().tiles, nullptr);
    std::vector<uint8_t> want(4096);
    kernels::WeightMatrix plain = m.view();
    plain.tiles = nullptr;
    kernels::pack_bf16_tiles(plain, want.data());
    EXPECT_EQ(std::memcmp(m.view().tiles, want.data(), want.size()), 0);
    EXPECT_EQ(m.alias().view().tiles, m.view().tiles);
    EXPECT_EQ(m.bytes(), kernels::packed_weight_elems(rows, cols) * 2);  // the panels alone

    Matrix f = Matrix::owned(tensor::WeightType::F32, rows, cols);
    EXPECT_EQ(f.add_bf16_tiles(), 0);
    EXPECT_EQ(f.view().tiles, nullptr);
}

}  // namespace
}  // namespace warden::model
