#pragma once
// FP8 block-scaled safetensors checkpoints (DeepSeek-V3, Kimi K2, GLM-4.5-FP8, Qwen3-*-FP8):
// a linear weight W [rows, cols] is stored as float8_e4m3fn codes plus `<name>_scale_inv`
// ("...weight_scale_inv") of shape [ceil(rows / br), ceil(cols / bc)] (F32 or BF16), with the
// block size [br, bc] from config.json's quantization_config.weight_block_size (128x128 in the
// published models). W[r][c] = e4m3(code[r][c]) * scale_inv[r / br][c / bc].
// The loader decodes them row by row while it packs them into the runtime format (no f32 copy of
// a whole weight: that would be fresh memory, slow to first touch, and serial).
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "formats/tensor_source.h"

namespace warden::formats {

class SafetensorsModel;

struct Fp8BlockConfig {
    int64_t block_rows = 128;
    int64_t block_cols = 128;
};

// quantization_config of a config.json: nullopt when absent; an Fp8BlockConfig for
// quant_method "fp8" (fmt e4m3, block-wise); util::Error for any other quantization scheme.
std::optional<Fp8BlockConfig> fp8_block_config_from_hf_json(const nlohmann::json& config,
                                                            const std::string& path);

// out[rows, cols] = decode(codes[rows, cols]) * scale_inv[r / br][c / bc]; scale_inv is
// [ceil(rows / br), ceil(cols / bc)] f32, row-major.
void dequantize_fp8_block(const uint8_t* codes, int64_t rows, int64_t cols, const float* scale_inv,
                          const Fp8BlockConfig& block, float* out);

// One F8_E4M3 weight as the loader reads it: codes where the file maps them, the scale grid as
// f32. dequant_row(r) is row r of dequantize_fp8_block's output (the same products, bit for bit),
// so rows decode in parallel straight into the runtime format.
struct Fp8BlockRows {
    const uint8_t* codes = nullptr;  // [rows, cols]
    int64_t rows = 0, cols = 0;
    Fp8BlockConfig block;
    std::vector<float> scale_inv;  // [ceil(rows / br), ceil(cols / bc)]
    void dequant_row(int64_t r, float* out) const;
    // Row r's block scales (ceil(cols / bc) of them), as an fp8-b<bc> layout stores them.
    const float* row_scales(int64_t r) const {
        return scale_inv.data() +
               (r / block.block_rows) * ((cols + block.block_cols - 1) / block.block_cols);
    }
    // Throws util::Error naming the row and column of the first NaN code (0x7f / 0xff: no FP8
    // checkpoint writer emits one) in rows [r0, r1), before they are kept as stored.
    void check_codes(int64_t r0, int64_t r1) const;
};

// The runtime format that runs t's codes and scales as stored ("fp8-b128" for 128-column blocks),
// or nullopt where the block width has no such layout (the kernels take 4 to 256 columns in
// multiples of 4).
std::optional<std::string> fp8_native_format(const Fp8BlockConfig& block);

// Resolves tensor names for the loader: F8_E4M3 tensors come back as SourceTensors that decode
// row by row (SourceTensor::fp8, which holds the scale grid; the codes stay in the mapping); every
// other tensor is passed through. Throws util::Error on a missing or misshapen scale tensor.
class Fp8BlockResolver {
  public:
    Fp8BlockResolver(const SafetensorsModel& st, std::optional<Fp8BlockConfig> cfg)
        : st_(st), cfg_(cfg) {}
    std::optional<SourceTensor> find(const std::string& name);
    // Marks the weights find returned as done with (their scale grids no longer count as held).
    void release() { held_bytes_ = 0; }
    // The most bytes of f32 held at once since construction: the scale grids of the weights
    // resolved between two release() calls (no weight is ever expanded to f32 whole).
    size_t peak_bytes() const { return peak_bytes_; }
    // F8_E4M3 tensors resolved by find since construction.
    int64_t dequant_count() const { return dequant_count_; }

  private:
    const SafetensorsModel& st_;
    std::optional<Fp8BlockConfig> cfg_;
    size_t held_bytes_ = 0, peak_bytes_ = 0;
    int64_t dequant_count_ = 0;
};

}  // namespace warden::formats
