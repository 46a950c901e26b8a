#include "formats/fp8_block.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "formats/safetensors_file.h"
#include "tensor/float_convert.h"
#include "tensor/fp8.h"
#include "tensor/weight_format.h"
#include "util/error.h"

namespace warden::formats {

using util::Error;

std::optional<Fp8BlockConfig> fp8_block_config_from_hf_json(const nlohmann::json& j,
                                                            const std::string& path) {
    if (!j.is_object() || !j.contains("quantization_config") ||
        j.at("quantization_config").is_null())
        return std::nullopt;
    const auto& q = j.at("quantization_config");
    if (!q.is_object()) throw Error(path + ": quantization_config is not an object");
    const std::string method = q.value("quant_method", std::string());
    if (method != "fp8")
        throw Error(path + ": unsupported quantization_config.quant_method '" + method +
                    "' (supported: fp8)");
    const std::string fmt = q.value("fmt", std::string("e4m3"));
    if (fmt != "e4m3")
        throw Error(path + ": unsupported fp8 format '" + fmt + "' (supported: e4m3)");
    Fp8BlockConfig c;
    if (!q.contains("weight_block_size") || q.at("weight_block_size").is_null())
        throw Error(path +
                    ": fp8 quantization_config without weight_block_size (per-tensor FP8 is not "
                    "supported)");
    const auto& b = q.at("weight_block_size");
    if (!b.is_array() || b.size() != 2 || !b[0].is_number_integer() || !b[1].is_number_integer())
        throw Error(path + ": quantization_config.weight_block_size must be [rows, cols]");
    c.block_rows = b[0].get<int64_t>();
    c.block_cols = b[1].get<int64_t>();
    if (c.block_rows <= 0 || c.block_cols <= 0 || c.block_rows > 65536 || c.block_cols > 65536)
        throw Error(path + ": quantization_config.weight_block_size is out of range");
    return c;
}

void dequantize_fp8_block(const uint8_t* codes, int64_t rows, int64_t cols, const float* scale_inv,
                          const Fp8BlockConfig& block, float* out) {
    const int64_t nbc = (cols + block.block_cols - 1) / block.block_cols;
    const float* table = tensor::fp8_e4m3_table();
    for (int64_t r = 0; r < rows; ++r) {
        const float* srow = scale_inv + (r / block.block_rows) * nbc;
        for (int64_t c = 0; c < cols; ++c)
            out[r * cols + c] = table[codes[r * cols + c]] * srow[c / block.block_cols];
    }
}

void Fp8BlockRows::dequant_row(int64_t r, float* out) const {
    const int64_t nbc = (cols + block.block_cols - 1) / block.block_cols;
    const float* table = tensor::fp8_e4m3_table();
    const float* srow = scale_inv.data() + (r / block.block_rows) * nbc;
    const uint8_t* crow = codes + r * cols;
    for (int64_t c0 = 0, b = 0; c0 < cols; c0 += block.block_cols, ++b) {
        const int64_t c1 = std::min(cols, c0 + block.block_cols);
        const float s = srow[b];
        for (int64_t c = c0; c < c1; ++c) out[c] = table[crow[c]] * s;
    }
}

void Fp8BlockRows::check_codes(int64_t r0, int64_t r1) const {
    // One branch-free pass (it vectorizes); the second only to name a bad code.
    const uint8_t* p = codes + r0 * cols;
    const int64_t n = (r1 - r0) * cols;
    uint8_t bad = 0;
    for (int64_t i = 0; i < n; ++i) bad |= static_cast<uint8_t>((p[i] & 0x7f) == 0x7f);
    if (!bad) return;
    for (int64_t i = 0; i < n; ++i)
        if ((p[i] & 0x7f) == 0x7f)
            throw Error("row " + std::to_string(r0 + i / cols) + ", column " +
                        std::to_string(i % cols) + " holds a NaN e4m3 code");
}

std::optional<std::string> fp8_native_format(const Fp8BlockConfig& block) {
    if (!tensor::fp8_block_valid(block.block_cols)) return std::nullopt;
    return "fp8-b" + std::to_string(block.block_cols);
}

std::optional<SourceTensor> Fp8BlockResolver::find(const std::string& name) {
    const SafetensorsTensor* t = st_.find(name);
    if (!t) return std::nullopt;
    if (t->dtype != "F8_E4M3") return SourceTensor::from(*t);
    if (!cfg_)
        throw Error("tensor '" + name +
                    "' is F8_E4M3 but config.json has no fp8 quantization_config");
    if (t->shape.size() != 2) throw Error("F8_E4M3 tensor '" + name + "' is not 2-D");
    const int64_t rows = t->shape[0], cols = t->shape[1];
    const std::string sname = name + "_scale_inv";
    const SafetensorsTensor* s = st_.find(sname);
    if (!s) throw Error("F8_E4M3 tensor '" + name + "' has no '" + sname + "'");
    const int64_t nbr = (rows + cfg_->block_rows - 1) / cfg_->block_rows;
    const int64_t nbc = (cols + cfg_->block_cols - 1) / cfg_->block_cols;
    if (s->shape != std::vector<int64_t>{nbr, nbc})
        throw Error("'" + sname + "' has the wrong shape for " + std::to_string(rows) + "x" +
                    std::to_string(cols) + " in " + std::to_string(cfg_->block_rows) + "x" +
                    std::to_string(cfg_->block_cols) + " blocks (expected [" + std::to_string(nbr) +
                    ", " + std::to_string(nbc) + "])");
    std::vector<float> scales(static_cast<size_t>(nbr * nbc));
    for (size_t i = 0; i < scales.size(); ++i) {
        if (s->dtype == "F32") {
            std::memcpy(&scales[i], s->data + 4 * i, 4);
        } else if (s->dtype == "BF16") {
            uint16_t h;
            std::memcpy(&h, s->data + 2 * i, 2);
            scales[i] = tensor::bf16_to_f32(h);
        } else {
            throw Error("'" + sname + "' has dtype " + s->dtype + " (supported: F32, BF16)");
        }
        if (!std::isfinite(scales[i])) throw Error("'" + sname + "' holds a non-finite scale");
    }
    auto rows_src = std::make_shared<Fp8BlockRows>();
    rows_src->codes = t->data;
    rows_src->rows = rows;
    rows_src->cols = cols;
    rows_src->block = *cfg_;
    rows_src->scale_inv = std::move(scales);
    held_bytes_ += rows_src->scale_inv.size() * sizeof(float);
    peak_bytes_ = std::max(peak_bytes_, held_bytes_);
    ++dequant_count_;
    SourceTensor out;
    out.name = name;
    out.dims = {rows, cols};
    out.is_ggml = false;
    out.st_dtype = "F8_E4M3";
    out.data = t->data;
    out.fp8 = std::move(rows_src);
    return out;
}

}  // namespace warden::formats
