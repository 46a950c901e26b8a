// FP8 block-scaled checkpoints (formats/fp8_block.h): block indexing with partial blocks against an
// element-by-element reference, the resolver on a real safetensors file (scale lookup, shape and
// dtype errors), and quantization_config parsing.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <tuple>

#include "formats/fp8_block.h"
#include "formats/safetensors_file.h"
#include "formats/tensor_source.h"
#include "kernels/matmul.h"
#include "kernels/matmul_quant.h"
#include "model/model.h"
#include "tensor/fp8.h"
#include "tensor/weight_format.h"
#include "util/error.h"
#include "util/thread_pool.h"

using namespace warden;

namespace {

struct Fp8Case {
    int64_t rows = 70, cols = 45;
    formats::Fp8BlockConfig block{32, 16};
    int64_t nbr() const { return (rows + block.block_rows - 1) / block.block_rows; }
    int64_t nbc() const { return (cols + block.block_cols - 1) / block.block_cols; }
    std::vector<uint8_t> codes;
    std::vector<float> scales;
    Fp8Case() {
        std::mt19937_64 rng(9);
        std::normal_distribution<float> nd(0.0f, 100.0f);
        codes.resize(static_cast<size_t>(rows * cols));
        for (auto& c : codes) c = tensor::f32_to_fp8_e4m3(nd(rng));
        scales.resize(static_cast<size_t>(nbr() * nbc()));
        for (size_t i = 0; i < scales.size(); ++i) scales[i] = 0.001f * static_cast<float>(i + 1);
    }
    float want(int64_t r, int64_t c) const {
        const int64_t bi = r / block.block_rows, bj = c / block.block_cols;
        return tensor::fp8_e4m3_to_f32(codes[static_cast<size_t>(r * cols + c)]) *
               scales[static_cast<size_t>(bi * nbc() + bj)];
    }
};

void write_safetensors(const std::string& path,
                       const std::vector<std::tuple<std::string, std::string, std::vector<int64_t>,
                                                    std::vector<uint8_t>>>& ts) {
    nlohmann::json h = nlohmann::json::object();
    uint64_t off = 0;
    std::vector<uint8_t> data;
    for (const auto& [name, dtype, shape, bytes] : ts) {
        h[name] = {{"dtype", dtype}, {"shape", shape}, {"data_offsets", {off, off + bytes.size()}}};
        data.insert(data.end(), bytes.begin(), bytes.end());
        off += bytes.size();
    }
    std::string hs = h.dump();
    while (hs.size() % 8) hs += ' ';
    std::ofstream f(path, std::ios::binary);
    const uint64_t n = hs.size();
    f.write(reinterpret_cast<const char*>(&n), 8);
    f.write(hs.data(), static_cast<std::streamsize>(hs.size()));
    f.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
}

template <typename T>
std::vector<uint8_t> bytes_of(const std::vector<T>& v) {
    std::vector<uint8_t> b(v.size() * sizeof(T));
    std::memcpy(b.data(), v.data(), b.size());
    return b;
}

}  // namespace

TEST(Fp8Block, DequantizesPartialBlocksWithTheirOwnScale) {
    Fp8Case k;
    ASSERT_EQ(k.nbr(), 3);
    ASSERT_EQ(k.nbc(), 3);
    std::vector<float> out(static_cast<size_t>(k.rows * k.cols));
    formats::dequantize_fp8_block(k.codes.data(), k.rows, k.cols, k.scales.data(), k.block,
                                  out.data());
    for (int64_t r = 0; r < k.rows; ++r)
        for (int64_t c = 0; c < k.cols; ++c)
            ASSERT_EQ(out[static_cast<size_t>(r * k.cols + c)], k.want(r, c)) << r << "," << c;
}

TEST(Fp8Block, ResolverReadsWeightAndScaleFromSafetensors) {
    Fp8Case k;
    const auto dir =
        std::filesystem::temp_directory_path() / ("warden-fp8-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    const std::string path = (dir / "model.safetensors").string();
    std::vector<float> bias = {1.0f, 2.0f};
    write_safetensors(path, {{"a.weight", "F8_E4M3", {k.rows, k.cols}, k.codes},
                             {"a.weight_scale_inv", "F32", {k.nbr(), k.nbc()}, bytes_of(k.scales)},
                             {"b.weight", "F8_E4M3", {k.rows, k.cols}, k.codes},
                             {"b.weight_scale_inv",
                              "F32",
                              {k.nbr(), k.nbc() + 1},
                              bytes_of(std::vector<float>(12, 1.0f))},
                             {"c.weight", "F8_E4M3", {k.rows, k.cols}, k.codes},
                             {"bias", "F32", {2}, bytes_of(bias)}});
    formats::SafetensorsModel st({path});
    formats::Fp8BlockResolver res(st, k.block);
    auto a = res.find("a.weight");
    ASSERT_TRUE(a);
    EXPECT_EQ(a->st_dtype, "F8_E4M3");  // decoded row by row, never expanded whole
    std::vector<float> row(static_cast<size_t>(k.cols));
    for (int64_t r : {0, 31, 32, 69}) {
        a->row_to_f32(r, row.data());
        for (int64_t c = 0; c < k.cols; ++c) ASSERT_EQ(row[static_cast<size_t>(c)], k.want(r, c));
    }
    auto b = res.find("bias");  // other dtypes pass through
    ASSERT_TRUE(b);
    EXPECT_EQ(b->st_dtype, "F32");
    EXPECT_FALSE(res.find("missing"));
    EXPECT_THROW(res.find("b.weight"), util::Error);  // scale grid has the wrong shape
    EXPECT_THROW(res.find("c.weight"), util::Error);  // no scale tensor
    formats::Fp8BlockResolver no_cfg(st, std::nullopt);
    EXPECT_THROW(no_cfg.find("a.weight"), util::Error);  // FP8 without quantization_config
    std::filesystem::remove_all(dir);
}

// Loading an FP8 block-scaled checkpoint decodes each F8_E4M3 weight row by row straight into the
// runtime format: the only f32 held is a weight's scale grid, never the weight itself (a loader
// that expanded each weight to f32 first would hold the largest weight: 4 bytes a parameter of
// fresh memory, filled by one thread).
TEST(Fp8Block, LoaderHoldsNoDequantizedWeight) {
    for (const char* name : {"tiny-qwen3-moe-fp8", "tiny-glm4-moe-fp8", "tiny-deepseek-v3-fp8"}) {
        const std::string dir = std::string(WARDEN_SOURCE_DIR) + "/tests/golden/models/" + name;
        formats::SafetensorsModel st({dir + "/model.safetensors"});
        int64_t largest = 0, total = 0, n_fp8 = 0, largest_grid = 0;
        for (const auto& t : st.tensors()) {
            if (t.dtype == "F8_E4M3") {
                ++n_fp8;
                const int64_t bytes = t.shape.at(0) * t.shape.at(1) * 4;
                largest = std::max(largest, bytes);
                total += bytes;
            } else if (t.name.ends_with("_scale_inv")) {
                largest_grid = std::max(largest_grid, t.shape.at(0) * t.shape.at(1) * 4);
            }
        }
        ASSERT_GT(largest, 0) << name;
        ASSERT_LT(2 * largest, total) << name;
        util::ThreadPool pool(1);
        model::LoadOptions opts;
        opts.weights = tensor::parse_weight_format("bf16");  // every weight decoded into bf16
        const auto m = model::load_model(dir, opts, pool);
        ASSERT_LT(largest_grid, largest) << name;
        EXPECT_GT(m->fp8_dequant_peak_bytes, 0) << name;
        EXPECT_LE(m->fp8_dequant_peak_bytes, largest_grid) << name;
        // Each FP8 weight dequantized once: a presence test (MLA's optional k_b_proj) must not
        // resolve the tensor it asks about.
        EXPECT_EQ(m->fp8_dequant_count, n_fp8) << name;
        EXPECT_EQ(m->fp8_native_count, 0) << name;
        // Without --weights the layers' FP8 weights run as stored (fp8-b32 here: the configs'
        // 32x32 blocks); each weight is still resolved once, kept or decoded.
        const auto native = model::load_model(dir, model::LoadOptions{}, pool);
        EXPECT_EQ(native->weights_format, "fp8-b32") << name;
        EXPECT_GT(native->fp8_native_count, n_fp8 / 2) << name;
        EXPECT_EQ(native->fp8_native_count + native->fp8_dequant_count, n_fp8) << name;
    }
}

TEST(Fp8Block, ParsesQuantizationConfig) {
    using nlohmann::json;
    EXPECT_FALSE(formats::fp8_block_config_from_hf_json(json{{"model_type", "x"}}, "p"));
    auto c = formats::fp8_block_config_from_hf_json(
        json{{"quantization_config",
              {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"weight_block_size", {128, 128}}}}},
        "p");
    ASSERT_TRUE(c);
    EXPECT_EQ(c->block_rows, 128);
    EXPECT_EQ(c->block_cols, 128);
    EXPECT_THROW(formats::fp8_block_config_from_hf_json(
                     json{{"quantization_config", {{"quant_method", "compressed-tensors"}}}}, "p"),
                 util::Error);
    EXPECT_THROW(formats::fp8_block_config_from_hf_json(
                     json{{"quantization_config", {{"quant_method", "fp8"}}}}, "p"),
                 util::Error);
    EXPECT_THROW(formats::fp8_block_config_from_hf_json(
                     json{{"quantization_config",
                           {{"quant_method", "fp8"}, {"weight_block_size", {0, 128}}}}},
                     "p"),
                 util::Error);
    EXPECT_THROW(
        formats::fp8_block_config_from_hf_json(
            json{{"quantization_config",
                  {{"quant_method", "fp8"}, {"fmt", "e5m2"}, {"weight_block_size", {1, 1}}}}},
            "p"),
        util::Error);
}

// Asking whether a tensor exists must not dequantize it. A checkpoint whose untied head is FP8
// too (here: the tiny DeepSeek-V3 one with lm_head re-encoded as F8_E4M3, scales 1): the loader
// asks whether lm_head is there, then loads it; each FP8 weight is dequantized exactly once.
// (Before, the presence test went through the resolver and dequantized the head a second time.)
TEST(Fp8Block, PresenceTestDoesNotDequantize) {
    const std::string src =
        std::string(WARDEN_SOURCE_DIR) + "/tests/golden/models/tiny-deepseek-v3-fp8";
    const auto dir =
        std::filesystem::temp_directory_path() / ("warden-fp8-head-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    std::filesystem::copy_file(src + "/config.json", dir / "config.json",
                               std::filesystem::copy_options::overwrite_existing);
    int64_t n_fp8 = 0;
    {
        formats::SafetensorsModel st({src + "/model.safetensors"});
        std::vector<
            std::tuple<std::string, std::string, std::vector<int64_t>, std::vector<uint8_t>>>
            ts;
        bool head = false;
        for (const auto& t : st.tensors()) {
            if (t.name != "lm_head.weight") {
                ts.emplace_back(t.name, t.dtype, t.shape,
                                std::vector<uint8_t>(t.data, t.data + t.n_bytes));
                n_fp8 += t.dtype == "F8_E4M3";
                continue;
            }
            ASSERT_NE(t.dtype, "F8_E4M3");
            head = true;
            const int64_t rows = t.shape.at(0), cols = t.shape.at(1);
            const formats::SourceTensor s = formats::SourceTensor::from(t);
            std::vector<float> row(static_cast<size_t>(cols));
            std::vector<uint8_t> codes(static_cast<size_t>(rows * cols));
            for (int64_t r = 0; r < rows; ++r) {
                s.row_to_f32(r, row.data());
                for (int64_t c = 0; c < cols; ++c)
                    codes[static_cast<size_t>(r * cols + c)] =
                        tensor::f32_to_fp8_e4m3(row[static_cast<size_t>(c)]);
            }
            const int64_t nbr = (rows + 31) / 32,
                          nbc = (cols + 31) / 32;  // the config's 32 x 32 blocks
            ts.emplace_back(t.name, "F8_E4M3", t.shape, codes);
            ts.emplace_back("lm_head.weight_scale_inv", "F32", std::vector<int64_t>{nbr, nbc},
                            bytes_of(std::vector<float>(static_cast<size_t>(nbr * nbc), 1.0f)));
            ++n_fp8;
        }
        ASSERT_TRUE(head);
        write_safetensors((dir / "model.safetensors").string(), ts);
    }
    util::ThreadPool pool(1);
    model::LoadOptions opts;
    const auto m = model::load_model(dir.string(), opts, pool);
    EXPECT_EQ(m->fp8_dequant_count + m->fp8_native_count, n_fp8);
    EXPECT_NE(m->weights.output.view().data,
              m->weights.token_embd.view().data);  // its own head, not tied
    std::filesystem::remove_all(dir);
}

// Without --weights the loader keeps FP8 block-scaled weights as stored (fp8-bG, G the
// checkpoint's block width): each row's codes and its blocks' scales (Fp8BlockRows::row_scales),
// packed as the loader packs them, dequantize to exactly dequantize_fp8_block's values, partial
// blocks included, and their matmul is the f32 sum over those values. A NaN code is refused
// naming its row and column.
TEST(Fp8Block, KeepsRowsAsStored) {
    Fp8Case k;
    formats::Fp8BlockRows src;
    src.codes = k.codes.data();
    src.rows = k.rows;
    src.cols = k.cols;
    src.block = k.block;
    src.scale_inv = k.scales;
    ASSERT_EQ(formats::fp8_native_format(k.block), std::optional<std::string>("fp8-b16"));
    EXPECT_FALSE(formats::fp8_native_format(formats::Fp8BlockConfig{128, 6}).has_value());
    EXPECT_FALSE(formats::fp8_native_format(formats::Fp8BlockConfig{128, 512}).has_value());
    kernels::WeightMatrix w =
        kernels::weight_layout(tensor::parse_weight_format("fp8-b16"), k.rows, k.cols);
    std::vector<uint8_t> packed(static_cast<size_t>(kernels::quant_packed_bytes(w)), 0);
    src.check_codes(0, k.rows);
    for (int64_t r0 = 0; r0 < k.rows; r0 += 16) {  // as the loader's panel ranges
        const int64_t r1 = std::min(k.rows, r0 + 16);
        kernels::pack_fp8_codes(w, r0, r1, src.codes + r0 * k.cols, packed.data());
        for (int64_t r = r0; r < r1; ++r)
            kernels::pack_fp8_scales(w, r, src.row_scales(r), packed.data());
    }
    w.data = packed.data();
    std::vector<float> deq(static_cast<size_t>(k.cols)), x(static_cast<size_t>(k.cols));
    for (int64_t c = 0; c < k.cols; ++c)
        x[static_cast<size_t>(c)] = 0.01f * static_cast<float>(c % 7 - 3);
    std::vector<float> y(static_cast<size_t>(k.rows));
    kernels::matmul_rows(kernels::Isa::Scalar, w, x.data(), 1, y.data(), 0, k.rows);
    for (int64_t r = 0; r < k.rows; ++r) {
        kernels::dequant_row(w, r, deq.data());
        double want = 0.0, mag = 0.0;
        for (int64_t c = 0; c < k.cols; ++c) {
            ASSERT_EQ(deq[static_cast<size_t>(c)], k.want(r, c)) << r << "," << c;
            want += static_cast<double>(k.want(r, c)) * x[static_cast<size_t>(c)];
            mag += std::fabs(static_cast<double>(k.want(r, c)) * x[static_cast<size_t>(c)]);
        }
        EXPECT_NEAR(y[static_cast<size_t>(r)], want, 1e-6 * mag + 1e-30) << "row " << r;
    }
    k.codes[static_cast<size_t>(37 * k.cols + 7)] = 0xff;  // -NaN
    src.check_codes(0, 37);
    try {
        src.check_codes(32, 48);
        FAIL() << "a NaN code was kept";
    } catch (const util::Error& e) {
        EXPECT_NE(std::string(e.what()).find("row 37, column 7 holds a NaN e4m3 code"),
                  std::string::npos)
            << e.what();
    }
}
