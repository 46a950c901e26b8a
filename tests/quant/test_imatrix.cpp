// llama.cpp importance matrices (quant/imatrix.h): the legacy imatrix.dat layout, written here
// byte by byte from llama.cpp's save_imatrix (examples/imatrix/imatrix.cpp), parsed back; every
// corrupt count or value is a clear error; and `warden quantize --imatrix` weights the scale
// search: a uniform power-of-two importance changes nothing, a skewed one lowers the error where
// it points.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "convert/quantize_model.h"
#include "formats/gguf_file.h"
#include "formats/gguf_writer.h"
#include "formats/tensor_source.h"
#include "imatrix_test_util.h"
#include "quant/imatrix.h"
#include "tensor/weight_format.h"
#include "test_paths.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace warden::quant {
namespace {

using tensor::parse_weight_format;

using Entry = test::ImatrixEntry;

using test::imatrix_dat;

std::string error_of(const std::vector<uint8_t>& b) {
    try {
        parse_imatrix(b.data(), b.size(), "t.dat");
    } catch (const util::Error& e) {
        return e.what();
    }
    return "<no error>";
}

TEST(Imatrix, ParsesLlamaCppLayoutAndDividesByCalls) {
    const auto b =
        imatrix_dat({{"blk.0.attn_q.weight", 4, {4.0f, 8.0f, 0.0f}}, {"output.weight", 0, {3.0f}}});
    const Imatrix m = parse_imatrix(b.data(), b.size(), "t.dat");
    ASSERT_EQ(m.entries.size(), 2u);
    EXPECT_EQ(m.entries.at("blk.0.attn_q.weight"), (std::vector<float>{1.0f, 2.0f, 0.0f}));
    EXPECT_EQ(m.entries.at("output.weight"), (std::vector<float>{3.0f}));  // ncall 0: as stored
    EXPECT_EQ(m.chunks, 7);
    EXPECT_EQ(m.dataset, "calib.txt");
    EXPECT_NE(m.find("blk.0.attn_q.weight", 3), nullptr);
    EXPECT_EQ(m.find("blk.1.attn_q.weight", 3), nullptr);
    try {
        m.find("blk.0.attn_q.weight", 64);
        FAIL();
    } catch (const util::Error& e) {
        EXPECT_NE(std::string(e.what()).find("has 3 values, the tensor has 64 columns"),
                  std::string::npos)
            << e.what();
    }
    // Stacked experts: "name[e]" is the e-th run of cols values.
    const auto st = imatrix_dat({{"blk.0.ffn_up_exps.weight", 1, {1, 2, 3, 4, 5, 6}}});
    const Imatrix ms = parse_imatrix(st.data(), st.size(), "t.dat");
    EXPECT_EQ(ms.find("blk.0.ffn_up_exps.weight[2]", 2)[0], 5.0f);
    EXPECT_EQ(ms.find("blk.0.ffn_up_exps.weight[0]", 3)[2], 3.0f);
    EXPECT_EQ(ms.find("blk.1.ffn_up_exps.weight[0]", 3), nullptr);
    EXPECT_THROW(ms.find("blk.0.ffn_up_exps.weight[3]", 2), util::Error);  // 3 experts of 2
    EXPECT_THROW(ms.find("blk.0.ffn_up_exps.weight[0]", 4),
                 util::Error);  // 6 is not a multiple of 4
    EXPECT_THROW(ms.find("blk.0.ffn_up_exps.weight[x]", 2), util::Error);
    // Without the trailer (the oldest llama-imatrix), and with an empty dataset name.
    const auto old = imatrix_dat({{"a", 1, {1.0f}}}, 0, "", false);
    EXPECT_EQ(parse_imatrix(old.data(), old.size(), "t.dat").chunks, 0);
    const auto empty_name = imatrix_dat({{"a", 1, {1.0f}}}, 3, "");
    EXPECT_EQ(parse_imatrix(empty_name.data(), empty_name.size(), "t.dat").dataset, "");
}

TEST(Imatrix, CorruptFilesAreClearErrors) {
    const auto good = imatrix_dat({{"blk.0.attn_q.weight", 2, {1.0f, 2.0f}}});
    EXPECT_EQ(error_of(good), "<no error>");
    const size_t entries_end = good.size() - 8 - 9;  // then int32 chunks, int32 len, "calib.txt"
    for (size_t cut = 0; cut < good.size(); ++cut) {
        if (cut == entries_end || cut == entries_end + 4)
            continue;  // the optional trailer's fields: valid ends
        const std::vector<uint8_t> b(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(cut));
        const std::string e = error_of(b);
        EXPECT_TRUE(e.find("truncated") != std::string::npos ||
                    e.find("no entries") != std::string::npos ||
                    e.find("cannot fit") != std::string::npos)
            << cut << ": " << e;
    }
    auto with = [&](size_t off, int32_t v) {
        auto b = good;
        std::memcpy(b.data() + off, &v, 4);
        return error_of(b);
    };
    EXPECT_NE(with(0, 0).find("no entries"), std::string::npos);
    EXPECT_NE(with(0, 1 << 30).find("cannot fit"), std::string::npos);
    EXPECT_NE(with(4, -1).find("name length -1"), std::string::npos);
    EXPECT_NE(with(4, 1 << 20).find("name length"), std::string::npos);
    const size_t ncall_at = 8 + 19, nval_at = ncall_at + 4;
    EXPECT_NE(with(ncall_at, -3).find("call count -3"), std::string::npos);
    EXPECT_NE(with(nval_at, 0).find("value count 0"), std::string::npos);
    EXPECT_NE(with(nval_at, 1 << 29).find("value count"), std::string::npos);
    EXPECT_NE(with(nval_at, 7).find("truncated"), std::string::npos);  // 28 bytes wanted, 25 left
    EXPECT_NE(error_of(imatrix_dat({{"x", 1, {NAN}}})).find("must be finite and non-negative"),
              std::string::npos);
    EXPECT_NE(error_of(imatrix_dat({{"x", 1, {INFINITY}}})).find("must be finite"),
              std::string::npos);
    EXPECT_NE(error_of(imatrix_dat({{"x", 1, {-1.0f}}})).find("non-negative"), std::string::npos);
    EXPECT_NE(error_of(imatrix_dat({{"x", 1, {1.0f}}, {"x", 1, {1.0f}}})).find("appears twice"),
              std::string::npos);
    EXPECT_NE(error_of(imatrix_dat({{std::string("a\nb"), 1, {1.0f}}})).find("not printable"),
              std::string::npos);
    auto trailing = good;
    trailing.push_back(0);
    EXPECT_NE(error_of(trailing).find("1 bytes after the dataset name"), std::string::npos);
    const std::vector<uint8_t> gguf = {'G', 'G', 'U', 'F', 3, 0, 0, 0};
    EXPECT_NE(error_of(gguf).find("not a readable GGUF"), std::string::npos) << error_of(gguf);
    EXPECT_THROW(read_imatrix("/nonexistent/imatrix.dat"), util::Error);
}

std::string tmp(const std::string& name) {
    return (std::filesystem::temp_directory_path() /
            ("warden_imx_" + std::to_string(::getpid()) + "_" + name))
        .string();
}

std::vector<uint8_t> file_bytes(const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// One matrix of a GGUF imatrix: sums [cols, n_mat] and counts [n_mat], as llama-imatrix's
// save_imatrix writes them (tools/imatrix/imatrix.cpp, GGUF output).
struct GgufEntry {
    std::string name;
    int64_t cols = 0;
    std::vector<float> sums;    // cols x n_mat, matrix-major
    std::vector<float> counts;  // n_mat
    tensor::GgmlType sums_type = tensor::GgmlType::F32;
    int64_t sums_n_mat = 0;  // the sums' matrix count when not counts.size() (a corrupt file)
    bool with_sums = true, with_counts = true;
};

std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
    std::vector<uint8_t> b(v.size() * 4);
    if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
    return b;
}

// An imatrix GGUF with the metadata llama-imatrix writes; `skip_key` leaves one key out.
std::vector<uint8_t> imatrix_gguf(const std::vector<GgufEntry>& es,
                                  const std::string& skip_key = "") {
    formats::GGUFWriter w;
    w.set_string("general.type", "imatrix");
    if (skip_key != "imatrix.datasets")
        w.set_string_array("imatrix.datasets", {"calib.txt", "more.txt"});
    if (skip_key != "imatrix.chunk_count") w.set_u32("imatrix.chunk_count", 12);
    if (skip_key != "imatrix.chunk_size") w.set_u32("imatrix.chunk_size", 512);
    for (const auto& e : es) {
        const auto n_mat = static_cast<int64_t>(e.counts.size());
        if (e.with_sums)
            w.add_tensor(e.name + ".in_sum2", {e.cols, e.sums_n_mat > 0 ? e.sums_n_mat : n_mat},
                         e.sums_type, f32_bytes(e.sums));
        if (e.with_counts)
            w.add_tensor(e.name + ".counts", {1, n_mat}, tensor::GgmlType::F32,
                         f32_bytes(e.counts));
    }
    const std::string path = tmp("imatrix.gguf");
    w.write(path);
    auto b = file_bytes(path);
    std::filesystem::remove(path);
    return b;
}

// The GGUF format of later llama.cpp versions: importance = in_sum2 / count per matrix (1 where a
// matrix saw no token), as llama-quantize's load_imatrix computes it; stacked experts are found
// by "name[e]" as in the legacy format; tensors of other names are ignored.
TEST(Imatrix, ParsesLlamaCppGgufLayout) {
    const auto b =
        imatrix_gguf({{"blk.0.attn_q.weight", 3, {4.0f, 8.0f, 0.0f}, {4.0f}},
                      {"blk.0.ffn_up_exps.weight", 2, {2, 4, 9, 9, 3, 6}, {2.0f, 0.0f, 3.0f}}});
    const Imatrix m = parse_imatrix(b.data(), b.size(), "t.gguf");
    ASSERT_EQ(m.entries.size(), 2u);
    EXPECT_EQ(m.entries.at("blk.0.attn_q.weight"), (std::vector<float>{1.0f, 2.0f, 0.0f}));
    EXPECT_EQ(m.entries.at("blk.0.ffn_up_exps.weight"), (std::vector<float>{1, 2, 1, 1, 1, 2}));
    EXPECT_EQ(m.find("blk.0.ffn_up_exps.weight[2]", 2)[1], 2.0f);
    EXPECT_EQ(m.find("blk.0.ffn_up_exps.weight[1]", 2)[0], 1.0f);  // expert 1 saw no token
    EXPECT_EQ(m.chunks, 12);
    EXPECT_EQ(m.dataset, "calib.txt, more.txt");
    // The same importances as a legacy file holding them: what the quantizer receives is equal.
    const auto dat = imatrix_dat({{"blk.0.attn_q.weight", 1, {1.0f, 2.0f, 0.0f}},
                                  {"blk.0.ffn_up_exps.weight", 1, {1, 2, 1, 1, 1, 2}}});
    EXPECT_EQ(parse_imatrix(dat.data(), dat.size(), "t.dat").entries, m.entries);
}

TEST(Imatrix, CorruptGgufImatrixIsAClearError) {
    const GgufEntry good{"blk.0.attn_q.weight", 2, {1.0f, 2.0f}, {1.0f}};
    const auto err = [](const std::vector<GgufEntry>& es, const std::string& skip = "") {
        return error_of(imatrix_gguf(es, skip));
    };
    EXPECT_EQ(err({good}), "<no error>");
    for (const char* key : {"imatrix.datasets", "imatrix.chunk_count", "imatrix.chunk_size"})
        EXPECT_NE(err({good}, key).find(std::string("no '") + key + "' metadata"),
                  std::string::npos)
            << key;
    EXPECT_NE(err({}).find("no .in_sum2 / .counts entries"), std::string::npos);
    auto e = good;
    e.with_counts = false;
    EXPECT_NE(err({e}).find("sums but no .counts"), std::string::npos);
    e = good;
    e.with_sums = false;
    EXPECT_NE(err({e}).find("counts but no .in_sum2"), std::string::npos);
    e = good;
    e.counts = {1.0f, 1.0f};  // two matrices (stacked experts): sums [2, 2], counts [1, 2]
    e.sums = {1, 2, 3, 4};
    EXPECT_EQ(err({e}), "<no error>");
    e = good;
    e.sums_type = tensor::GgmlType::F16;
    e.sums = {1.0f};  // 2 f16 values' bytes
    EXPECT_NE(err({e}).find("must be F32"), std::string::npos);
    e = good;
    e.sums = {NAN, 1.0f};
    EXPECT_NE(err({e}).find("must be finite and non-negative"), std::string::npos);
    e = good;
    e.sums = {1.0f, -2.0f};
    EXPECT_NE(err({e}).find("value 1 is -2"), std::string::npos);
    e = good;
    e.sums = {3e38f, 1.0f};
    e.counts = {1e-30f};
    EXPECT_NE(err({e}).find("overflows"), std::string::npos);
    e = good;
    e.name = "";
    EXPECT_NE(err({e}).find("named only"), std::string::npos);
    e = good;
    e.name = "a\nb";
    EXPECT_NE(err({e}).find("not printable ('a?b')"), std::string::npos) << err({e});
    e = good;
    e.counts = {-1.0f};
    EXPECT_NE(err({e}).find("count 0 is -1"), std::string::npos);
    // Counts that disagree with the sums' matrix count: 2 counts beside sums of one matrix.
    e = good;
    e.counts = {1.0f, 1.0f};
    e.sums_n_mat = 1;
    EXPECT_NE(err({e}).find("2 counts for 1 matrices"), std::string::npos) << err({e});
    // A model GGUF is not an importance matrix.
    const std::string model_err = [] {
        try {
            read_imatrix(test::golden_model("tiny-llama.gguf"));
        } catch (const util::Error& x) {
            return std::string(x.what());
        }
        return std::string("<no error>");
    }();
    EXPECT_NE(model_err.find("not an importance matrix"), std::string::npos) << model_err;
    // Every truncation of a good file before its last tensor's last byte is an error, never a crash
    // (the writer pads the file's end to the alignment; cutting that padding leaves a valid file).
    const auto b = imatrix_gguf({good});
    const formats::GGUFFile whole(b.data(), b.size());
    size_t data_end = 0;
    for (const auto& t : whole.tensors())
        data_end = std::max(data_end, static_cast<size_t>(t.data - b.data()) + t.n_bytes);
    ASSERT_GT(data_end, 100u);
    for (size_t cut = 0; cut < data_end; ++cut)
        EXPECT_NE(
            error_of(std::vector<uint8_t>(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(cut))),
            "<no error>")
            << cut;
    EXPECT_EQ(error_of(std::vector<uint8_t>(b.begin(),
                                            b.begin() + static_cast<std::ptrdiff_t>(data_end))),
              "<no error>");
}

// Importance-weighted squared error of every linear tensor of `quantized` against `src`.
double weighted_error(const std::string& src, const std::string& quantized, const Imatrix& m) {
    const formats::GGUFFile a(src), b(quantized);
    double err = 0.0;
    for (const auto& t : a.tensors()) {
        if (!t.name.starts_with("blk.") || t.shape.size() != 2)
            continue;  // tiny-llama's 21 matrices
        const int64_t cols = t.shape[0], rows = t.shape[1];
        const float* imp = m.find(t.name, cols);
        const auto sa = formats::SourceTensor::from(t),
                   sb = formats::SourceTensor::from(*b.find_tensor(t.name));
        std::vector<float> x(static_cast<size_t>(cols)), q(x.size());
        for (int64_t r = 0; r < rows; ++r) {
            sa.row_to_f32(r, x.data());
            sb.row_to_f32(r, q.data());
            for (int64_t c = 0; c < cols; ++c) {
                const double d = x[static_cast<size_t>(c)] - q[static_cast<size_t>(c)];
                err += imp[c] * d * d;
            }
        }
    }
    return err;
}

TEST(Imatrix, WeightsTheScaleSearch) {
    util::ThreadPool pool(2);
    const std::string src = test::golden_model("tiny-llama.gguf");
    const formats::GGUFFile g(src);
    // An importance for every linear tensor: uniform 4 (a power of two scales every weighted error
    // exactly, so the search picks what it picks without one), and skewed (every 8th column 100x).
    std::vector<Entry> uniform, skewed;
    for (const auto& t : g.tensors()) {
        if (!t.name.starts_with("blk.") || t.shape.size() != 2)
            continue;  // tiny-llama's 21 matrices
        const auto cols = static_cast<size_t>(t.shape[0]);
        uniform.push_back({t.name, 2, std::vector<float>(cols, 8.0f)});  // 8 / 2 calls = 4
        std::vector<float> v(cols);
        for (size_t c = 0; c < cols; ++c) v[c] = c % 8 == 3 ? 100.0f : 1.0f;
        skewed.push_back({t.name, 1, v});
    }
    const auto ub = imatrix_dat(uniform), sb = imatrix_dat(skewed);
    const Imatrix mu = parse_imatrix(ub.data(), ub.size(), "u"),
                  ms = parse_imatrix(sb.data(), sb.size(), "s");
    for (const char* fmt : {"int4", "int4-asym", "int8"}) {
        const std::string plain = tmp(std::string(fmt) + "_plain.gguf"),
                          uni = tmp(std::string(fmt) + "_u.gguf"),
                          skew = tmp(std::string(fmt) + "_s.gguf");
        EXPECT_EQ(convert::quantize_gguf(src, plain, parse_weight_format(fmt),
                                         convert::HeadOptions::keep(), pool)
                      .imatrix_weighted,
                  0);
        EXPECT_EQ(convert::quantize_gguf(src, uni, parse_weight_format(fmt),
                                         convert::HeadOptions::keep(), pool, &mu)
                      .imatrix_weighted,
                  static_cast<int64_t>(uniform.size()));
        convert::quantize_gguf(src, skew, parse_weight_format(fmt), convert::HeadOptions::keep(),
                               pool, &ms);
        EXPECT_TRUE(file_bytes(plain) == file_bytes(uni)) << fmt;
        EXPECT_FALSE(file_bytes(plain) == file_bytes(skew)) << fmt;
        const double e_plain = weighted_error(src, plain, ms),
                     e_skew = weighted_error(src, skew, ms);
        EXPECT_LT(e_skew, e_plain) << fmt;
        std::printf(
            "  %s: importance-weighted error %.4g without the imatrix, %.4g with it (%.1f%% "
            "lower)\n",
            fmt, e_plain, e_skew, 100.0 * (1.0 - e_skew / e_plain));
        for (const auto& p : {plain, uni, skew}) std::filesystem::remove(p);
    }
    // An entry of the wrong width: an error naming the tensor, before anything is written.
    auto wrong = skewed;
    wrong[0].values.resize(wrong[0].values.size() / 2);
    const auto wb = imatrix_dat(wrong);
    const Imatrix mw = parse_imatrix(wb.data(), wb.size(), "w");
    try {
        convert::quantize_gguf(src, tmp("wrong.gguf"), parse_weight_format("int4"),
                               convert::HeadOptions::keep(), pool, &mw);
        FAIL();
    } catch (const util::Error& e) {
        EXPECT_NE(std::string(e.what()).find(wrong[0].name), std::string::npos) << e.what();
    }
    EXPECT_FALSE(std::filesystem::exists(tmp("wrong.gguf")));
}

}  // namespace
}  // namespace warden::quant
