#pragma once
// Kernel benchmarks fill int4/int8 panels (kernels/matmul_quant.h) with random bytes: the codes'
// values do not matter for speed, but finite arithmetic does. This rewrites every scale slot of
// such a matrix (and of GGUF Q8_0 rows as stored) with a valid small f16 scale (0x2000, about
// 0.0078).
#include <cstdint>
#include <cstring>

#include "kernels/matmul_quant.h"

namespace warden::bench {

inline void set_small_scales(const kernels::WeightMatrix& w, uint8_t* buf) {
    const uint16_t s = 0x2000;
    if (w.type == tensor::WeightType::Q8_0) {  // GGUF blocks as stored: [f16 d][32 codes] each
        for (int64_t r = 0; r < w.rows; ++r)
            for (int64_t b = 0; b < w.cols / 32; ++b)
                std::memcpy(buf + (r * (w.cols / 32) + b) * 34, &s, 2);
        return;
    }
    const int64_t pb = kernels::quant_panel_bytes(w);
    for (int64_t p = 0; p * 16 < w.rows; ++p) {
        uint8_t* panel = buf + p * pb;
        if (w.type == tensor::WeightType::Q4) {
            const int64_t gb = 32 + (w.asym ? 32 : 0) + w.group * 8;
            for (int64_t g = 0; g < w.cols / w.group; ++g)
                for (int i = 0; i < (w.asym ? 32 : 16); ++i)
                    std::memcpy(panel + g * gb + 2 * i, &s, 2);
        } else {  // Q8: one scale block per panel, or one per 32-column block (int8-g32)
            for (int64_t b = 0; b < (w.group ? w.cols / 32 : 1); ++b)
                for (int i = 0; i < 16; ++i) std::memcpy(panel + b * 544 + 2 * i, &s, 2);
        }
    }
}

}  // namespace warden::bench
