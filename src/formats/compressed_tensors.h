#pragma once
// compressed-tensors "pack-quantized" checkpoints (the layout of INT4 Kimi-K2 / GLM releases,
// written by llm-compressor): config.json's quantization_config has quant_method
// "compressed-tensors", format "pack-quantized" and config_groups whose `weights` give
// num_bits / symmetric / strategy / group_size. A quantized Linear `<m>` is stored as
//   <m>.weight_packed       I32 [out, ceil(in * bits / 32)]: the codes q + 2^(bits-1) (unsigned)
//                           as one little-endian bit stream per row, element i at bit i * bits
//                           (4 bits: word i / 8, bits 4 * (i % 8), low nibble first)
//   <m>.weight_scale        F32/F16/BF16 [out, in / group] (group strategy) or [out, 1] (channel)
//   <m>.weight_shape        I64/I32 [2] = {out, in}
//   <m>.weight_zero_point   asymmetric only: I32 [ceil(out * bits / 32), n_groups], the zero
//                           points packed the same way along the OUTPUT dimension
// and w = (q - zp) * scale, q signed in [-2^(bits-1), 2^(bits-1) - 1].
// (compressed_tensors/compressors/pack_quantized/{base,helpers}.py, package version 0.20.0.)
//
// The loader resolves "<m>.weight" to a SourceTensor carrying the packed view (CtPacked);
// rows dequantize exactly in f32, and import bit-exactly into warden's int4 / int8 layouts
// when the group, symmetry and scale dtype map without loss (ct_import_row).
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "formats/tensor_source.h"
#include "kernels/matmul_quant.h"

namespace warden::formats {

class SafetensorsModel;

// Weight quantization arguments of one config group.
struct CtWeightArgs {
    int num_bits = 4;
    bool symmetric = true;
    std::string strategy = "group";  // "group" or "channel"
    int64_t group_size = 0;          // group strategy; 0 for channel (one group per row)
};

struct CtGroup {
    std::string name;
    std::vector<std::string> targets;  // "Linear", exact module names, "re:<regex>"
    CtWeightArgs weights;
};

struct CtConfig {
    std::vector<CtGroup> groups;
    std::vector<std::string> ignore;
    // The group whose targets match module `module` (weights' module name, without ".weight");
    // throws util::Error when none or several with different arguments match.
    const CtGroup& group_for(const std::string& module) const;
};

// True when config.json's quantization_config is a compressed-tensors one.
bool is_compressed_tensors_config(const nlohmann::json& config);
// Parses and validates it: format pack-quantized (or dense), int weights of 4 or 8 bits, group or
// channel strategy, no actorder "group" (g_idx). Throws util::Error naming the field otherwise.
CtConfig ct_config_from_hf_json(const nlohmann::json& config, const std::string& path);

// One packed weight as stored (pointers into the mapped file).
struct CtPacked {
    std::string name;            // "<m>.weight"
    int64_t rows = 0, cols = 0;  // weight_shape
    int num_bits = 4;
    int64_t group = 0;                // columns per scale (== cols for channel)
    const uint8_t* packed = nullptr;  // int32 LE words, row stride words_per_row
    int64_t words_per_row = 0;
    const uint8_t* scale = nullptr;
    std::string scale_dtype;        // F32 / F16 / BF16
    const uint8_t* zero = nullptr;  // packed zero points (asymmetric), null when symmetric
    int64_t zero_cols = 0;          // n_groups (columns of the zero-point tensor)

    int64_t n_groups() const { return cols / group; }
    int code(int64_t r, int64_t c) const;        // signed q
    int zero_point(int64_t r, int64_t g) const;  // signed zp (0 when symmetric)
    float scale_f32(int64_t r, int64_t g) const;
    // w[r][c] = (q - zp) * scale in f32 (exact for f16/bf16 scales).
    void dequant_row(int64_t r, float* out) const;
};

// The logical tensor a stored tensor of a compressed-tensors checkpoint stands for:
// "<m>.weight" for "<m>.weight_packed"; nullopt for the quantization metadata of a packed module
// ("<m>.weight_scale", _zero_point, _shape, _g_idx when "<m>.weight_packed" exists), which folds
// into that weight; the name itself for every other tensor.
std::optional<std::string> ct_logical_name(const SafetensorsModel& st, const std::string& name);

// Looks up "<m>.weight" as a compressed-tensors packed weight: nullopt when the file has no
// "<m>.weight_packed"; a SourceTensor with `ct` set otherwise. Validates shapes and dtypes
// against `cfg` (util::Error naming the tensor and the field), and with check_scales every scale
// finite (a pass over all of them: lookups that only ask whether the weight exists or its shape
// leave it to the lookup whose result is loaded).
std::optional<SourceTensor> ct_find(const SafetensorsModel& st, const CtConfig& cfg,
                                    const std::string& name, bool check_scales = true);

// Bit-exact import of row r into `layout` (Q4: the checkpoint's group is a multiple of the
// layout's, the scales are exactly representable in the layout's scale dtype; symmetric maps to
// symmetric or asymmetric, asymmetric to asymmetric; Q8: 8-bit symmetric with one scale per row,
// or per 32 columns for int8-g32; -128 codes included). nullopt when it does not map (the caller
// requantizes through f32).
std::optional<kernels::QuantRow> ct_import_row(const CtPacked& t, int64_t r,
                                               const kernels::WeightMatrix& layout);

// The Q4 path of ct_import_row in two steps, for loading whole panels of codes at once
// (kernels::pack_q4_codes from `packed`, cols / 2 bytes a row): whether the 4-bit codes as stored
// are `layout`'s codes, and row r's group scales (and mins, asymmetric) in the layout's scale
// dtype: false when one is not exactly representable (the row does not import).
bool ct_q4_codes_map(const CtPacked& t, const kernels::WeightMatrix& layout);
// Whether the codes and scales as stored are `layout` as row-major int4 (kernels/matmul_quant.h),
// which a matmul reads in place: 4-bit symmetric codes, the layout symmetric W4A8 of the same
// group, and scales of the layout's scale dtype (F16, or BF16 for -bf16s).
bool ct_q4_rows_in_place(const CtPacked& t, const kernels::WeightMatrix& layout);
bool ct_import_q4_scales(const CtPacked& t, int64_t r, const kernels::WeightMatrix& layout,
                         uint16_t* d, uint16_t* m);

// The warden format a checkpoint group loads as by default (no --weights): int4-g32 / -g128
// (largest of 128, 32 dividing the group), -asym when asymmetric, -bf16s when the scales are
// bf16; int8 for 8-bit per channel, int8-g32 for 8-bit groups of a multiple of 32. nullopt when
// nothing maps (the caller keeps the runtime dtype).
std::optional<std::string> ct_native_format(const CtWeightArgs& a, const std::string& scale_dtype);

// Packing helpers (also used by the writer): codes are the unsigned stored values
// (q + 2^(bits-1)); n values -> ceil(n * bits / 32) words.
std::vector<uint32_t> ct_pack_codes(const uint8_t* codes, int64_t n, int num_bits);
uint8_t ct_unpack_code(const uint8_t* words, int64_t i, int num_bits);

}  // namespace warden::formats
