// Layouts of the AMX-BF16 path (kernels/matmul_bf16_tiles.h): the weights' tile copy and the
// hi/lo split of the activations. Portable code, run at load (the copy) and once per matmul call
// and input (the split, matmul.cpp).
#include "kernels/matmul_bf16_tiles.h"

#include <bit>
#include <cstdlib>
#include <cstring>

#include "tensor/float_convert.h"
#include "util/error.h"

namespace warden::kernels {

int64_t bf16_tile_bytes(int64_t rows, int64_t cols) {
    const int64_t panels = (rows + kPanelRows - 1) / kPanelRows;
    return panels * (bf16_tile_cols(cols) / kBf16TileK) * kBf16TileBytes;
}

void pack_bf16_tiles(const WeightMatrix& w, void* out) {
    util::check(w.type == WeightType::BF16, "pack_bf16_tiles: not a bf16 matrix");
    const auto* src = static_cast<const uint16_t*>(w.data);
    auto* dst = static_cast<uint8_t*>(out);
    const int64_t kb = bf16_tile_cols(w.cols) / kBf16TileK;
    std::memset(dst, 0, static_cast<size_t>(bf16_tile_bytes(w.rows, w.cols)));
    for (int64_t r = 0; r < w.rows; ++r)
        for (int64_t k = 0; k < w.cols; ++k) {
            const int64_t at = r / kPanelRows * kb * kBf16TileBytes +
                               k / kBf16TileK * kBf16TileBytes + k % kBf16TileK / 2 * 64 +
                               r % kPanelRows * 4 + k % 2 * 2;
            std::memcpy(dst + at, src + packed_index(r, k, w.cols), 2);
        }
}

void unpack_bf16_tile_row(const WeightMatrix& w, int64_t r, float* out) {
    util::check(w.type == WeightType::BF16 && w.tiles != nullptr,
                "unpack_bf16_tile_row: not a bf16 matrix with a tile copy");
    const auto* src = static_cast<const uint8_t*>(w.tiles) +
                      r / kPanelRows * (bf16_tile_cols(w.cols) / kBf16TileK) * kBf16TileBytes +
                      r % kPanelRows * 4;
    for (int64_t k = 0; k < w.cols; ++k) {
        uint16_t h;
        std::memcpy(&h, src + k / kBf16TileK * kBf16TileBytes + k % kBf16TileK / 2 * 64 + k % 2 * 2,
                    2);
        out[k] = tensor::bf16_to_f32(h);
    }
}

namespace {
// bf16(x) to nearest even; a finite x that would round to infinity is truncated (stays finite).
uint16_t hi_bf16(float x) {
    const uint16_t h = tensor::f32_to_bf16(x);
    const uint32_t u = std::bit_cast<uint32_t>(x);
    const bool finite = (u & 0x7f800000u) != 0x7f800000u;
    return finite && (h & 0x7fffu) == 0x7f80u ? static_cast<uint16_t>(u >> 16) : h;
}
}  // namespace

void split_bf16_acts(const float* x, int64_t n, int64_t cols, uint16_t* hi, uint16_t* lo) {
    const int64_t kp = bf16_tile_cols(cols), np = bf16_tile_tokens(n);
    for (int64_t t = 0; t < np; ++t) {
        uint16_t* h = hi + t * kp;
        uint16_t* l = lo + t * kp;
        int64_t k = 0;
        if (t < n)
            for (; k < cols; ++k) {
                const float v = x[t * cols + k];
                h[k] = hi_bf16(v);
                const bool finite = (std::bit_cast<uint32_t>(v) & 0x7f800000u) != 0x7f800000u;
                l[k] = finite ? hi_bf16(v - tensor::bf16_to_f32(h[k])) : 0;
            }
        for (; k < kp; ++k) h[k] = l[k] = 0;
    }
}

bool bf16_tiles_wanted() {
    if (const char* e = std::getenv("WARDEN_BF16_TILE_MODEL");
        e != nullptr && std::strcmp(e, "1") == 0)
        return true;
    return active_isa() == Isa::AMX && amx_bf16_supported();
}

}  // namespace warden::kernels
