// Matrix::add_bf16_tiles (model/weights.h): a bf16 matrix is repacked into the AMX-BF16 tile
// layout (kernels/matmul_bf16_tiles.h) and its panels freed; it reports the bytes the tile layout
// adds (what the loader counts in WeightMemory::amx_tiles); lookups read the same rows; an alias
// (a tied head) reads the same tiles; other types are left alone.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "kernels/matmul_bf16_tiles.h"
#include "model/weights.h"
#include "tensor/float_convert.h"

namespace warden::model {
namespace {

TEST(WeightsBf16Tiles, ReplacesTheBf16PanelsWithTheTileLayout) {
    const int64_t rows = 20, cols = 40;
    Matrix m = Matrix::owned(tensor::WeightType::BF16, rows, cols);
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t k = 0; k < cols; ++k)
            row[static_cast<size_t>(k)] = 0.25f * (r - k) + 0.001f * k;
        m.pack_row(r, row.data());
    }
    ASSERT_EQ(m.view().tiles, nullptr);
    const int64_t panel_bytes = kernels::packed_weight_elems(rows, cols) * 2;
    ASSERT_EQ(m.bytes(), panel_bytes);
    std::vector<uint8_t> want(4096);
    kernels::pack_bf16_tiles(m.view(), want.data());

    // Two panels x two 32-column blocks x 1 KiB, against 32 rows x 40 columns of panels.
    EXPECT_EQ(m.add_bf16_tiles(), 4096 - panel_bytes);
    ASSERT_NE(m.view().tiles, nullptr);
    EXPECT_EQ(m.view().data, nullptr);  // the panels are gone
    EXPECT_TRUE(m.packed().empty());
    EXPECT_EQ(m.bytes(), 4096);
    EXPECT_EQ(m.storage(), m.view().tiles);
    EXPECT_EQ(std::memcmp(m.view().tiles, want.data(), want.size()), 0);
    EXPECT_EQ(m.alias().view().tiles, m.view().tiles);
    EXPECT_EQ(m.alias().storage(), m.storage());

    std::vector<float> got(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
        m.row_f32(r, got.data());
        for (int64_t k = 0; k < cols; ++k) {
            const float v = 0.25f * (r - k) + 0.001f * k;
            ASSERT_EQ(got[static_cast<size_t>(k)], tensor::bf16_to_f32(tensor::f32_to_bf16(v)))
                << r << "," << k;
        }
    }
    EXPECT_EQ(m.add_bf16_tiles(), 0);  // once only

    Matrix f = Matrix::owned(tensor::WeightType::F32, rows, cols);
    EXPECT_EQ(f.add_bf16_tiles(), 0);
    EXPECT_EQ(f.view().tiles, nullptr);
    EXPECT_NE(f.view().data, nullptr);
}

}  // namespace
}  // namespace warden::model
