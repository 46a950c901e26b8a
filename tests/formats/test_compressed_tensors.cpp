// compressed-tensors pack-quantized checkpoints (formats/compressed_tensors.h,
// convert/quantize_ct.h): bit packing against hand-computed words, config parsing and its errors,
// corrupt tensors, bit-exact import (quantize -> write -> load gives the packed bytes and logits of
// quantizing at load, dense and MoE), asymmetric zero points, and dequantization through f32. The
// independent reference (the compressed-tensors package itself) is used in
// tests/python/test_compressed_tensors.py.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "convert/quantize_ct.h"
#include "formats/compressed_tensors.h"
#include "formats/gguf_names.h"
#include "formats/safetensors_file.h"
#include "formats/safetensors_writer.h"
#include "kernels/matmul_quant.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "model/transformer.h"
#include "quant/imatrix.h"
#include "quant/imatrix_test_util.h"
#include "quant/quantizer.h"
#include "tensor/float_convert.h"
#include "test_paths.h"
#include "util/error.h"

namespace warden {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using formats::CtPacked;

std::string tmp_dir(const std::string& name) {
    const fs::path p =
        fs::temp_directory_path() / ("warden_ct_" + std::to_string(::getpid()) + "_" + name);
    fs::remove_all(p);
    fs::create_directories(p);
    return p.string();
}

std::string message_of(const std::function<void()>& fn) {
    try {
        fn();
    } catch (const util::Error& e) {
        return e.what();
    }
    return "<no error>";
}

std::vector<uint8_t> words_bytes(const std::vector<uint32_t>& w) {
    std::vector<uint8_t> b(w.size() * 4);
    std::memcpy(b.data(), w.data(), b.size());
    return b;
}

// Hand-computed packings (compressed_tensors pack_to_int32: value + 2^(bits-1), element i at
// bit i * bits of a little-endian stream of int32 words).
TEST(CompressedTensors, PackingHandVectors) {
    // int4 q = -8..7 -> stored 0..15, low nibble first.
    std::vector<uint8_t> c4(16);
    for (int i = 0; i < 16; ++i) c4[static_cast<size_t>(i)] = static_cast<uint8_t>(i);
    EXPECT_EQ(formats::ct_pack_codes(c4.data(), 16, 4),
              (std::vector<uint32_t>{0x76543210u, 0xFEDCBA98u}));
    // 12 values -> ceil(12 * 4 / 32) = 2 words, the tail zero-padded.
    EXPECT_EQ(formats::ct_pack_codes(c4.data() + 4, 12, 4),
              (std::vector<uint32_t>{0xBA987654u, 0x0000FEDCu}));
    // int8 q + 128: four per word.
    const uint8_t c8[] = {0x80, 0x81, 0x7f, 0xff, 0x01};
    EXPECT_EQ(formats::ct_pack_codes(c8, 5, 8), (std::vector<uint32_t>{0xff7f8180u, 0x00000001u}));
    // 3 bits: the 11th value straddles words 0 and 1.
    std::vector<uint8_t> c3(11, 7);
    EXPECT_EQ(formats::ct_pack_codes(c3.data(), 11, 3), (std::vector<uint32_t>{0xFFFFFFFFu, 0x1u}));
    std::vector<uint8_t> c3b = {1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 5};
    const auto w3 = words_bytes(formats::ct_pack_codes(c3b.data(), 11, 3));
    for (int64_t i = 0; i < 11; ++i)
        EXPECT_EQ(formats::ct_unpack_code(w3.data(), i, 3), c3b[static_cast<size_t>(i)]);
    const auto w4 = words_bytes({0x76543210u, 0xFEDCBA98u});
    for (int64_t i = 0; i < 16; ++i) EXPECT_EQ(formats::ct_unpack_code(w4.data(), i, 4), i);

    // A CtPacked row: signed codes, zero points packed along the output dimension, dequant.
    CtPacked t;
    t.rows = 2;
    t.cols = 8;
    t.group = 4;
    t.num_bits = 4;
    t.words_per_row = 1;
    const auto packed = words_bytes({0x76543210u, 0xFEDCBA98u});  // row 0: q -8..-1, row 1: 0..7
    t.packed = packed.data();
    const std::vector<float> scales = {0.5f, 2.0f, 0.25f, -1.0f};
    t.scale = reinterpret_cast<const uint8_t*>(scales.data());
    t.scale_dtype = "F32";
    // zp[r][g] (signed) = {{1, -2}, {3, 0}}: stored +8 = {{9, 6}, {11, 8}}; column g holds rows
    // 0, 1 in nibbles 0, 1 -> word(g=0) = 0xB9, word(g=1) = 0x86.
    const auto zp = words_bytes({0xB9u, 0x86u});
    t.zero = zp.data();
    t.zero_cols = 2;
    EXPECT_EQ(t.zero_point(0, 0), 1);
    EXPECT_EQ(t.zero_point(0, 1), -2);
    EXPECT_EQ(t.zero_point(1, 0), 3);
    EXPECT_EQ(t.zero_point(1, 1), 0);
    std::vector<float> row(8);
    t.dequant_row(0, row.data());
    EXPECT_EQ(row, (std::vector<float>{(-8 - 1) * 0.5f, (-7 - 1) * 0.5f, (-6 - 1) * 0.5f,
                                       (-5 - 1) * 0.5f, (-4 + 2) * 2.0f, (-3 + 2) * 2.0f,
                                       (-2 + 2) * 2.0f, (-1 + 2) * 2.0f}));
    t.dequant_row(1, row.data());
    EXPECT_EQ(row, (std::vector<float>{-3 * 0.25f, -2 * 0.25f, -1 * 0.25f, 0.0f, -4.0f, -5.0f,
                                       -6.0f, -7.0f}));
}

// Stored codes (q + 2^(bits-1)) of a [rows, cols] tensor, packed row by row as the checkpoint
// holds them.
std::vector<uint8_t> packed_rows(const std::vector<uint8_t>& codes, int64_t rows, int64_t cols,
                                 int bits) {
    std::vector<uint8_t> packed;
    for (int64_t r = 0; r < rows; ++r) {
        const auto b = words_bytes(formats::ct_pack_codes(codes.data() + r * cols, cols, bits));
        packed.insert(packed.end(), b.begin(), b.end());
    }
    return packed;
}

// Every row of t imports into `layout`, and the packed result dequantizes to exactly the
// checkpoint's own dequantization.
void expect_import_matches_dequant(const CtPacked& t, const kernels::WeightMatrix& layout,
                                   const std::string& what) {
    kernels::WeightMatrix m = layout;
    std::vector<uint8_t> buf(static_cast<size_t>(kernels::quant_packed_bytes(layout)), 0);
    m.data = buf.data();
    for (int64_t r = 0; r < t.rows; ++r) {
        auto qr = formats::ct_import_row(t, r, layout);
        ASSERT_TRUE(qr) << what << " row " << r;
        kernels::pack_quant_row(m, r, *qr, buf.data());
    }
    std::vector<float> want(static_cast<size_t>(t.cols)), got(want.size());
    for (int64_t r = 0; r < t.rows; ++r) {
        t.dequant_row(r, want.data());
        kernels::dequant_row(m, r, got.data());
        EXPECT_EQ(want, got) << what << " row " << r;
    }
}

// A 4-bit tensor of rows x cols, group columns per scale, whose i-th code (row-major) is
// (i * mul + add) % 16; `packed` holds its words. Scales and zero points are left to the test.
CtPacked four_bit_codes(int64_t rows, int64_t cols, int64_t group, int mul, int add,
                        std::vector<uint8_t>& packed) {
    CtPacked t;
    t.rows = rows;
    t.cols = cols;
    t.group = group;
    t.num_bits = 4;
    t.words_per_row = cols / 8;
    std::vector<uint8_t> codes(static_cast<size_t>(rows * cols));
    for (size_t i = 0; i < codes.size(); ++i)
        codes[i] =
            static_cast<uint8_t>((i * static_cast<size_t>(mul) + static_cast<size_t>(add)) % 16);
    packed = packed_rows(codes, rows, cols, 4);
    t.packed = packed.data();
    return t;
}

// Symmetric scales in the layout's own dtype are copied as they are: a checkpoint group of 128
// into warden's 128 (one scale each) and 32 (each scale repeated over four groups), f16 and bf16,
// dequantizing to exactly the checkpoint's (q - 8) * scale.
TEST(CompressedTensors, SymmetricScalesCopyIntoEveryGroupTheySpan) {
    std::vector<uint8_t> packed;
    CtPacked t = four_bit_codes(3, 256, 128, 5, 1, packed);
    const float vals[] = {0.03125f, -0.0078125f, 1.5f, 0.375f, 0.01171875f, 2.0f};
    for (const bool bf16 : {false, true}) {
        std::vector<uint16_t> sc;
        for (float v : vals) sc.push_back(bf16 ? tensor::f32_to_bf16(v) : tensor::f32_to_f16(v));
        t.scale = reinterpret_cast<const uint8_t*>(sc.data());
        t.scale_dtype = bf16 ? "BF16" : "F16";
        for (const std::string fmt : {"int4-g32", "int4-g128"}) {
            const std::string f = fmt + (bf16 ? "-bf16s" : "");
            expect_import_matches_dequant(
                t, kernels::weight_layout(tensor::parse_weight_format(f), 3, 256), f);
        }
    }
}

// Asymmetric import into warden's int4-asym layouts (f16 and bf16 scales): a [3, 64] tensor,
// group 32, dequantizes to exactly (q - zp) * scale.
TEST(CompressedTensors, AsymmetricImportMatchesDequant) {
    std::vector<uint8_t> packed;
    CtPacked t = four_bit_codes(3, 64, 32, 7, 3, packed);
    std::vector<uint16_t> sc = {tensor::f32_to_bf16(0.03125f),    tensor::f32_to_bf16(-0.0078125f),
                                tensor::f32_to_bf16(1.5f),        tensor::f32_to_bf16(0.375f),
                                tensor::f32_to_bf16(0.01171875f), tensor::f32_to_bf16(2.0f)};
    t.scale = reinterpret_cast<const uint8_t*>(sc.data());
    t.scale_dtype = "BF16";
    const std::vector<uint8_t> zc = {2, 15, 8, 0, 7, 9};  // [rows][groups] stored values
    std::vector<uint8_t> zcol0 = {zc[0], zc[2], zc[4]}, zcol1 = {zc[1], zc[3], zc[5]};
    const uint32_t z0 = formats::ct_pack_codes(zcol0.data(), 3, 4)[0],
                   z1 = formats::ct_pack_codes(zcol1.data(), 3, 4)[0];
    const auto zp = words_bytes({z0, z1});
    t.zero = zp.data();
    t.zero_cols = 2;
    for (const char* fmt : {"int4-g32-asym", "int4-g32-asym-bf16s"})
        expect_import_matches_dequant(
            t, kernels::weight_layout(tensor::parse_weight_format(fmt), 3, 64), fmt);
    // Asymmetric codes do not map onto a symmetric layout, nor 4-bit codes onto int8.
    EXPECT_FALSE(formats::ct_import_row(
        t, 0, kernels::weight_layout(tensor::parse_weight_format("int4-g32"), 3, 64)));
    EXPECT_FALSE(formats::ct_import_row(
        t, 0, kernels::weight_layout(tensor::parse_weight_format("int8"), 3, 64)));
    // A checkpoint group of 32 does not split into warden's 128.
    EXPECT_FALSE(formats::ct_import_row(
        t, 0, kernels::weight_layout(tensor::parse_weight_format("int4-g128-asym"), 3, 64)));
}

// 8-bit, group strategy: a checkpoint group of 32 (or a multiple) imports into int8-g32 exactly,
// value for value, but not into per-channel int8 (its scales differ along the row); a group of
// 16 imports only where both halves of a 32-block share a scale. The native choice follows.
TEST(CompressedTensors, Int8GroupImportsIntoInt8G32) {
    CtPacked t;
    t.rows = 2;
    t.cols = 64;
    t.num_bits = 8;
    t.words_per_row = 16;
    std::vector<uint8_t> codes(2 * 64);  // stored q + 128
    for (size_t i = 0; i < codes.size(); ++i)
        codes[i] = static_cast<uint8_t>(1 + (i * 37 + 11) % 255);
    codes[45] = codes[64 + 7] = 0;  // -128 in each row: an int8 code like any other
    const std::vector<uint8_t> packed = packed_rows(codes, 2, 64, 8);
    t.packed = packed.data();
    t.scale_dtype = "F32";
    const auto layout = kernels::weight_layout(tensor::parse_weight_format("int8-g32"), 2, 64);
    for (int64_t group : {32, 64}) {
        t.group = group;
        const std::vector<float> sc = group == 32
                                          ? std::vector<float>{0.5f, -0.125f, 2.0f, 0.0078125f}
                                          : std::vector<float>{0.25f, 3.0f};
        t.scale = reinterpret_cast<const uint8_t*>(sc.data());
        expect_import_matches_dequant(t, layout, "group " + std::to_string(group));
        if (group == 32) {
            EXPECT_FALSE(formats::ct_import_row(
                t, 0, kernels::weight_layout(tensor::parse_weight_format("int8"), 2, 64)));
        }
    }
    t.group = 16;
    std::vector<float> sc16 = {1.0f, 1.0f, 0.5f, 0.5f, 2.0f, 2.0f, 4.0f, 4.0f};
    t.scale = reinterpret_cast<const uint8_t*>(sc16.data());
    EXPECT_TRUE(formats::ct_import_row(t, 0, layout));
    sc16[1] = 0.75f;  // the halves of row 0's first 32-block differ
    EXPECT_FALSE(formats::ct_import_row(t, 0, layout));
    EXPECT_TRUE(formats::ct_import_row(t, 1, layout));
    formats::CtWeightArgs a;
    a.num_bits = 8;
    a.symmetric = true;
    a.strategy = "group";
    a.group_size = 128;
    EXPECT_EQ(formats::ct_native_format(a, "F16"), std::optional<std::string>("int8-g32"));
    EXPECT_EQ(formats::ct_native_format(a, "BF16"), std::optional<std::string>("int8-g32-bf16s"));
    a.group_size = 16;
    EXPECT_FALSE(formats::ct_native_format(a, "F16"));
    a.strategy = "channel";
    a.group_size = 0;
    EXPECT_EQ(formats::ct_native_format(a, "F16"), std::optional<std::string>("int8"));
}

json ct_config(json weights, json extra = json::object()) {
    json q = {{"quant_method", "compressed-tensors"},
              {"format", "pack-quantized"},
              {"config_groups", {{"group_0", {{"targets", {"Linear"}}, {"weights", weights}}}}},
              {"ignore", {"lm_head"}}};
    for (const auto& el : extra.items()) q[el.key()] = el.value();
    return json{{"quantization_config", q}};
}

json w4(int64_t group = 32) {
    return {{"num_bits", 4},
            {"type", "int"},
            {"symmetric", true},
            {"strategy", "group"},
            {"group_size", group}};
}

TEST(CompressedTensors, ConfigParsingAndErrors) {
    EXPECT_FALSE(formats::is_compressed_tensors_config(json{{"model_type", "llama"}}));
    EXPECT_TRUE(formats::is_compressed_tensors_config(ct_config(w4())));
    const auto c = formats::ct_config_from_hf_json(ct_config(w4()), "cfg");
    ASSERT_EQ(c.groups.size(), 1u);
    EXPECT_EQ(c.groups[0].weights.group_size, 32);
    EXPECT_EQ(c.ignore, std::vector<std::string>{"lm_head"});
    EXPECT_EQ(c.group_for("model.layers.0.mlp.down_proj").name, "group_0");
    auto err = [](json j) {
        return message_of([&] { formats::ct_config_from_hf_json(j, "cfg"); });
    };
    auto w = w4();
    w["num_bits"] = 3;
    EXPECT_NE(err(ct_config(w)).find("num_bits is 3"), std::string::npos) << err(ct_config(w));
    w = w4();
    w["strategy"] = "channel";
    EXPECT_NE(err(ct_config(w)).find("strategy 'channel'"), std::string::npos) << err(ct_config(w));
    w = w4();
    w["strategy"] = "block";
    EXPECT_NE(err(ct_config(w)).find("strategy 'block'"), std::string::npos);
    w = w4();
    w["strategy"] = "tensor";
    EXPECT_NE(err(ct_config(w)).find("strategy 'tensor'"), std::string::npos);
    w = w4();
    w["actorder"] = "group";
    EXPECT_NE(err(ct_config(w)).find("actorder"), std::string::npos);
    w = w4();
    w["actorder"] = "weight";  // calibration-only ordering: same storage, accepted
    EXPECT_NO_THROW(formats::ct_config_from_hf_json(ct_config(w), "cfg"));
    w = w4();
    w["type"] = "float";
    EXPECT_NE(err(ct_config(w)).find("type is 'float'"), std::string::npos);
    EXPECT_NE(
        err(ct_config(w4(), {{"format", "float-quantized"}})).find("format 'float-quantized'"),
        std::string::npos);
    EXPECT_NE(err(ct_config(w4(), {{"format", "marlin-24"}})).find("not supported"),
              std::string::npos);
    EXPECT_NE(err(ct_config(w4(0))).find("group_size"), std::string::npos);
    // int8 per channel is accepted; regex targets select groups.
    json j = ct_config(w4());
    j["quantization_config"]["config_groups"]["group_1"] = {
        {"targets", {"re:.*experts.*"}},
        {"weights",
         {{"num_bits", 8}, {"type", "int"}, {"symmetric", true}, {"strategy", "channel"}}}};
    // A regex naming the module wins over the class target "Linear".
    const auto c1 = formats::ct_config_from_hf_json(j, "cfg");
    EXPECT_EQ(c1.group_for("model.layers.1.mlp.experts.3.up_proj").weights.num_bits, 8);
    EXPECT_EQ(c1.group_for("model.layers.1.self_attn.q_proj").weights.num_bits, 4);
    j["quantization_config"]["config_groups"]["group_0"]["targets"] = {"re:.*self_attn.*"};
    const auto c2 = formats::ct_config_from_hf_json(j, "cfg");
    EXPECT_EQ(c2.group_for("model.layers.1.mlp.experts.3.up_proj").weights.num_bits, 8);
    EXPECT_EQ(c2.group_for("model.layers.1.self_attn.q_proj").weights.num_bits, 4);
    EXPECT_NE(message_of([&] { c2.group_for("model.layers.1.mlp.gate"); }).find("matches no"),
              std::string::npos);
    // Two groups claiming one module with different arguments.
    j["quantization_config"]["config_groups"]["group_0"]["targets"] = {"re:.*up_proj"};
    const auto c3 = formats::ct_config_from_hf_json(j, "cfg");
    EXPECT_NE(
        message_of([&] { c3.group_for("model.layers.1.mlp.experts.3.up_proj"); }).find("several"),
        std::string::npos);
    // Targets are Python regexes (re.match: anchored at the start, Python syntax such as
    // (?P<name>...)).
    j["quantization_config"]["config_groups"]["group_0"]["targets"] = {
        "re:(?P<m>model)\\.layers\\.\\d+\\.self_attn"};
    const auto c4 = formats::ct_config_from_hf_json(j, "cfg");
    EXPECT_EQ(c4.group_for("model.layers.12.self_attn.q_proj").weights.num_bits, 4);
    j["quantization_config"]["config_groups"]["group_0"]["targets"] = {
        "re:layers\\.1\\.self_attn"};  // not at the start
    const auto c5 = formats::ct_config_from_hf_json(j, "cfg");
    EXPECT_NE(
        message_of([&] { c5.group_for("model.layers.1.self_attn.q_proj"); }).find("matches no"),
        std::string::npos);
    j["quantization_config"]["config_groups"]["group_0"]["targets"] = {"re:model.(unclosed"};
    const auto c6 = formats::ct_config_from_hf_json(j, "cfg");
    EXPECT_NE(message_of([&] {
                  c6.group_for("model.layers.1.self_attn.q_proj");
              }).find("not a valid regular expression"),
              std::string::npos);
    // Malformed JSON types are errors, not exceptions of another kind.
    json bad = ct_config(w4());
    bad["quantization_config"]["config_groups"]["group_0"]["weights"]["type"] = 4;
    EXPECT_NE(err(bad).find("malformed"), std::string::npos) << err(bad);
    EXPECT_EQ(formats::ct_native_format(c2.groups[0].weights, "BF16").value(), "int4-g32-bf16s");
    EXPECT_EQ(
        formats::ct_native_format(formats::CtWeightArgs{4, true, "group", 256}, "F16").value(),
        "int4-g128");
    EXPECT_EQ(
        formats::ct_native_format(formats::CtWeightArgs{4, false, "group", 64}, "F16").value(),
        "int4-g32-asym");
    EXPECT_FALSE(formats::ct_native_format(formats::CtWeightArgs{4, true, "group", 48}, "F16"));
}

// One packed tensor "m.weight" in a file, with overridable pieces, checked by ct_find.
struct CorruptCase {
    std::vector<int64_t> packed_shape = {4, 8};
    std::string packed_dtype = "I32";
    std::vector<int64_t> scale_shape = {4, 2};
    std::vector<int64_t> weight_shape = {4, 64};
    bool with_scale = true, with_shape = true, g_idx = false;
    float bad_scale = 0.0f;  // != 0: the first scale (bad_last: the last)
    bool bad_last = false;
    std::string scale_dtype = "F32";  // or F16 / BF16
};

std::string corrupt_error(const CorruptCase& c, const std::string& dir) {
    formats::SafetensorsWriter w;
    int64_t np = 1, ns = 1;
    for (auto d : c.packed_shape) np *= d;
    for (auto d : c.scale_shape) ns *= d;
    w.add_tensor("m.weight_packed", c.packed_dtype, c.packed_shape,
                 std::vector<uint8_t>(static_cast<size_t>(np * 4), 0x88));
    if (c.with_scale) {
        std::vector<float> s(static_cast<size_t>(ns), 0.5f);
        if (c.bad_scale != 0.0f) (c.bad_last ? s.back() : s.front()) = c.bad_scale;
        std::vector<uint8_t> b;
        if (c.scale_dtype == "F32") {
            b.resize(s.size() * 4);
            std::memcpy(b.data(), s.data(), b.size());
        } else {
            for (float f : s) {
                const uint16_t h =
                    c.scale_dtype == "F16" ? tensor::f32_to_f16(f) : tensor::f32_to_bf16(f);
                b.push_back(static_cast<uint8_t>(h & 0xff));
                b.push_back(static_cast<uint8_t>(h >> 8));
            }
        }
        w.add_tensor("m.weight_scale", c.scale_dtype, c.scale_shape, b);
    }
    if (c.with_shape) {
        std::vector<uint8_t> b(16);
        std::memcpy(b.data(), c.weight_shape.data(), 16);
        w.add_tensor("m.weight_shape", "I64", {2}, b);
    }
    if (c.g_idx) w.add_tensor("m.weight_g_idx", "I32", {64}, std::vector<uint8_t>(256, 0));
    const std::string path = dir + "/c.safetensors";
    w.write(path);
    formats::SafetensorsModel st(std::vector<std::string>{path});
    const auto cfg = formats::ct_config_from_hf_json(ct_config(w4()), "cfg");
    return message_of([&] {
        auto t = formats::ct_find(st, cfg, "m.weight");
        ASSERT_TRUE(t.has_value());
        EXPECT_EQ(t->dims, (std::vector<int64_t>{4, 64}));
    });
}

TEST(CompressedTensors, CorruptTensorsAreClearErrors) {
    const std::string dir = tmp_dir("corrupt");
    EXPECT_EQ(corrupt_error({}, dir), "<no error>");
    auto expect = [&](CorruptCase c, const std::string& tensor, const std::string& what) {
        const std::string e = corrupt_error(c, dir);
        EXPECT_NE(e.find(tensor), std::string::npos) << e;
        EXPECT_NE(e.find(what), std::string::npos) << e;
    };
    CorruptCase c;
    c.packed_shape = {4, 7};
    expect(c, "m.weight_packed", "expected [4, 8]");
    c = {};
    c.packed_dtype = "F32";
    expect(c, "m.weight_packed", "dtype F32");
    c = {};
    c.scale_shape = {4, 4};
    expect(c, "m.weight_scale", "expected [4, 2]");
    c = {};
    c.weight_shape = {4, 96};  // disagrees with the packed columns
    expect(c, "m.weight_packed", "weight_shape [4, 96]");
    c = {};
    c.weight_shape = {4, 48};  // packs to 6 words, and group 32 does not divide 48 either
    c.packed_shape = {4, 6};
    c.scale_shape = {4, 2};
    expect(c, "m.weight_packed", "does not divide");
    c = {};
    c.with_scale = false;
    expect(c, "m.weight_scale", "has no");
    c = {};
    c.with_shape = false;
    expect(c, "m.weight_shape", "has no");
    c = {};
    c.weight_shape = {-4, 64};
    expect(c, "m.weight_shape", "invalid shape");
    // A non-finite scale anywhere, in every scale dtype (each checked over its own bits).
    for (const char* dt : {"F32", "F16", "BF16"}) {
        SCOPED_TRACE(dt);
        c = {};
        c.scale_dtype = dt;
        EXPECT_EQ(corrupt_error(c, dir), "<no error>");
        for (float bad :
             {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
              std::numeric_limits<float>::quiet_NaN()})
            for (bool last : {false, true}) {
                c.bad_scale = bad;
                c.bad_last = last;
                expect(c, "m.weight_scale", "non-finite");
            }
        c.bad_scale = 65504.0f;  // the largest f16: finite in every dtype
        EXPECT_EQ(corrupt_error(c, dir), "<no error>");
    }
    c = {};
    c.g_idx = true;
    expect(c, "weight_g_idx", "not supported");
    fs::remove_all(dir);
}

std::unique_ptr<model::Model> load(const std::string& path, const std::string& fmt,
                                   util::ThreadPool& pool,
                                   model::RuntimeDType dtype = model::RuntimeDType::BF16) {
    model::LoadOptions o;
    if (!fmt.empty()) o.weights = tensor::parse_weight_format(fmt);
    o.dtype = dtype;
    auto m = model::load_model(path, o, pool);
    // The panels of codes read in place at start-up (model/deferred_layouts.h), so that matrices
    // compare byte for byte in the layout they end in.
    m->wait_for_deferred_layouts();
    return m;
}

void expect_same(const model::Matrix& a, const model::Matrix& b, const std::string& what) {
    ASSERT_EQ(a.view().type, b.view().type) << what;
    ASSERT_EQ(a.bytes(), b.bytes()) << what;
    EXPECT_TRUE(std::ranges::equal(a.packed(), b.packed())) << what;
}

// The matrices of a layer that --weights quantizes (and the writer packs): attention (GQA, or MLA's
// q / q_a / q_b / kv_a / o), the dense MLP or the routed and shared experts.
std::vector<const model::Matrix*> layer_matrices(const model::LayerWeights& L) {
    std::vector<const model::Matrix*> v;
    // push_back one at a time: GCC 12 warns (-Wstringop-overflow, a false positive) on inserting an
    // initializer list into an empty vector.
    const auto add = [&v](std::initializer_list<const model::Matrix*> ms) {
        for (const model::Matrix* m : ms) v.push_back(m);
    };
    if (L.mla) {
        const model::MlaWeights& m = *L.mla;
        if (m.wq.rows() > 0) add({&m.wq});
        if (m.wq_a.rows() > 0) add({&m.wq_a, &m.wq_b});
        add({&m.wkv_a, &m.wo});
    } else {
        add({&L.wq, &L.wk, &L.wv, &L.wo});
    }
    if (L.moe) {
        for (size_t e = 0; e < L.moe->gate.size(); ++e)
            add({&L.moe->gate[e], &L.moe->up[e], &L.moe->down[e]});
        if (L.moe->shared_gate.rows() > 0)
            add({&L.moe->shared_gate, &L.moe->shared_up, &L.moe->shared_down});
    } else {
        add({&L.w_gate, &L.w_up, &L.w_down});
    }
    return v;
}

std::vector<float> all_logits(const model::Model& m, util::ThreadPool& pool) {
    model::Transformer tf(m, pool);
    const std::vector<int32_t> toks = {1, 17, 42, 99, 5, 250, 3, 77};
    model::ContiguousKvCache cache(m.config, static_cast<int64_t>(toks.size()),
                                   tensor::KvType::F32);
    std::vector<float> out(toks.size() * static_cast<size_t>(m.config.vocab_size));
    tf.forward(toks.data(), static_cast<int64_t>(toks.size()), cache, out.data(), true);
    return out;
}

// quantize -> write -> load: the packed bytes and logits of quantizing the source at load.
void check_round_trip(const std::string& model_name, const std::string& fmt,
                      int64_t want_quantized) {
    util::ThreadPool pool(2);
    const std::string src = test::golden_model(model_name);
    const std::string out = tmp_dir(model_name + "_" + fmt);
    const auto st = convert::quantize_hf_compressed_tensors(
        src, out, tensor::parse_weight_format(fmt), false, pool);
    EXPECT_EQ(st.tensors_quantized, want_quantized);
    // The written config parses, lists the unquantized Linear layers, and names the format.
    std::ifstream cf(out + "/config.json");
    const json cj = json::parse(cf);
    const auto cfg = formats::ct_config_from_hf_json(cj, "out");
    EXPECT_EQ(cfg.groups.at(0).weights.num_bits, fmt.rfind("int8", 0) == 0 ? 8 : 4);
    EXPECT_EQ(cfg.groups.at(0).weights.strategy, fmt == "int8" ? "channel" : "group");
    EXPECT_EQ(cfg.groups.at(0).weights.group_size, fmt == "int8" ? 0 : 32);
    const auto a = load(src, fmt, pool);
    for (const std::string& lf :
         {fmt, std::string()}) {  // explicit format, then the native default
        const auto b = load(out, lf, pool);
        EXPECT_EQ(b->weights_format, fmt) << model_name;
        expect_same(a->weights.token_embd, b->weights.token_embd, fmt + " embd");
        for (size_t l = 0; l < a->weights.layers.size(); ++l) {
            const auto ma = layer_matrices(a->weights.layers[l]),
                       mb = layer_matrices(b->weights.layers[l]);
            ASSERT_EQ(ma.size(), mb.size());
            for (size_t i = 0; i < ma.size(); ++i) {
                EXPECT_TRUE(ma[i]->is_quantized());
                expect_same(*ma[i], *mb[i],
                            model_name + " " + fmt + " layer " + std::to_string(l) + " #" +
                                std::to_string(i));
            }
            if (const auto* la = a->weights.layers[l].mla.get()) {  // kv_b_proj's per-head halves
                const auto* lb = b->weights.layers[l].mla.get();
                ASSERT_NE(lb, nullptr);
                ASSERT_EQ(la->wk_b_t.size(), lb->wk_b_t.size());
                ASSERT_EQ(la->wv_b.size(), lb->wv_b.size());
                for (size_t h = 0; h < la->wk_b_t.size(); ++h) {
                    EXPECT_FALSE(lb->wk_b_t[h].is_quantized());
                    expect_same(la->wk_b_t[h], lb->wk_b_t[h],
                                model_name + " wk_b_t " + std::to_string(h));
                    expect_same(la->wv_b[h], lb->wv_b[h],
                                model_name + " wv_b " + std::to_string(h));
                }
            }
        }
        EXPECT_TRUE(all_logits(*a, pool) == all_logits(*b, pool)) << model_name << " " << fmt;
    }
    // Re-quantizing the output is a fixed point (bit-exact import of the packed source).
    const std::string out2 = tmp_dir(model_name + "_" + fmt + "_2");
    convert::quantize_hf_compressed_tensors(out, out2, tensor::parse_weight_format(fmt), false,
                                            pool);
    const formats::SafetensorsModel s1 = formats::SafetensorsModel::open_dir(out),
                                    s2 = formats::SafetensorsModel::open_dir(out2);
    ASSERT_EQ(s1.tensors().size(), s2.tensors().size());
    for (const auto& t : s1.tensors()) {
        const auto* u = s2.find(t.name);
        ASSERT_NE(u, nullptr) << t.name;
        EXPECT_EQ(t.dtype, u->dtype) << t.name;
        EXPECT_TRUE(t.n_bytes == u->n_bytes && std::memcmp(t.data, u->data, t.n_bytes) == 0)
            << t.name;
    }
    // Loading as f32 dequantizes exactly to the values the int4 matrices hold.
    const auto f = load(out, "f32", pool, model::RuntimeDType::F32);
    const auto q = load(out, fmt, pool);
    const auto& wf = *layer_matrices(f->weights.layers[0]).at(0);
    const auto& wq = *layer_matrices(q->weights.layers[0]).at(0);
    std::vector<float> x(static_cast<size_t>(wf.cols())), y(x.size());
    for (int64_t r = 0; r < wf.rows(); ++r) {
        wf.row_f32(r, x.data());
        kernels::dequant_row(wq.view(), r, y.data());
        ASSERT_EQ(x, y) << "row " << r;
    }
    fs::remove_all(out);
    fs::remove_all(out2);
}

TEST(CompressedTensors, QuantizeWriteLoadBitExactDense) {
    if (!fs::exists(test::golden_model("tiny-llama") + "/config.json"))
        GTEST_SKIP() << "tiny-llama golden missing";
    check_round_trip("tiny-llama", "int4-g32", 3 * 7);
    check_round_trip("tiny-llama", "int8", 3 * 7);
    check_round_trip("tiny-llama", "int8-g32", 3 * 7);  // 8-bit, strategy group, group_size 32
}

TEST(CompressedTensors, QuantizeWriteLoadBitExactMoe) {
    if (!fs::exists(test::golden_model("tiny-qwen3-moe") + "/config.json"))
        GTEST_SKIP() << "tiny-qwen3-moe missing";
    // 3 layers: attention 4 each; layers 0, 2 MoE with 8 experts x 3; layer 1 dense
    // (mlp_only_layers).
    check_round_trip("tiny-qwen3-moe", "int4-g32-bf16s", 3 * 4 + 2 * 8 * 3 + 3);
}

// MLA (DeepSeek-V3 shape, as Kimi K2 and GLM-5): q_a / q_b / kv_a_proj_with_mqa / o_proj are
// packed, kv_b_proj stays in the source's dtype (split per head at load, never quantized); the
// layers have routed and shared experts after a dense first layer.
TEST(CompressedTensors, QuantizeWriteLoadBitExactMla) {
    // tiny-deepseek-v3 itself has q_lora_rank 24: q_b_proj's rows (24) are shorter than the 32
    // every quantized row layout needs, so it is refused
    // (CompressedTensors.MlaRowsShorterThanABlockAreRefused); its -qproj sibling has no q LoRA
    // (q_proj, as DeepSeek-V2-Lite) and every row a multiple of 32.
    if (!fs::exists(test::golden_model("tiny-deepseek-v3-qproj") + "/config.json"))
        GTEST_SKIP() << "tiny-deepseek-v3-qproj missing";
    // 2 MoE layers x (3 attention: q, kv_a, o + 8 experts x 3 + the shared experts' 3).
    check_round_trip("tiny-deepseek-v3-qproj", "int4-g32", 2 * (3 + 8 * 3 + 3));
}

TEST(CompressedTensors, MlaRowsShorterThanABlockAreRefused) {
    if (!fs::exists(test::golden_model("tiny-deepseek-v3") + "/config.json"))
        GTEST_SKIP() << "tiny-deepseek-v3 missing";
    util::ThreadPool pool(2);
    const std::string out = tmp_dir("tiny-deepseek-v3-refused");
    for (const char* fmt : {"int4-g32", "int8"}) {
        try {
            convert::quantize_hf_compressed_tensors(test::golden_model("tiny-deepseek-v3"), out,
                                                    tensor::parse_weight_format(fmt), false, pool);
            ADD_FAILURE() << fmt << ": no error";
        } catch (const std::exception& e) {
            const std::string msg = e.what();
            EXPECT_NE(msg.find("q_b_proj.weight"), std::string::npos) << msg;
            EXPECT_NE(msg.find("[96, 24]"), std::string::npos) << msg;
        }
        EXPECT_FALSE(fs::exists(out + "/model.safetensors")) << fmt;
    }
    fs::remove_all(out);
}

// An FP8 block-scaled source: each weight is dequantized as the writer reaches it (not all of
// them up front) and quantized exactly as loading the FP8 source with --weights does.
TEST(CompressedTensors, QuantizeWriteLoadBitExactFp8Source) {
    if (!fs::exists(test::golden_model("tiny-qwen3-moe-fp8") + "/config.json"))
        GTEST_SKIP() << "tiny-qwen3-moe-fp8 missing";
    check_round_trip("tiny-qwen3-moe-fp8", "int4-g32", 3 * 4 + 2 * 8 * 3 + 3);
}

// A directory output larger than max_shard_bytes is written as model-0000i-of-0000N shards and an
// index: every tensor in exactly one shard, no shard over the limit unless it holds one tensor
// alone, the same tensors and bytes as the single file, and the same model loaded. Writing again
// into the directory removes the weight files the new run did not write (a stale
// model.safetensors would be read before the index), and nothing else.
TEST(CompressedTensors, WriterShardsADirectoryOutput) {
    if (!fs::exists(test::golden_model("tiny-llama") + "/config.json"))
        GTEST_SKIP() << "tiny-llama golden missing";
    util::ThreadPool pool(2);
    const std::string src = test::golden_model("tiny-llama");
    const auto fmt = tensor::parse_weight_format("int4-g32");
    const std::string single = tmp_dir("shard_single"), sharded = tmp_dir("shard_many");
    const auto st1 = convert::quantize_hf_compressed_tensors(src, single, fmt, false, pool);
    EXPECT_FALSE(fs::exists(single + "/model.safetensors.index.json"));
    std::ofstream(sharded + "/model.safetensors") << "stale";  // an earlier single-file run
    std::ofstream(sharded + "/notes.txt") << "mine";
    constexpr int64_t kLimit = 20000;
    const auto st2 =
        convert::quantize_hf_compressed_tensors(src, sharded, fmt, false, pool, kLimit);
    EXPECT_EQ(st2.bytes_out, st1.bytes_out);
    EXPECT_EQ(st2.tensors_quantized, st1.tensors_quantized);
    EXPECT_FALSE(fs::exists(sharded + "/model.safetensors"));
    EXPECT_TRUE(fs::exists(sharded + "/notes.txt"));
    std::ifstream ixf(sharded + "/model.safetensors.index.json");
    const json ix = json::parse(ixf);
    EXPECT_EQ(ix["metadata"]["total_size"].get<int64_t>(), st1.bytes_out);
    std::set<std::string> files;
    for (const auto& [name, file] : ix["weight_map"].items()) files.insert(file.get<std::string>());
    ASSERT_GT(files.size(), 2u);
    char of[32];
    std::snprintf(of, sizeof of, "-of-%05zu.safetensors", files.size());
    int64_t in_shards = 0;
    for (const auto& file : files) {
        EXPECT_TRUE(file.starts_with("model-") && file.ends_with(of)) << file;
        const formats::SafetensorsModel one({sharded + "/" + file});
        int64_t bytes = 0;
        for (const auto& t : one.tensors()) {
            EXPECT_EQ(ix["weight_map"][t.name].get<std::string>(), file) << t.name;
            bytes += static_cast<int64_t>(t.n_bytes);
        }
        in_shards += bytes;
        // Over the limit only as one tensor alone (a quantized weight is three).
        EXPECT_TRUE(bytes <= kLimit || one.tensors().size() <= 3) << file << ": " << bytes;
    }
    EXPECT_EQ(in_shards, st1.bytes_out);
    const formats::SafetensorsModel a = formats::SafetensorsModel::open_dir(single),
                                    b = formats::SafetensorsModel::open_dir(sharded);
    ASSERT_EQ(a.tensors().size(), b.tensors().size());
    EXPECT_EQ(a.tensors().size(), ix["weight_map"].size());
    for (const auto& t : a.tensors()) {
        const auto* u = b.find(t.name);
        ASSERT_NE(u, nullptr) << t.name;
        EXPECT_TRUE(t.dtype == u->dtype && t.n_bytes == u->n_bytes &&
                    std::memcmp(t.data, u->data, t.n_bytes) == 0)
            << t.name;
    }
    EXPECT_TRUE(all_logits(*load(single, "", pool), pool) ==
                all_logits(*load(sharded, "", pool), pool));
    // Back to one file: the shards and the index go.
    convert::quantize_hf_compressed_tensors(src, sharded, fmt, false, pool);
    for (const auto& e : fs::directory_iterator(sharded))
        EXPECT_TRUE(e.path().filename() == "model.safetensors" ||
                    e.path().filename() == "config.json" || e.path().filename() == "notes.txt")
            << e.path();
    // A file output is one file: a shard size is an error, as is a size that is not positive.
    const auto msg = [&](const std::string& out, int64_t limit) {
        return message_of(
            [&] { convert::quantize_hf_compressed_tensors(src, out, fmt, false, pool, limit); });
    };
    EXPECT_NE(msg(sharded + "/x.safetensors", kLimit).find("needs a directory output"),
              std::string::npos);
    EXPECT_FALSE(fs::exists(sharded + "/x.safetensors"));
    EXPECT_NE(msg(sharded, 0).find("must be positive"), std::string::npos);
    EXPECT_TRUE(
        fs::exists(sharded + "/model.safetensors"));  // the failed runs left the output alone
    fs::remove_all(single);
    fs::remove_all(sharded);
}

// HF tensor names -> llama.cpp's GGUF names, as gguf-py's TensorNameMap gives them.
TEST(CompressedTensors, GgufNamesOfHfTensors) {
    const std::pair<const char*, const char*> cases[] = {
        {"model.layers.3.self_attn.q_proj.weight", "blk.3.attn_q.weight"},
        {"model.layers.0.self_attn.k_proj.weight", "blk.0.attn_k.weight"},
        {"model.layers.0.self_attn.v_proj.weight", "blk.0.attn_v.weight"},
        {"model.layers.12.self_attn.o_proj.weight", "blk.12.attn_output.weight"},
        {"model.layers.1.mlp.gate_proj.weight", "blk.1.ffn_gate.weight"},
        {"model.layers.1.mlp.up_proj.weight", "blk.1.ffn_up.weight"},
        {"model.layers.1.mlp.down_proj.weight", "blk.1.ffn_down.weight"},
        {"model.layers.2.mlp.experts.5.up_proj.weight", "blk.2.ffn_up_exps.weight[5]"},
        {"model.layers.2.mlp.shared_experts.down_proj.weight", "blk.2.ffn_down_shexp.weight"},
        {"model.layers.0.self_attn.q_a_proj.weight", "blk.0.attn_q_a.weight"},
        {"model.embed_tokens.weight", "token_embd.weight"},
        {"lm_head.weight", "output.weight"},
        {"model.layers.x.mlp.up_proj.weight", ""},  // no GGUF counterpart: empty
        {"model.layers.0.mlp.unknown.weight", ""},
        {"vision.encoder.weight", ""},
    };
    for (const auto& [hf, gguf] : cases) EXPECT_EQ(formats::gguf_tensor_name(hf), gguf) << hf;
}

namespace {
bool same_tensor(const formats::SafetensorsModel& a, const formats::SafetensorsModel& b,
                 const std::string& n) {
    const auto *x = a.find(n), *y = b.find(n);
    return x && y && x->n_bytes == y->n_bytes && std::memcmp(x->data, y->data, x->n_bytes) == 0;
}
}  // namespace

// --imatrix on a Hugging Face source: each tensor finds its entry by its GGUF name. Dense: a
// uniform importance (a power of two) writes the same bytes as none, a skewed one changes every
// matrix it names. MoE: the stacked experts entry is cut per expert, so skewing expert 3's run
// changes expert 3's matrices and no other expert's; an entry of the wrong width is an error.
TEST(CompressedTensors, WriterTakesAnImatrixByGgufName) {
    if (!fs::exists(test::golden_model("tiny-qwen3-moe") + "/config.json"))
        GTEST_SKIP() << "tiny-qwen3-moe missing";
    util::ThreadPool pool(2);
    const auto fmt = tensor::parse_weight_format("int4-g32");
    const std::string dense = test::golden_model("tiny-llama");
    const formats::SafetensorsModel ds = formats::SafetensorsModel::open_dir(dense);
    std::vector<test::ImatrixEntry> uni, skew;
    for (const auto& t : ds.tensors()) {
        const std::string g = formats::gguf_tensor_name(t.name);
        if (t.shape.size() != 2 || !g.starts_with("blk.")) continue;
        const auto cols = static_cast<size_t>(t.shape[1]);
        uni.push_back({g, 1, std::vector<float>(cols, 2.0f)});
        std::vector<float> v(cols, 1.0f);
        for (size_t c = 5; c < cols; c += 16) v[c] = 300.0f;
        skew.push_back({g, 1, v});
    }
    ASSERT_EQ(uni.size(), 21u);
    const auto ub = test::imatrix_dat(uni), sb = test::imatrix_dat(skew);
    const quant::Imatrix mu = quant::parse_imatrix(ub.data(), ub.size(), "u"),
                         ms = quant::parse_imatrix(sb.data(), sb.size(), "s");
    const std::string o0 = tmp_dir("im_none"), o1 = tmp_dir("im_uni"), o2 = tmp_dir("im_skew");
    EXPECT_EQ(convert::quantize_hf_compressed_tensors(dense, o0, fmt, false, pool).imatrix_weighted,
              0);
    EXPECT_EQ(
        convert::quantize_hf_compressed_tensors(dense, o1, fmt, false, pool, std::nullopt, &mu)
            .imatrix_weighted,
        21);
    EXPECT_EQ(
        convert::quantize_hf_compressed_tensors(dense, o2, fmt, false, pool, std::nullopt, &ms)
            .imatrix_weighted,
        21);
    {
        const auto a = formats::SafetensorsModel::open_dir(o0),
                   b = formats::SafetensorsModel::open_dir(o1),
                   c = formats::SafetensorsModel::open_dir(o2);
        for (const auto& t : a.tensors()) {
            EXPECT_TRUE(same_tensor(a, b, t.name)) << t.name;
            if (t.name.ends_with(".weight_packed")) {
                EXPECT_FALSE(same_tensor(a, c, t.name)) << t.name;
            }
        }
    }

    const std::string moe = test::golden_model("tiny-qwen3-moe");
    const formats::SafetensorsModel ms2 = formats::SafetensorsModel::open_dir(moe);
    const auto* up0 = ms2.find("model.layers.0.mlp.experts.0.up_proj.weight");
    ASSERT_NE(up0, nullptr);
    const auto cols = static_cast<size_t>(up0->shape[1]);
    constexpr size_t kExperts = 8;
    std::vector<float> stacked(kExperts * cols, 1.0f);
    for (size_t c = 2; c < cols; c += 8) stacked[3 * cols + c] = 500.0f;  // expert 3 only
    const auto eb = test::imatrix_dat({{"blk.0.ffn_up_exps.weight", 1, stacked}});
    const quant::Imatrix me = quant::parse_imatrix(eb.data(), eb.size(), "e");
    const std::string m0 = tmp_dir("im_moe_none"), m1 = tmp_dir("im_moe_e3");
    convert::quantize_hf_compressed_tensors(moe, m0, fmt, false, pool);
    EXPECT_EQ(convert::quantize_hf_compressed_tensors(moe, m1, fmt, false, pool, std::nullopt, &me)
                  .imatrix_weighted,
              static_cast<int64_t>(kExperts));
    {
        const auto a = formats::SafetensorsModel::open_dir(m0),
                   b = formats::SafetensorsModel::open_dir(m1);
        for (size_t e = 0; e < kExperts; ++e) {
            const std::string n =
                "model.layers.0.mlp.experts." + std::to_string(e) + ".up_proj.weight_packed";
            EXPECT_EQ(same_tensor(a, b, n), e != 3) << n;
        }
        EXPECT_TRUE(same_tensor(a, b, "model.layers.2.mlp.experts.3.up_proj.weight_packed"));
    }
    stacked.resize(stacked.size() - cols);  // 7 experts' worth: another model
    const auto wb = test::imatrix_dat({{"blk.0.ffn_up_exps.weight", 1, stacked}});
    const quant::Imatrix mw = quant::parse_imatrix(wb.data(), wb.size(), "w");
    const std::string bad = tmp_dir("im_moe_bad");
    EXPECT_NE(message_of([&] {
                  convert::quantize_hf_compressed_tensors(moe, bad, fmt, false, pool, std::nullopt,
                                                          &mw);
              }).find("'blk.0.ffn_up_exps.weight' has"),
              std::string::npos);
    EXPECT_FALSE(fs::exists(bad + "/model.safetensors"));
    for (const auto& d : {o0, o1, o2, m0, m1, bad}) fs::remove_all(d);
}

// The writer packs what the loader quantizes with --weights, by the rule for GGUF names: a block
// past num_hidden_layers (an MTP block, as GLM-4.5 ships) and a layer matrix with no GGUF name stay
// in the source dtype, byte for byte, although both end in "_proj.weight" (the suffix rule this
// replaced packed them: 23 instead of 21).
TEST(CompressedTensors, WriterPacksOnlyTheMatricesTheLoaderQuantizes) {
    if (!fs::exists(test::golden_model("tiny-llama") + "/config.json"))
        GTEST_SKIP() << "tiny-llama golden missing";
    util::ThreadPool pool(1);
    const std::string src = test::golden_model("tiny-llama");  // 3 layers
    const std::string dir = tmp_dir("extra_src"), out = tmp_dir("extra_out");
    fs::copy_file(src + "/config.json", dir + "/config.json");
    const formats::SafetensorsModel in = formats::SafetensorsModel::open_dir(src);
    formats::SafetensorsWriter w;
    const formats::SafetensorsTensor* q0 = nullptr;
    for (const auto& t : in.tensors()) {
        w.add_tensor(t.name, t.dtype, t.shape, std::vector<uint8_t>(t.data, t.data + t.n_bytes));
        if (t.name == "model.layers.0.self_attn.q_proj.weight") q0 = &t;
    }
    ASSERT_NE(q0, nullptr);
    const std::vector<std::string> extras = {"model.layers.3.self_attn.q_proj.weight",
                                             "model.layers.0.eh_proj.weight"};
    for (const auto& n : extras)
        w.add_tensor(n, q0->dtype, q0->shape,
                     std::vector<uint8_t>(q0->data, q0->data + q0->n_bytes));
    w.write(dir + "/model.safetensors");

    const auto st = convert::quantize_hf_compressed_tensors(
        dir, out, tensor::parse_weight_format("int4"), false, pool);
    EXPECT_EQ(st.tensors_quantized, 3 * 7);
    const formats::SafetensorsModel o = formats::SafetensorsModel::open_dir(out);
    for (const auto& n : extras) {
        const auto* t = o.find(n);
        ASSERT_NE(t, nullptr) << n;
        EXPECT_EQ(t->dtype, q0->dtype) << n;
        EXPECT_TRUE(t->n_bytes == q0->n_bytes && std::memcmp(t->data, q0->data, t->n_bytes) == 0)
            << n;
        EXPECT_EQ(o.find(n + "_packed"), nullptr) << n;
    }
    EXPECT_NE(o.find("model.layers.2.self_attn.q_proj.weight_packed"), nullptr);
    // A config without num_hidden_layers cannot say which blocks the model runs: a clear error.
    json cfg = json::parse(std::ifstream(src + "/config.json"));
    cfg.erase("num_hidden_layers");
    std::ofstream(dir + "/config.json") << cfg.dump();
    EXPECT_NE(message_of([&] {
                  convert::quantize_hf_compressed_tensors(
                      dir, tmp_dir("extra_out2"), tensor::parse_weight_format("int4"), false, pool);
              }).find("num_hidden_layers"),
              std::string::npos);
    fs::remove_all(dir);
    fs::remove_all(out);
    fs::remove_all(tmp_dir("extra_out2"));
}

TEST(CompressedTensors, WriterRefusesWhatItCannotStoreExactly) {
    util::ThreadPool pool(1);
    const std::string src = test::golden_model("tiny-llama");
    const std::string out = tmp_dir("refuse");
    auto err = [&](const std::string& in, const std::string& fmt) {
        return message_of([&] {
            convert::quantize_hf_compressed_tensors(in, out, tensor::parse_weight_format(fmt),
                                                    false, pool);
        });
    };
    EXPECT_NE(err(src, "int4-asym").find("symmetric int4 only"), std::string::npos);
    EXPECT_NE(err(src, "fp8").find("int4 or int8"), std::string::npos);
    EXPECT_NE(
        err(test::golden_model("tiny-llama.gguf"), "int4").find("Hugging Face model directory"),
        std::string::npos);
    const std::string e = err(src, "int4-g128");  // 64 / 160 columns
    EXPECT_NE(e.find("model.layers.0."), std::string::npos) << e;
    EXPECT_NE(e.find("does not divide"), std::string::npos) << e;
    EXPECT_NE(err(src, "int4").find("<no error>"), std::string::npos);
    EXPECT_NE(message_of([&] {
                  convert::quantize_hf_compressed_tensors(src, src + "/x.safetensors",
                                                          tensor::parse_weight_format("int4"),
                                                          false, pool);
              }).find("inside the source directory"),
              std::string::npos);
    fs::remove_all(out);
}

}  // namespace
}  // namespace warden
