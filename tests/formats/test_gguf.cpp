// formats::GGUFFile: a small in-test GGUF writer produces v2/v3 files with every metadata type and
// every tensor type; then the parser is attacked with truncations, random mutations and
// hand-made malformed headers (this file also runs under ASan/UBSan), and finally pointed at
// the real vocab files and the default model when they are present.
#include <gtest/gtest.h>
#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "formats/gguf_file.h"
#include "tensor/ggml_types.h"
#include "util/error.h"

namespace warden::model {
namespace {

using Bytes = std::vector<uint8_t>;
using VT = formats::GGUFValueType;

template <typename T>
void put(Bytes& b, T v) {
    const size_t at = b.size();
    b.resize(at + sizeof(T));
    std::memcpy(b.data() + at, &v, sizeof(T));
}

void put_str(Bytes& b, const std::string& s) {
    put<uint64_t>(b, s.size());
    b.insert(b.end(), s.begin(), s.end());
}

// An encoded metadata value: its type tag and the bytes that follow the tag.
struct Val {
    VT type;
    Bytes bytes;
};

template <typename T>
Val scalar(VT t, T v) {
    Val out{t, {}};
    put(out.bytes, v);
    return out;
}
Val u8(uint8_t v) {
    return scalar(VT::UINT8, v);
}
Val i8(int8_t v) {
    return scalar(VT::INT8, v);
}
Val u16(uint16_t v) {
    return scalar(VT::UINT16, v);
}
Val i16(int16_t v) {
    return scalar(VT::INT16, v);
}
Val u32(uint32_t v) {
    return scalar(VT::UINT32, v);
}
Val i32(int32_t v) {
    return scalar(VT::INT32, v);
}
Val f32(float v) {
    return scalar(VT::FLOAT32, v);
}
Val boolean(bool v) {
    return scalar(VT::BOOL, static_cast<uint8_t>(v));
}
Val u64(uint64_t v) {
    return scalar(VT::UINT64, v);
}
Val i64(int64_t v) {
    return scalar(VT::INT64, v);
}
Val f64(double v) {
    return scalar(VT::FLOAT64, v);
}
Val str(const std::string& s) {
    Val out{VT::STRING, {}};
    put_str(out.bytes, s);
    return out;
}
Val arr(VT elem, const std::vector<Val>& items) {
    Val out{VT::ARRAY, {}};
    put<uint32_t>(out.bytes, static_cast<uint32_t>(elem));
    put<uint64_t>(out.bytes, items.size());
    for (const auto& v : items) out.bytes.insert(out.bytes.end(), v.bytes.begin(), v.bytes.end());
    return out;
}

struct TensorSpec {
    std::string name;
    std::vector<uint64_t> dims;
    uint32_t type;
    Bytes data;
    uint64_t offset = 0;  // filled by the writer
};

// Writes a GGUF file. Fields can be overridden to produce malformed files.
struct GgufWriter {
    uint32_t magic = 0x46554747u;
    uint32_t version = 3;
    uint64_t alignment = 32;  // used for the data layout; add general.alignment to declare it
    std::vector<std::pair<std::string, Val>> kvs;
    std::vector<TensorSpec> tensors;
    std::optional<uint64_t> n_tensors_override, n_kv_override;

    void kv(const std::string& key, Val v) { kvs.emplace_back(key, std::move(v)); }
    void tensor(const std::string& name, std::vector<uint64_t> dims, tensor::GgmlType t,
                uint8_t seed = 1) {
        const auto& info = tensor::ggml_type_info(t);
        uint64_t n = 1;
        for (auto d : dims) n *= d;
        Bytes data(static_cast<size_t>(n / static_cast<uint64_t>(info.block_elems) *
                                       static_cast<uint64_t>(info.block_bytes)));
        for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(seed + i * 7);
        tensors.push_back({name, std::move(dims), static_cast<uint32_t>(t), std::move(data)});
    }

    Bytes build() {
        Bytes b;
        put(b, magic);
        put(b, version);
        put<uint64_t>(b, n_tensors_override.value_or(tensors.size()));
        put<uint64_t>(b, n_kv_override.value_or(kvs.size()));
        for (const auto& [key, v] : kvs) {
            put_str(b, key);
            put<uint32_t>(b, static_cast<uint32_t>(v.type));
            b.insert(b.end(), v.bytes.begin(), v.bytes.end());
        }
        uint64_t offset = 0;
        for (auto& t : tensors) {
            t.offset = offset;
            offset += (t.data.size() + alignment - 1) / alignment * alignment;
            put_str(b, t.name);
            put<uint32_t>(b, static_cast<uint32_t>(t.dims.size()));
            for (auto d : t.dims) put<uint64_t>(b, d);
            put<uint32_t>(b, t.type);
            put<uint64_t>(b, t.offset);
        }
        if (!tensors.empty()) {
            while (b.size() % alignment) b.push_back(0);
            const size_t data_start = b.size();
            for (size_t k = 0; k < tensors.size(); ++k) {
                b.resize(data_start + tensors[k].offset);
                b.insert(b.end(), tensors[k].data.begin(), tensors[k].data.end());
            }
        }
        return b;
    }
};

// Exercises everything a caller could touch on a parsed file; any failure must be util::Error.
void touch_everything(const formats::GGUFFile& f) {
    volatile uint8_t sink = 0;
    for (const auto& t : f.tensors()) {
        EXPECT_EQ(f.find_tensor(t.name), &t);
        if (t.n_bytes > 0) {
            sink = sink + t.data[0];
            sink = sink + t.data[t.n_bytes - 1];
        }
        (void)t.n_elements();
        (void)tensor::ggml_type_name(t.type);
    }
    for (const auto& [key, v] : f.metadata()) {
        (void)formats::gguf_value_type_name(v.type);
        (void)v.is_integer();
        try {
            (void)v.as_int(key);
        } catch (const util::Error&) {
        }
        try {
            (void)v.as_float(key);
        } catch (const util::Error&) {
        }
        try {
            (void)v.as_bool(key);
        } catch (const util::Error&) {
        }
        try {
            (void)v.as_string(key);
        } catch (const util::Error&) {
        }
        try {
            (void)f.get_string(key);
        } catch (const util::Error&) {
        }
        try {
            (void)f.get_int(key);
        } catch (const util::Error&) {
        }
        try {
            (void)f.get_int_opt(key);
        } catch (const util::Error&) {
        }
        try {
            (void)f.get_float_opt(key);
        } catch (const util::Error&) {
        }
        try {
            (void)f.get_bool_opt(key);
        } catch (const util::Error&) {
        }
        try {
            (void)f.get_string_array(key);
        } catch (const util::Error&) {
        }
        try {
            (void)f.get_float_array(key);
        } catch (const util::Error&) {
        }
        try {
            (void)f.get_int_array(key);
        } catch (const util::Error&) {
        }
    }
}

// Parses an exact-size heap copy (so ASan sees any over-read). Returns true if it parsed;
// fails the test on any exception other than util::Error.
bool parses_cleanly(const Bytes& bytes, std::string* error = nullptr) {
    const std::unique_ptr<uint8_t[]> copy(bytes.empty() ? nullptr : new uint8_t[bytes.size()]);
    if (!bytes.empty()) std::memcpy(copy.get(), bytes.data(), bytes.size());
    try {
        formats::GGUFFile f(copy.get(), bytes.size(), "test.gguf");
        touch_everything(f);
        return true;
    } catch (const util::Error& e) {
        const std::string msg = e.what();
        EXPECT_EQ(msg.find('\n'), std::string::npos) << "multi-line error: " << msg;
        EXPECT_FALSE(msg.empty());
        if (error) *error = msg;
        return false;
    } catch (const std::exception& e) {
        ADD_FAILURE() << "non-util::Error exception: " << e.what();
        return false;
    }
}

std::string error_of(const Bytes& bytes) {
    std::string msg;
    EXPECT_FALSE(parses_cleanly(bytes, &msg)) << "expected a parse error";
    return msg;
}

#define EXPECT_GGUF_ERROR(bytes, fragment)                                           \
    do {                                                                             \
        const std::string msg_ = error_of(bytes);                                    \
        EXPECT_NE(msg_.find(fragment), std::string::npos) << "message: " << msg_;    \
        EXPECT_NE(msg_.find("test.gguf"), std::string::npos) << "message: " << msg_; \
    } while (0)

GgufWriter metadata_writer(uint32_t version) {
    GgufWriter w;
    w.version = version;
    w.kv("general.architecture", str("llama"));
    w.kv("k.u8", u8(200));
    w.kv("k.i8", i8(-100));
    w.kv("k.u16", u16(65535));
    w.kv("k.i16", i16(-32768));
    w.kv("k.u32", u32(4000000000u));
    w.kv("k.i32", i32(-2000000000));
    w.kv("k.f32", f32(1.5f));
    w.kv("k.bool.true", boolean(true));
    w.kv("k.bool.false", boolean(false));
    w.kv("k.string", str("h\xc3\xa9llo"));
    w.kv("k.string.empty", str(""));
    w.kv("k.string.nul", str(std::string("a\0b", 3)));
    w.kv("k.u64", u64(std::numeric_limits<uint64_t>::max()));
    w.kv("k.u64.small", u64(12345));
    w.kv("k.i64", i64(std::numeric_limits<int64_t>::min()));
    w.kv("k.f64", f64(-2.25e300));
    w.kv("a.u8", arr(VT::UINT8, {u8(0), u8(255)}));
    w.kv("a.i8", arr(VT::INT8, {i8(-128), i8(127)}));
    w.kv("a.u16", arr(VT::UINT16, {u16(1), u16(65535)}));
    w.kv("a.i16", arr(VT::INT16, {i16(-32768), i16(32767)}));
    w.kv("a.u32", arr(VT::UINT32, {u32(7), u32(0xffffffffu)}));
    w.kv("a.i32", arr(VT::INT32, {i32(-1), i32(2), i32(-3)}));
    w.kv("a.f32", arr(VT::FLOAT32, {f32(0.25f), f32(-1e30f), f32(3.0f)}));
    w.kv("a.bool", arr(VT::BOOL, {boolean(true), boolean(false), boolean(true)}));
    w.kv("a.string", arr(VT::STRING, {str("<s>"), str(""), str("\xe4\xb8\xad"), str("</s>")}));
    w.kv("a.u64", arr(VT::UINT64, {u64(1), u64(uint64_t{1} << 40)}));
    w.kv("a.i64", arr(VT::INT64, {i64(-5), i64(int64_t{1} << 50)}));
    w.kv("a.f64", arr(VT::FLOAT64, {f64(0.1), f64(-0.0)}));
    w.kv("a.empty", arr(VT::INT32, {}));
    w.kv("a.nested", arr(VT::ARRAY, {arr(VT::INT32, {i32(1), i32(2)}), arr(VT::STRING, {str("x")}),
                                     arr(VT::ARRAY, {arr(VT::UINT8, {u8(9)})})}));
    return w;
}

class GgufVersion : public ::testing::TestWithParam<uint32_t> {};

TEST_P(GgufVersion, ParsesEveryMetadataType) {
    GgufWriter w = metadata_writer(GetParam());
    const Bytes bytes = w.build();
    formats::GGUFFile f(bytes.data(), bytes.size(), "meta.gguf");
    EXPECT_EQ(f.version(), GetParam());
    EXPECT_EQ(f.path(), "meta.gguf");
    EXPECT_EQ(f.metadata().size(), w.kvs.size());
    EXPECT_TRUE(f.tensors().empty());

    EXPECT_EQ(f.get_string("general.architecture"), "llama");
    EXPECT_EQ(f.get("k.u8").type, VT::UINT8);
    EXPECT_EQ(f.get_int("k.u8"), 200);
    EXPECT_EQ(f.get_int("k.i8"), -100);
    EXPECT_EQ(f.get_int("k.u16"), 65535);
    EXPECT_EQ(f.get_int("k.i16"), -32768);
    EXPECT_EQ(f.get_int("k.u32"), 4000000000);
    EXPECT_EQ(f.get_int("k.i32"), -2000000000);
    EXPECT_EQ(f.get("k.i32").type, VT::INT32);
    EXPECT_EQ(f.get_float_opt("k.f32"), 1.5);
    EXPECT_EQ(f.get("k.f32").type, VT::FLOAT32);
    EXPECT_EQ(f.get_bool_opt("k.bool.true"), true);
    EXPECT_EQ(f.get_bool_opt("k.bool.false"), false);
    EXPECT_EQ(f.get_string("k.string"), "h\xc3\xa9llo");
    EXPECT_EQ(f.get_string("k.string.empty"), "");
    EXPECT_EQ(f.get_string("k.string.nul"), std::string("a\0b", 3));
    EXPECT_EQ(f.get("k.u64").u, std::numeric_limits<uint64_t>::max());
    EXPECT_THROW(f.get_int("k.u64"), util::Error);  // does not fit int64
    EXPECT_EQ(f.get_int("k.u64.small"), 12345);
    EXPECT_EQ(f.get_int("k.i64"), std::numeric_limits<int64_t>::min());
    EXPECT_EQ(f.get_float_opt("k.f64"), -2.25e300);
    EXPECT_EQ(f.get("k.f64").type, VT::FLOAT64);

    // Conversions between kinds.
    EXPECT_EQ(f.get_float_opt("k.i16"), -32768.0);
    EXPECT_EQ(f.get_bool_opt("k.u8"), true);
    EXPECT_TRUE(f.get("k.u8").is_integer());
    EXPECT_FALSE(f.get("k.f32").is_integer());
    EXPECT_FALSE(f.get("k.bool.true").is_integer());
    EXPECT_THROW(f.get_int("k.f32"), util::Error);
    EXPECT_THROW(f.get_int("k.string"), util::Error);
    EXPECT_THROW(f.get_string("k.u8"), util::Error);
    EXPECT_THROW(f.get_bool_opt("k.string"), util::Error);
    EXPECT_THROW(f.get_float_opt("k.string"), util::Error);
    EXPECT_THROW(f.get_float_opt("k.u64"), util::Error);  // as_float goes through as_int

    // Missing keys.
    EXPECT_FALSE(f.has("nope"));
    EXPECT_EQ(f.find("nope"), nullptr);
    EXPECT_THROW(f.get("nope"), util::Error);
    EXPECT_THROW(f.get_string("nope"), util::Error);
    EXPECT_EQ(f.get_int_opt("nope"), std::nullopt);
    EXPECT_EQ(f.get_float_opt("nope"), std::nullopt);
    EXPECT_EQ(f.get_bool_opt("nope"), std::nullopt);
    try {
        (void)f.get("nope");
    } catch (const util::Error& e) {
        EXPECT_NE(std::string(e.what()).find("nope"), std::string::npos);
        EXPECT_NE(std::string(e.what()).find("meta.gguf"), std::string::npos);
    }

    // Arrays.
    EXPECT_EQ(f.get_int_array("a.u8"), (std::vector<int64_t>{0, 255}));
    EXPECT_EQ(f.get_int_array("a.i8"), (std::vector<int64_t>{-128, 127}));
    EXPECT_EQ(f.get_int_array("a.u16"), (std::vector<int64_t>{1, 65535}));
    EXPECT_EQ(f.get_int_array("a.i16"), (std::vector<int64_t>{-32768, 32767}));
    EXPECT_EQ(f.get_int_array("a.u32"), (std::vector<int64_t>{7, 0xffffffffll}));
    EXPECT_EQ(f.get_int_array("a.i32"), (std::vector<int64_t>{-1, 2, -3}));
    EXPECT_EQ(f.get_float_array("a.f32"),
              (std::vector<double>{0.25, static_cast<double>(-1e30f), 3.0}));
    EXPECT_THROW(f.get_int_array("a.bool"), util::Error);  // bools are not integers
}

TEST_P(GgufVersion, ParsesEveryArrayType) {
    GgufWriter w = metadata_writer(GetParam());
    const Bytes bytes = w.build();
    formats::GGUFFile f(bytes.data(), bytes.size(), "meta.gguf");
    const formats::GGUFValue& b = f.get("a.bool");
    ASSERT_EQ(b.type, VT::ARRAY);
    EXPECT_EQ(b.elem_type, VT::BOOL);
    ASSERT_EQ(b.arr.size(), 3u);
    EXPECT_TRUE(b.arr[0].as_bool("a.bool"));
    EXPECT_FALSE(b.arr[1].as_bool("a.bool"));
    EXPECT_EQ(f.get_string_array("a.string"),
              (std::vector<std::string>{"<s>", "", "\xe4\xb8\xad", "</s>"}));
    EXPECT_EQ(f.get("a.string").elem_type, VT::STRING);
    EXPECT_EQ(f.get_int_array("a.u64"), (std::vector<int64_t>{1, int64_t{1} << 40}));
    EXPECT_EQ(f.get_int_array("a.i64"), (std::vector<int64_t>{-5, int64_t{1} << 50}));
    const auto f64s = f.get_float_array("a.f64");
    ASSERT_EQ(f64s.size(), 2u);
    EXPECT_EQ(f64s[0], 0.1);
    EXPECT_TRUE(std::signbit(f64s[1]));
    EXPECT_TRUE(f.get_int_array("a.empty").empty());
    EXPECT_EQ(f.get("a.empty").elem_type, VT::INT32);
    EXPECT_EQ(f.get_float_array("a.i32"), (std::vector<double>{-1, 2, -3}));

    const formats::GGUFValue& nested = f.get("a.nested");
    EXPECT_EQ(nested.elem_type, VT::ARRAY);
    ASSERT_EQ(nested.arr.size(), 3u);
    EXPECT_EQ(nested.arr[0].elem_type, VT::INT32);
    ASSERT_EQ(nested.arr[0].arr.size(), 2u);
    EXPECT_EQ(nested.arr[0].arr[1].as_int("x"), 2);
    EXPECT_EQ(nested.arr[1].arr.at(0).as_string("x"), "x");
    EXPECT_EQ(nested.arr[2].arr.at(0).arr.at(0).as_int("x"), 9);

    // Wrong kinds of arrays.
    EXPECT_THROW(f.get_string_array("a.i32"), util::Error);
    EXPECT_THROW(f.get_int_array("a.string"), util::Error);
    EXPECT_THROW(f.get_int_array("a.f32"), util::Error);
    EXPECT_THROW(f.get_int_array("k.i32"), util::Error);  // not an array
    EXPECT_THROW(f.get_float_array("a.nested"), util::Error);
    EXPECT_THROW(f.get_int_array("a.u64.missing"), util::Error);
    EXPECT_THROW(f.get_string("a.string"), util::Error);
}

INSTANTIATE_TEST_SUITE_P(Gguf, GgufVersion, ::testing::Values(2u, 3u),
                         [](const ::testing::TestParamInfo<uint32_t>& p) {
                             return std::to_string(p.param);
                         });

TEST(GgufTensors, EveryTypeDefaultAndDeclaredAlignment) {
    using tensor::GgmlType;
    const GgmlType types[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::Q4_0, GgmlType::Q4_1,
                              GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::Q8_1,
                              GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K,
                              GgmlType::Q6_K, GgmlType::Q8_K, GgmlType::BF16};
    for (uint64_t alignment : {uint64_t{32}, uint64_t{64}, uint64_t{1}, uint64_t{256}}) {
        for (uint32_t version : {2u, 3u}) {
            GgufWriter w;
            w.version = version;
            w.alignment = alignment;
            w.kv("general.name", str("tiny"));
            if (alignment != 32) w.kv("general.alignment", u32(static_cast<uint32_t>(alignment)));
            int k = 0;
            for (auto t : types) {
                const int64_t be = tensor::ggml_type_info(t).block_elems;
                // 1 to 4 dimensions, rows of 1 or 3 blocks.
                std::vector<uint64_t> dims{static_cast<uint64_t>(be * (k % 2 ? 3 : 1))};
                for (int d = 1; d <= k % 4; ++d) dims.push_back(static_cast<uint64_t>(d + 1));
                std::string name = "t";  // (built piecewise: GCC 12 -Wrestrict false positive)
                name += std::to_string(k);
                name += '.';
                name += tensor::ggml_type_name(t);
                w.tensor(name, dims, t, static_cast<uint8_t>(k));
                ++k;
            }
            const Bytes bytes = w.build();
            formats::GGUFFile f(bytes.data(), bytes.size(), "tensors.gguf");
            ASSERT_EQ(f.tensors().size(), w.tensors.size());
            const uint8_t* data_start = nullptr;
            for (size_t i = 0; i < w.tensors.size(); ++i) {
                const auto& want = w.tensors[i];
                const formats::GGUFTensor& t = f.tensors()[i];
                SCOPED_TRACE(want.name + " alignment " + std::to_string(alignment));
                EXPECT_EQ(t.name, want.name);
                EXPECT_EQ(static_cast<uint32_t>(t.type), want.type);
                ASSERT_EQ(t.shape.size(), want.dims.size());
                int64_t n = 1;
                for (size_t d = 0; d < want.dims.size(); ++d) {
                    EXPECT_EQ(t.shape[d], static_cast<int64_t>(want.dims[d]));
                    n *= t.shape[d];
                }
                EXPECT_EQ(t.n_elements(), n);
                EXPECT_EQ(t.offset, want.offset);
                EXPECT_EQ(t.offset % alignment, 0u);
                ASSERT_EQ(t.n_bytes, want.data.size());
                EXPECT_EQ(static_cast<int64_t>(t.n_bytes),
                          tensor::ggml_row_bytes(t.type, t.shape[0]) * (n / t.shape[0]));
                EXPECT_EQ(0, std::memcmp(t.data, want.data.data(), want.data.size()));
                if (i == 0) data_start = t.data - t.offset;
                EXPECT_EQ(t.data, data_start + t.offset);
                EXPECT_EQ(static_cast<uint64_t>(data_start - bytes.data()) % alignment, 0u);
                EXPECT_EQ(f.find_tensor(want.name), &t);
            }
            EXPECT_EQ(f.find_tensor("missing"), nullptr);
        }
    }
}

TEST(GgufTensors, EmptyFileAndZeroSizedData) {
    GgufWriter w;
    const Bytes bytes = w.build();
    ASSERT_EQ(bytes.size(), 24u);
    formats::GGUFFile f(bytes.data(), bytes.size());
    EXPECT_TRUE(f.metadata().empty());
    EXPECT_TRUE(f.tensors().empty());
    EXPECT_EQ(f.path(), "<memory>");
}

TEST(GgufTensors, OpensFromDiskAndNamesMissingFile) {
    GgufWriter w = metadata_writer(3);
    w.tensor("w", {64, 2}, tensor::GgmlType::Q8_0);
    const Bytes bytes = w.build();
    const auto path =
        std::filesystem::temp_directory_path() /
        std::string("warden_test_gguf_").append(std::to_string(::getpid())).append(".gguf");
    {
        FILE* fp = std::fopen(path.c_str(), "wb");
        ASSERT_NE(fp, nullptr);
        ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), fp), bytes.size());
        std::fclose(fp);
    }
    {
        formats::GGUFFile f(path.string());
        EXPECT_EQ(f.path(), path.string());
        ASSERT_NE(f.find_tensor("w"), nullptr);
        EXPECT_EQ(f.find_tensor("w")->n_bytes, 2u * 2 * 34);
        EXPECT_EQ(f.get_string("general.architecture"), "llama");
    }
    std::filesystem::remove(path);
    try {
        formats::GGUFFile f(path.string());
        ADD_FAILURE() << "opened a missing file";
    } catch (const util::Error& e) {
        EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos) << e.what();
    }
}

// ---- robustness ------------------------------------------------------------------------------

Bytes robustness_file() {
    GgufWriter w;
    w.kv("general.architecture", str("llama"));
    w.kv("general.alignment", u32(32));
    w.kv("llama.block_count", u32(2));
    w.kv("llama.rope.freq_base", f32(10000.0f));
    w.kv("tokenizer.ggml.tokens", arr(VT::STRING, {str("a"), str("bc"), str("<unk>")}));
    w.kv("tokenizer.ggml.scores", arr(VT::FLOAT32, {f32(0), f32(-1), f32(-2)}));
    w.kv("nested", arr(VT::ARRAY, {arr(VT::UINT8, {u8(1)}), arr(VT::INT64, {i64(-1), i64(2)})}));
    w.kv("flag", boolean(true));
    w.kv("big", u64(1ull << 62));
    w.tensor("token_embd.weight", {32, 3}, tensor::GgmlType::Q4_0);
    w.tensor("blk.0.attn_norm.weight", {8}, tensor::GgmlType::F32);
    w.tensor("blk.0.ffn.weight", {256, 1}, tensor::GgmlType::Q6_K);
    w.tensor("output.weight", {4, 2}, tensor::GgmlType::F16);
    return w.build();
}

TEST(GgufRobustness, EveryTruncationThrows) {
    const Bytes full = robustness_file();
    ASSERT_TRUE(parses_cleanly(full));
    for (size_t len = 0; len < full.size(); ++len) {
        const Bytes prefix(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(len));
        // The last tensor's data ends at the end of the file, so no strict prefix is complete.
        EXPECT_FALSE(parses_cleanly(prefix)) << "prefix of " << len << " bytes parsed";
    }
}

TEST(GgufRobustness, RandomMutationsNeverCrash) {
    const Bytes full = robustness_file();
    // The header (everything before the tensor data) is where mutations matter most.
    size_t header_end = full.size();
    {
        formats::GGUFFile f(full.data(), full.size());
        header_end = static_cast<size_t>(f.tensors().front().data - full.data());
    }
    std::mt19937_64 rng(12345);
    int parsed = 0;
    const int kIterations = 6000;
    for (int it = 0; it < kIterations; ++it) {
        Bytes m = full;
        const int n_edits = 1 + static_cast<int>(rng() % 4);
        for (int e = 0; e < n_edits; ++e) {
            const size_t limit = rng() % 4 == 0 ? m.size() : std::min(m.size(), header_end);
            if (limit == 0) break;
            const size_t pos = rng() % limit;
            switch (rng() % 7) {
                case 0:
                    m[pos] ^= static_cast<uint8_t>(1u << (rng() % 8));
                    break;
                case 1:
                    m[pos] = static_cast<uint8_t>(rng());
                    break;
                case 2:
                    m[pos] = rng() % 2 ? 0xff : 0x00;
                    break;
                case 3: {  // overwrite an 8-byte field with an extreme value
                    const uint64_t vals[] = {0,
                                             1,
                                             0xffffffffffffffffull,
                                             0x7fffffffffffffffull,
                                             0x8000000000000000ull,
                                             0xffffffffull,
                                             1ull << 32,
                                             4,
                                             5,
                                             13,
                                             64,
                                             1ull << 40};
                    const uint64_t v = vals[rng() % std::size(vals)];
                    const size_t n = std::min<size_t>(8, m.size() - pos);
                    std::memcpy(m.data() + pos, &v, n);
                    break;
                }
                case 4:
                    m.erase(m.begin() + static_cast<std::ptrdiff_t>(pos));
                    break;
                case 5:
                    m.insert(m.begin() + static_cast<std::ptrdiff_t>(pos),
                             static_cast<uint8_t>(rng()));
                    break;
                case 6:
                    m.resize(pos);
                    break;
            }
        }
        if (parses_cleanly(m)) ++parsed;
        if (HasFailure()) {
            ADD_FAILURE() << "at iteration " << it;
            return;
        }
    }
    // Sanity: the sweep must not be all-reject or all-accept.
    EXPECT_GT(parsed, 0);
    EXPECT_LT(parsed, kIterations);
}

// ---- specific errors -------------------------------------------------------------------------

GgufWriter valid_writer() {
    GgufWriter w;
    w.kv("general.architecture", str("llama"));
    w.tensor("a", {32, 2}, tensor::GgmlType::Q8_0);
    w.tensor("b", {16}, tensor::GgmlType::F32);
    return w;
}

// Offset of the first tensor info's fields in a valid_writer() file.
size_t first_tensor_info_pos() {
    return 24 + 8 + std::string("general.architecture").size() + 4 + 8 +
           std::string("llama").size();
}

TEST(GgufErrors, BadMagicAndVersions) {
    {
        GgufWriter w = valid_writer();
        w.magic = 0x46554746u;
        EXPECT_GGUF_ERROR(w.build(), "bad magic");
    }
    {
        GgufWriter w = valid_writer();
        w.version = 1;
        EXPECT_GGUF_ERROR(w.build(), "version 1");
    }
    for (uint32_t v : {0u, 4u, 0x03000000u}) {
        GgufWriter w = valid_writer();
        w.version = v;
        EXPECT_GGUF_ERROR(w.build(), "unsupported GGUF version " + std::to_string(v));
    }
    EXPECT_GGUF_ERROR((Bytes{'G', 'G'}), "truncated");
    EXPECT_GGUF_ERROR(Bytes{}, "truncated");
}

TEST(GgufErrors, HugeCounts) {
    for (uint64_t n : {uint64_t{1} << 40, ~uint64_t{0}, uint64_t{1000}}) {
        GgufWriter w = valid_writer();
        w.n_kv_override = n;
        EXPECT_GGUF_ERROR(w.build(),
                          "metadata count " + std::to_string(n) + " exceeds the file size");
        GgufWriter w2 = valid_writer();
        w2.n_tensors_override = n;
        EXPECT_GGUF_ERROR(w2.build(),
                          "tensor count " + std::to_string(n) + " exceeds the file size");
    }
    // Huge array and string lengths.
    {
        GgufWriter w;
        Val a = arr(VT::UINT32, {u32(1)});
        const uint64_t huge = uint64_t{1} << 61;
        std::memcpy(a.bytes.data() + 4, &huge, 8);
        w.kv("a", a);
        EXPECT_GGUF_ERROR(w.build(), "exceeds the file size");
    }
    {
        GgufWriter w;
        Val s = str("abc");
        const uint64_t huge = ~uint64_t{0};
        std::memcpy(s.bytes.data(), &huge, 8);
        w.kv("s", s);
        EXPECT_GGUF_ERROR(w.build(), "truncated");
    }
    {
        GgufWriter w = valid_writer();
        Bytes b = w.build();
        const uint64_t huge = ~uint64_t{0} - 3;  // key length
        std::memcpy(b.data() + 24, &huge, 8);
        EXPECT_GGUF_ERROR(b, "truncated");
    }
}

TEST(GgufErrors, BadAlignment) {
    for (Val v : {u32(0), u32(3), u32(48), u32(1u << 21), i32(-32), u64(~uint64_t{0})}) {
        GgufWriter w = valid_writer();
        w.kv("general.alignment", v);
        const std::string msg = error_of(w.build());
        EXPECT_NE(msg.find("alignment"), std::string::npos) << msg;
    }
    GgufWriter w = valid_writer();
    w.kv("general.alignment", str("32"));
    EXPECT_GGUF_ERROR(w.build(), "general.alignment is not an integer");
    // A declared alignment the offsets do not respect.
    GgufWriter w2 = valid_writer();
    w2.alignment = 32;
    w2.tensors[0].dims = {32, 1};  // 34 bytes: second tensor lands at offset 64, not 128-aligned
    w2.tensors[0].data.resize(34);
    w2.kv("general.alignment", u32(128));
    EXPECT_GGUF_ERROR(w2.build(), "not aligned");
}

TEST(GgufErrors, TensorPastEndOfFile) {
    GgufWriter w = valid_writer();
    Bytes b = w.build();
    b.resize(b.size() - 1);
    EXPECT_GGUF_ERROR(b, "past the end of the file");
    // An offset far beyond the end.
    Bytes b2 = w.build();
    const size_t off_pos = first_tensor_info_pos() + 8 + 1 + 4 + 16 + 4;  // name "a", 2 dims, type
    const uint64_t far = uint64_t{1} << 60;
    std::memcpy(b2.data() + off_pos, &far, 8);
    EXPECT_GGUF_ERROR(b2, "past the end of the file");
    const uint64_t wrap = ~uint64_t{0} - 31;  // aligned, and would wrap around when added
    std::memcpy(b2.data() + off_pos, &wrap, 8);
    EXPECT_GGUF_ERROR(b2, "past the end of the file");
}

TEST(GgufErrors, DuplicatesAndUnknownTypes) {
    {
        GgufWriter w = valid_writer();
        w.tensors[1].name = "a";
        EXPECT_GGUF_ERROR(w.build(), "duplicate tensor name 'a'");
    }
    {
        GgufWriter w = valid_writer();
        w.kv("general.architecture", str("gpt2"));
        EXPECT_GGUF_ERROR(w.build(), "duplicate metadata key 'general.architecture'");
    }
    // (16 IQ2_XXS, 29 IQ1_M ... are known: a file using them is refused by name at load,
    // tests/python/test_gguf_block_types.py.)
    for (uint32_t t : {4u, 5u, 31u, 36u, 39u, 0xffffffffu}) {
        GgufWriter w = valid_writer();
        w.tensors[1].type = t;
        EXPECT_GGUF_ERROR(w.build(), "unknown type id " + std::to_string(t));
    }
    {
        GgufWriter w = valid_writer();
        w.kv("x", Val{static_cast<VT>(13), {0, 0, 0, 0}});
        EXPECT_GGUF_ERROR(w.build(), "unknown type 13");
    }
    {
        GgufWriter w = valid_writer();
        Val a = arr(VT::UINT8, {u8(1)});
        const uint32_t bad = 77;
        std::memcpy(a.bytes.data(), &bad, 4);
        w.kv("x", a);
        EXPECT_GGUF_ERROR(w.build(), "unknown array element type 77");
    }
    {
        GgufWriter w = valid_writer();
        w.kv("x", Val{VT::BOOL, {2}});
        EXPECT_GGUF_ERROR(w.build(), "neither 0 nor 1");
    }
    {
        Val v = arr(VT::UINT8, {u8(1)});
        for (int d = 0; d < 9; ++d) v = arr(VT::ARRAY, {v});
        GgufWriter w = valid_writer();
        w.kv("deep", v);
        EXPECT_GGUF_ERROR(w.build(), "nested too deeply");
    }
}

TEST(GgufErrors, NamesFromTheFileCannotBreakTheOneLineMessage) {
    GgufWriter w = valid_writer();
    w.kv("evil\nkey\x1b[31m", Val{static_cast<VT>(99), {}});
    EXPECT_GGUF_ERROR(w.build(), "metadata 'evil\\x0akey\\x1b[31m' has unknown type 99");
    GgufWriter w2 = valid_writer();
    w2.tensors[1].name = std::string(5000, 'n') + "\n";
    w2.tensors[1].dims = {16, 0};
    const std::string msg = error_of(w2.build());
    EXPECT_LT(msg.size(), 400u) << msg;
}

TEST(GgufErrors, BadDimensions) {
    {
        GgufWriter w = valid_writer();
        w.tensors[1].dims = {16, 1, 1, 1, 1};
        EXPECT_GGUF_ERROR(w.build(), "has 5 dimensions");
    }
    {
        GgufWriter w = valid_writer();
        w.tensors[1].dims = {};
        EXPECT_GGUF_ERROR(w.build(), "has 0 dimensions");
    }
    {
        GgufWriter w = valid_writer();
        w.tensors[1].dims = {16, 0};
        EXPECT_GGUF_ERROR(w.build(), "dimension 0");
    }
    {
        GgufWriter w = valid_writer();
        w.tensors[1].dims = {uint64_t{1} << 41};
        EXPECT_GGUF_ERROR(w.build(), "has dimension");
    }
    {
        GgufWriter w = valid_writer();
        w.tensors[1].dims = {uint64_t{1} << 40, uint64_t{1} << 40};
        EXPECT_GGUF_ERROR(w.build(), "too large");
    }
    {
        GgufWriter w = valid_writer();
        w.tensors[0].dims = {33, 2};
        EXPECT_GGUF_ERROR(w.build(), "not a multiple of the Q8_0 block size");
    }
}

// ---- real files ------------------------------------------------------------------------------

TEST(GgufRealFiles, VocabFiles) {
    const std::filesystem::path dir =
        std::filesystem::path(WARDEN_SHARED_DIR) / "testdata" / "tokenizer";
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec)) GTEST_SKIP() << dir << " not present";
    int n_files = 0;
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
        if (entry.path().extension() != ".gguf") continue;
        SCOPED_TRACE(entry.path().string());
        ++n_files;
        formats::GGUFFile f(entry.path().string());
        EXPECT_TRUE(f.version() == 2 || f.version() == 3);
        const auto tokens = f.get_string_array("tokenizer.ggml.tokens");
        EXPECT_GT(tokens.size(), 1000u);
        EXPECT_FALSE(f.get_string("tokenizer.ggml.model").empty());
        EXPECT_FALSE(f.get_string("general.architecture").empty());
        if (f.has("tokenizer.ggml.scores")) {
            EXPECT_EQ(f.get_float_array("tokenizer.ggml.scores").size(), tokens.size());
        }
        if (f.has("tokenizer.ggml.token_type")) {
            EXPECT_EQ(f.get_int_array("tokenizer.ggml.token_type").size(), tokens.size());
        }
        touch_everything(f);
    }
    EXPECT_GT(n_files, 0);
}

TEST(GgufRealFiles, SmolLM2Model) {
    const std::string path =
        std::string(WARDEN_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) GTEST_SKIP() << path << " not present";
    formats::GGUFFile f(path);
    EXPECT_EQ(f.get_string("general.architecture"), "llama");
    ASSERT_EQ(f.tensors().size(), 272u);
    const auto file_size = std::filesystem::file_size(path);
    const uint8_t* base = f.tensors().front().data - f.tensors().front().offset;
    uint64_t total = 0;
    std::vector<float> row;
    for (const auto& t : f.tensors()) {
        SCOPED_TRACE(t.name);
        EXPECT_TRUE(tensor::ggml_type_info(t.type).supported);
        EXPECT_LE(static_cast<uint64_t>(t.data - base) + t.n_bytes, file_size);
        total += t.n_bytes;
        // Every tensor's first row dequantizes to finite numbers.
        row.resize(static_cast<size_t>(t.shape[0]));
        tensor::dequantize_row(t.type, t.data, row.data(), t.shape[0]);
        for (float v : row) ASSERT_TRUE(std::isfinite(v));
    }
    EXPECT_LE(total, file_size);
    const int64_t n_layer = f.get_int("llama.block_count");
    EXPECT_EQ(n_layer, 30);
    for (const char* name : {"token_embd.weight", "output_norm.weight", "blk.0.attn_q.weight",
                             "blk.29.ffn_down.weight"})
        EXPECT_NE(f.find_tensor(name), nullptr) << name;
    const formats::GGUFTensor* emb = f.find_tensor("token_embd.weight");
    ASSERT_NE(emb, nullptr);
    EXPECT_EQ(emb->shape[0], f.get_int("llama.embedding_length"));
    EXPECT_EQ(static_cast<size_t>(emb->shape[1]),
              f.get_string_array("tokenizer.ggml.tokens").size());
    touch_everything(f);
}

}  // namespace
}  // namespace warden::model
