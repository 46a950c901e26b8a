// formats::SafetensorsModel / parse_safetensors: valid single files and sharded sets written by the
// test into a temporary directory, then truncations, random mutations and hand-made malicious
// headers (this file also runs under ASan/UBSan).
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "formats/safetensors_file.h"
#include "util/error.h"

namespace warden::model {
namespace {

using Bytes = std::vector<uint8_t>;
namespace fs = std::filesystem;

// A unique empty directory, removed with everything in it at the end of the test.
class TempDir {
  public:
    TempDir() {
        static std::atomic<int> counter{0};
        path_ = fs::temp_directory_path() / (std::string("warden_st_")
                                                 .append(std::to_string(::getpid()))
                                                 .append("_")
                                                 .append(std::to_string(counter.fetch_add(1))));
        fs::remove_all(path_);
        fs::create_directories(path_);
    }
    ~TempDir() {
        std::error_code ec;
        fs::remove_all(path_, ec);
    }
    const fs::path& path() const { return path_; }
    std::string str() const { return path_.string(); }

  private:
    fs::path path_;
};

void write_file(const fs::path& p, const Bytes& b) {
    std::ofstream f(p, std::ios::binary);
    f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}
void write_file(const fs::path& p, const std::string& s) {
    write_file(p, Bytes(s.begin(), s.end()));
}

// Wraps a header string and data section into a safetensors file.
Bytes raw_file(std::string header, const Bytes& data, bool pad = true) {
    if (pad) {
        while (header.size() % 8) header += ' ';
    }
    Bytes b(8 + header.size() + data.size());
    const uint64_t n = header.size();
    for (int k = 0; k < 8; ++k) b[static_cast<size_t>(k)] = static_cast<uint8_t>(n >> (8 * k));
    if (!header.empty()) std::memcpy(b.data() + 8, header.data(), header.size());
    if (!data.empty()) std::memcpy(b.data() + 8 + header.size(), data.data(), data.size());
    return b;
}

struct StTensor {
    std::string name, dtype;
    std::vector<int64_t> shape;
    Bytes data;
};

size_t dtype_bytes(const std::string& d) {
    if (d == "F64" || d == "I64" || d == "U64") return 8;
    if (d == "F32" || d == "I32" || d == "U32") return 4;
    if (d == "F16" || d == "BF16" || d == "I16" || d == "U16") return 2;
    return 1;
}

struct StWriter {
    std::vector<StTensor> tensors;
    std::map<std::string, std::string> metadata;

    void add(const std::string& name, const std::string& dtype, std::vector<int64_t> shape,
             uint8_t seed = 1) {
        size_t n = dtype_bytes(dtype);
        for (auto d : shape) n *= static_cast<size_t>(d);
        Bytes data(n);
        for (size_t i = 0; i < n; ++i) data[i] = static_cast<uint8_t>(seed * 31 + i);
        tensors.push_back({name, dtype, std::move(shape), std::move(data)});
    }

    Bytes build() const {
        nlohmann::json h = nlohmann::json::object();
        if (!metadata.empty()) h["__metadata__"] = metadata;
        Bytes data;
        for (const auto& t : tensors) {
            const uint64_t begin = data.size();
            data.insert(data.end(), t.data.begin(), t.data.end());
            h[t.name] = {
                {"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {begin, data.size()}}};
        }
        return raw_file(h.dump(), data);
    }
};

// Parses an exact-size heap copy so ASan sees over-reads; only util::Error may escape.
bool parses_cleanly(const Bytes& bytes, std::string* error = nullptr) {
    const std::unique_ptr<uint8_t[]> copy(bytes.empty() ? nullptr : new uint8_t[bytes.size()]);
    if (!bytes.empty()) std::memcpy(copy.get(), bytes.data(), bytes.size());
    try {
        std::map<std::string, std::string> meta;
        const auto tensors =
            formats::parse_safetensors(copy.get(), bytes.size(), "test.safetensors", &meta);
        volatile uint8_t sink = 0;
        for (const auto& t : tensors) {
            if (t.n_bytes) {
                sink = sink + t.data[0];
                sink = sink + t.data[t.n_bytes - 1];
            }
            EXPECT_GE(t.data, copy.get());
            EXPECT_LE(t.data + t.n_bytes, copy.get() + bytes.size());
            (void)t.n_elements();
        }
        return true;
    } catch (const util::Error& e) {
        const std::string msg = e.what();
        EXPECT_EQ(msg.find('\n'), std::string::npos) << "multi-line error: " << msg;
        EXPECT_NE(msg.find("test.safetensors"), std::string::npos) << msg;
        if (error) *error = msg;
        return false;
    } catch (const std::exception& e) {
        ADD_FAILURE() << "non-util::Error exception: " << e.what();
        return false;
    }
}

std::string error_of(const Bytes& b) {
    std::string msg;
    EXPECT_FALSE(parses_cleanly(b, &msg)) << "expected a parse error";
    return msg;
}

#define EXPECT_ST_ERROR(bytes, fragment)                                          \
    do {                                                                          \
        const std::string msg_ = error_of(bytes);                                 \
        EXPECT_NE(msg_.find(fragment), std::string::npos) << "message: " << msg_; \
    } while (0)

Bytes header_only(const std::string& header, size_t data_bytes = 64) {
    return raw_file(header, Bytes(data_bytes, 0xab));
}

StWriter all_dtypes_writer() {
    StWriter w;
    w.metadata = {{"format", "pt"}, {"note", "h\xc3\xa9"}};
    const char* dtypes[] = {"F64", "F32",  "F16",     "BF16",    "I64", "I32", "I16", "I8",
                            "U8",  "BOOL", "F8_E4M3", "F8_E5M2", "U16", "U32", "U64"};
    uint8_t seed = 1;
    for (const char* d : dtypes) w.add(std::string("t.") + d, d, {2, 3}, seed++);
    w.add("scalar", "F32", {}, 50);
    w.add("empty", "BF16", {0, 4}, 51);
    w.add("vec", "F16", {7}, 52);
    return w;
}

void check_matches(const formats::SafetensorsModel& m, const StWriter& w) {
    for (const auto& want : w.tensors) {
        SCOPED_TRACE(want.name);
        const formats::SafetensorsTensor* t = m.find(want.name);
        ASSERT_NE(t, nullptr);
        EXPECT_EQ(t->name, want.name);
        EXPECT_EQ(t->dtype, want.dtype);
        EXPECT_EQ(t->shape, want.shape);
        int64_t n = 1;
        for (auto d : want.shape) n *= d;
        EXPECT_EQ(t->n_elements(), n);
        ASSERT_EQ(t->n_bytes, want.data.size());
        if (t->n_bytes) {
            EXPECT_EQ(0, std::memcmp(t->data, want.data.data(), want.data.size()));
        }
    }
}

// ---- valid files -----------------------------------------------------------------------------

TEST(SafetensorsFile, SingleFileEveryDtype) {
    TempDir dir;
    const StWriter w = all_dtypes_writer();
    write_file(dir.path() / "model.safetensors", w.build());
    const formats::SafetensorsModel m = formats::SafetensorsModel::open_dir(dir.str());
    EXPECT_EQ(m.tensors().size(), w.tensors.size());
    check_matches(m, w);
    EXPECT_EQ(m.metadata(), w.metadata);
    EXPECT_EQ(m.find("nope"), nullptr);
    EXPECT_EQ(m.find("scalar")->n_elements(), 1);
    EXPECT_EQ(m.find("empty")->n_bytes, 0u);

    // Explicit file list, and moves keep the tensors' data pointers valid.
    formats::SafetensorsModel m2({(dir.path() / "model.safetensors").string()});
    formats::SafetensorsModel m3 = std::move(m2);
    check_matches(m3, w);
}

TEST(SafetensorsFile, InMemoryParse) {
    const StWriter w = all_dtypes_writer();
    const Bytes b = w.build();
    std::map<std::string, std::string> meta;
    const auto tensors = formats::parse_safetensors(b.data(), b.size(), "mem", &meta);
    EXPECT_EQ(tensors.size(), w.tensors.size());
    EXPECT_EQ(meta, w.metadata);
    EXPECT_EQ(formats::parse_safetensors(b.data(), b.size(), "mem", nullptr).size(),
              w.tensors.size());
    // No tensors at all, and tensors with holes between them, are fine.
    EXPECT_TRUE(formats::parse_safetensors(header_only("{}").data(), header_only("{}").size(),
                                           "mem", nullptr)
                    .empty());
    const Bytes holes = header_only(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[10,12]},)"
                                    R"("b":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})");
    const auto t2 = formats::parse_safetensors(holes.data(), holes.size(), "mem", nullptr);
    ASSERT_EQ(t2.size(), 2u);
}

TEST(SafetensorsFile, ShardedSet) {
    TempDir dir;
    StWriter s1, s2;
    s1.metadata = {{"format", "pt"}};
    s2.metadata = {{"format", "other"}};
    s1.add("model.embed_tokens.weight", "BF16", {16, 8}, 1);
    s1.add("model.layers.0.mlp.weight", "F32", {8, 4}, 2);
    s2.add("model.layers.1.mlp.weight", "F16", {8, 4}, 3);
    s2.add("lm_head.weight", "BF16", {16, 8}, 4);
    s2.add("extra.not_in_index", "I8", {3}, 5);
    write_file(dir.path() / "model-00001-of-00002.safetensors", s1.build());
    write_file(dir.path() / "model-00002-of-00002.safetensors", s2.build());
    nlohmann::json index = {{"metadata", {{"total_size", 1234}}},
                            {"weight_map",
                             {{"model.embed_tokens.weight", "model-00001-of-00002.safetensors"},
                              {"model.layers.0.mlp.weight", "model-00001-of-00002.safetensors"},
                              {"model.layers.1.mlp.weight", "model-00002-of-00002.safetensors"},
                              {"lm_head.weight", "model-00002-of-00002.safetensors"}}}};
    write_file(dir.path() / "model.safetensors.index.json", index.dump(2));
    const formats::SafetensorsModel m = formats::SafetensorsModel::open_dir(dir.str());
    EXPECT_EQ(m.tensors().size(), 5u);
    check_matches(m, s1);
    check_matches(m, s2);
    EXPECT_EQ(m.metadata(), s1.metadata);  // the first shard's

    // A single model.safetensors wins over an index.
    StWriter single;
    single.add("only", "U8", {4});
    write_file(dir.path() / "model.safetensors", single.build());
    const formats::SafetensorsModel m2 = formats::SafetensorsModel::open_dir(dir.str());
    ASSERT_EQ(m2.tensors().size(), 1u);
    EXPECT_EQ(m2.tensors()[0].name, "only");
}

// ---- directory and index errors ---------------------------------------------------------------

std::string open_dir_error(const std::string& dir) {
    try {
        formats::SafetensorsModel::open_dir(dir);
    } catch (const util::Error& e) {
        const std::string msg = e.what();
        EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
        return msg;
    } catch (const std::exception& e) {
        ADD_FAILURE() << "non-util::Error exception: " << e.what();
        return "";
    }
    ADD_FAILURE() << "open_dir(" << dir << ") succeeded";
    return "";
}

#define EXPECT_DIR_ERROR(dir, fragment)                                           \
    do {                                                                          \
        const std::string msg_ = open_dir_error(dir);                             \
        EXPECT_NE(msg_.find(fragment), std::string::npos) << "message: " << msg_; \
    } while (0)

struct ShardFixture {
    TempDir dir;
    ShardFixture() {
        StWriter a, b;
        a.add("x", "F32", {4}, 1);
        b.add("y", "F32", {4}, 2);
        write_file(dir.path() / "a.safetensors", a.build());
        write_file(dir.path() / "b.safetensors", b.build());
    }
    void index(const std::string& text) {
        write_file(dir.path() / "model.safetensors.index.json", text);
    }
};

TEST(SafetensorsDir, MissingFilesAndBadIndex) {
    {
        TempDir empty;
        EXPECT_DIR_ERROR(empty.str(), "neither model.safetensors nor model.safetensors.index.json");
    }
    EXPECT_DIR_ERROR("/nonexistent/warden/dir", "/nonexistent/warden/dir");
    ShardFixture f;
    f.index("");
    EXPECT_DIR_ERROR(f.dir.str(), "not valid JSON");
    f.index("[1,2]");
    EXPECT_DIR_ERROR(f.dir.str(), "index is not a JSON object");
    f.index(R"({"metadata":{}})");
    EXPECT_DIR_ERROR(f.dir.str(), "no 'weight_map' object");
    f.index(R"({"weight_map":[]})");
    EXPECT_DIR_ERROR(f.dir.str(), "no 'weight_map' object");
    f.index(R"({"weight_map":{}})");
    EXPECT_DIR_ERROR(f.dir.str(), "weight_map is empty");
    f.index(R"({"weight_map":{"x":1}})");
    EXPECT_DIR_ERROR(f.dir.str(), "weight_map entry 'x' is not a string");
    f.index(R"({"weight_map":{"x":"a.safetensors","x":"b.safetensors"}})");
    EXPECT_DIR_ERROR(f.dir.str(), "duplicate key 'x'");
    f.index(R"({"weight_map":{"x":"a.safetensors","y":"c.safetensors"}})");
    EXPECT_DIR_ERROR(f.dir.str(), "c.safetensors");
}

TEST(SafetensorsDir, ShardNamesCannotEscapeTheDirectory) {
    ShardFixture f;
    // A real file one level up, which an unchecked '../' would happily open.
    StWriter outside;
    outside.add("x", "F32", {4});
    const fs::path up =
        f.dir.path().parent_path() / (f.dir.path().filename().string() + "_outside.safetensors");
    write_file(up, outside.build());
    for (const std::string& bad :
         {std::string("../").append(up.filename().string()), up.string(), std::string(".."),
          std::string("."), std::string("sub/a.safetensors"), std::string("..\\a.safetensors"),
          std::string(""), std::string("a.safetensors\0x", 15)}) {
        nlohmann::json index = {{"weight_map", {{"x", bad}}}};
        f.index(index.dump());
        EXPECT_DIR_ERROR(f.dir.str(), "outside the directory");
    }
    fs::remove(up);
}

TEST(SafetensorsDir, EveryIndexedTensorMustBeInItsShard) {
    ShardFixture f;
    f.index(R"({"weight_map":{"x":"a.safetensors","y":"b.safetensors"}})");
    EXPECT_EQ(formats::SafetensorsModel::open_dir(f.dir.str()).tensors().size(), 2u);
    f.index(R"({"weight_map":{"x":"a.safetensors","y":"b.safetensors","z":"b.safetensors"}})");
    EXPECT_DIR_ERROR(f.dir.str(), "tensor 'z' listed in the index is missing");
    f.index(R"({"weight_map":{"x":"b.safetensors","y":"b.safetensors"}})");
    EXPECT_DIR_ERROR(f.dir.str(), "tensor 'x' listed in the index is missing");
    f.index(R"({"weight_map":{"x":"a.safetensors","y":"a.safetensors","z":"b.safetensors"}})");
    EXPECT_DIR_ERROR(f.dir.str(), "tensor 'y' listed in the index is in another shard");
    // The same tensor in two shards.
    StWriter dup;
    dup.add("x", "F32", {4}, 9);
    write_file(f.dir.path() / "b.safetensors", dup.build());
    f.index(R"({"weight_map":{"x":"a.safetensors","y":"b.safetensors"}})");
    EXPECT_DIR_ERROR(f.dir.str(), "tensor 'x' is also in");
    // And a corrupt shard names itself.
    write_file(f.dir.path() / "b.safetensors", std::string("garbage"));
    EXPECT_DIR_ERROR(f.dir.str(), "b.safetensors");
    EXPECT_THROW(formats::SafetensorsModel({(f.dir.path() / "a.safetensors").string(),
                                            (f.dir.path() / "a.safetensors").string()}),
                 util::Error);
}

// ---- malicious headers -----------------------------------------------------------------------

// (Strings are built with += throughout: GCC 12 reports false -Wrestrict positives for
// "literal" + std::string chains.)
std::string tensor_json(const std::string& name, const std::string& dtype, const std::string& shape,
                        const std::string& offsets) {
    std::string s = "\"";
    s += name;
    s += "\":{\"dtype\":";
    s += dtype;
    s += ",\"shape\":";
    s += shape;
    s += ",\"data_offsets\":";
    s += offsets;
    s += "}";
    return s;
}

// A JSON object from "key":value entries.
std::string obj(std::initializer_list<std::string> entries) {
    std::string s = "{";
    for (const auto& e : entries) {
        if (s.size() > 1) s += ",";
        s += e;
    }
    s += "}";
    return s;
}

TEST(SafetensorsErrors, HeaderLength) {
    EXPECT_ST_ERROR(Bytes{}, "too short");
    EXPECT_ST_ERROR(Bytes(7, 0), "too short");
    EXPECT_ST_ERROR(Bytes(8, 0), "empty");
    auto with_len = [](uint64_t len) {
        Bytes b = header_only("{}", 0);
        for (int k = 0; k < 8; ++k)
            b[static_cast<size_t>(k)] = static_cast<uint8_t>(len >> (8 * k));
        return b;
    };
    EXPECT_ST_ERROR(with_len(9), "header length 9 exceeds the file size 16");
    EXPECT_ST_ERROR(with_len(100'000'000), "exceeds the file size");
    // Absurd lengths are refused by the 100 MB limit whatever the file size.
    for (uint64_t len : {uint64_t{100'000'001}, uint64_t{1} << 32, uint64_t{1} << 63, ~uint64_t{0},
                         ~uint64_t{0} - 7})
        EXPECT_ST_ERROR(with_len(len), "is larger than the limit");
}

TEST(SafetensorsErrors, NotAJsonObject) {
    EXPECT_ST_ERROR(header_only("[]"), "does not start with '{'");
    EXPECT_ST_ERROR(header_only("42"), "does not start with '{'");
    EXPECT_ST_ERROR(header_only(" {}"), "does not start with '{'");
    EXPECT_ST_ERROR(header_only("{"), "not valid JSON");
    EXPECT_ST_ERROR(header_only("{\"a\":}"), "not valid JSON");
    EXPECT_ST_ERROR(header_only("{} {}"), "not valid JSON");
    EXPECT_ST_ERROR(raw_file(std::string("{}\0\0\0\0\0\0", 8), {}, false), "NUL byte");
    EXPECT_ST_ERROR(raw_file(std::string("{}\0{\"a\":5}", 10), {}, false), "NUL byte");
    std::string deep = "{\"a\":";
    for (int i = 0; i < 100000; ++i) deep += "[";
    EXPECT_ST_ERROR(header_only(deep), "nested too deeply");
    EXPECT_ST_ERROR(header_only("{\"a\":[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]}"),
                    "nested too deeply");
}

TEST(SafetensorsErrors, TensorEntryFields) {
    const std::string ok_shape = "[4]", ok_off = "[0,4]";
    EXPECT_ST_ERROR(header_only("{\"t\":5}"), "tensor 't' is not a JSON object");
    EXPECT_ST_ERROR(header_only("{\"t\":{\"shape\":[4],\"data_offsets\":[0,4]}}"),
                    "no string 'dtype'");
    EXPECT_ST_ERROR(header_only("{\"t\":{\"dtype\":\"U8\",\"data_offsets\":[0,4]}}"),
                    "no array 'shape'");
    EXPECT_ST_ERROR(header_only("{\"t\":{\"dtype\":\"U8\",\"shape\":[4]}}"),
                    "no 'data_offsets' pair");
    EXPECT_ST_ERROR(header_only(obj({tensor_json("t", "7", ok_shape, ok_off)})),
                    "no string 'dtype'");
    EXPECT_ST_ERROR(header_only(obj({tensor_json("t", "\"U8\"", "4", ok_off)})),
                    "no array 'shape'");
    EXPECT_ST_ERROR(header_only(obj({tensor_json("t", "\"U8\"", "{}", ok_off)})),
                    "no array 'shape'");
    for (const char* shape : {"[-1]", "[1.0]", "[\"4\"]", "[true]", "[null]", "[[4]]", "[4,-4]"})
        EXPECT_ST_ERROR(header_only(obj({tensor_json("t", "\"U8\"", shape, ok_off)})),
                        "shape entry that is not a non-negative integer");
    for (const char* off : {"[0]", "[0,4,8]", "4", "{}", "[]"})
        EXPECT_ST_ERROR(header_only(obj({tensor_json("t", "\"U8\"", ok_shape, off)})),
                        "no 'data_offsets' pair");
    for (const char* off :
         {"[-1,3]", "[0,4.0]", "[\"0\",4]", "[0,null]", "[0,18446744073709551616]"})
        EXPECT_ST_ERROR(header_only(obj({tensor_json("t", "\"U8\"", ok_shape, off)})),
                        "not non-negative integers");
    EXPECT_ST_ERROR(header_only(obj({tensor_json("t", "\"U8\"", ok_shape, "[4,0]")})), "reversed");
    EXPECT_ST_ERROR(
        header_only("{\"t\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4],\"x\":1}}"),
        "unknown field 'x'");
    for (const char* dtype : {"\"F128\"", "\"f32\"", "\"\"", "\"Q4_0\"", "\"F8_E8M0\""})
        EXPECT_ST_ERROR(header_only(obj({tensor_json("t", dtype, ok_shape, ok_off)})),
                        "unknown dtype");
}

TEST(SafetensorsErrors, SizesOffsetsOverlapsDuplicates) {
    // Wrong size for the dtype.
    EXPECT_ST_ERROR(header_only(obj({tensor_json("t", "\"F32\"", "[2]", "[0,6]")})),
                    "has 6 bytes but F32 x 2 elements needs 8");
    EXPECT_ST_ERROR(header_only(obj({tensor_json("t", "\"BF16\"", "[2,3]", "[0,6]")})), "needs 12");
    EXPECT_ST_ERROR(header_only(obj({tensor_json("t", "\"U8\"", "[0]", "[0,1]")})), "needs 0");
    // Offsets past the end of the data section (64 bytes here).
    EXPECT_ST_ERROR(header_only(obj({tensor_json("t", "\"U8\"", "[8]", "[60,68]")})),
                    "past the end");
    EXPECT_ST_ERROR(header_only(obj({tensor_json("t", "\"U8\"", "[0]", "[65,65]")})),
                    "past the end");
    EXPECT_ST_ERROR(header_only(obj({tensor_json("t", "\"F64\"", "[36028797018963968]",
                                                 "[0,18446744073709551615]")})),
                    "too large");
    EXPECT_ST_ERROR(header_only(obj({tensor_json("t", "\"U8\"", "[1]",
                                                 "[18446744073709551614,18446744073709551615]")})),
                    "past the end");
    // Shape products that overflow.
    EXPECT_ST_ERROR(header_only(obj({tensor_json("t", "\"U8\"",
                                                 "[4294967296,4294967296,4294967296]", "[0,4]")})),
                    "too large");
    EXPECT_ST_ERROR(
        header_only(obj({tensor_json("t", "\"U8\"", "[18446744073709551615]", "[0,4]")})),
        "has dimension");
    // A zero dimension makes the rest irrelevant but must not be divided by.
    EXPECT_TRUE(parses_cleanly(
        header_only(obj({tensor_json("t", "\"F32\"", "[0,72057594037927936]", "[0,0]")}))));
    // Overlaps.
    EXPECT_ST_ERROR(header_only(obj({tensor_json("a", "\"U8\"", "[8]", "[0,8]"),
                                     tensor_json("b", "\"U8\"", "[8]", "[4,12]")})),
                    "overlap");
    EXPECT_ST_ERROR(header_only(obj({tensor_json("a", "\"U8\"", "[8]", "[0,8]"),
                                     tensor_json("b", "\"U8\"", "[8]", "[0,8]")})),
                    "overlap");
    EXPECT_ST_ERROR(header_only(obj({tensor_json("a", "\"U8\"", "[32]", "[0,32]"),
                                     tensor_json("b", "\"U8\"", "[2]", "[10,12]")})),
                    "overlap");
    // Adjacent and empty tensors do not overlap.
    EXPECT_TRUE(parses_cleanly(header_only(obj({tensor_json("a", "\"U8\"", "[8]", "[0,8]"),
                                                tensor_json("b", "\"U8\"", "[8]", "[8,16]"),
                                                tensor_json("c", "\"U8\"", "[0]", "[4,4]")}))));
    // Duplicate names (the JSON parser alone would keep the last one silently).
    EXPECT_ST_ERROR(header_only(obj({tensor_json("a", "\"U8\"", "[8]", "[0,8]"),
                                     tensor_json("a", "\"U8\"", "[8]", "[8,16]")})),
                    "duplicate key 'a'");
    EXPECT_ST_ERROR(
        header_only(
            "{\"t\":{\"dtype\":\"U8\",\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,4]}}"),
        "duplicate key 'dtype'");
}

TEST(SafetensorsErrors, Metadata) {
    EXPECT_ST_ERROR(header_only("{\"__metadata__\":[]}"), "__metadata__ is not a JSON object");
    EXPECT_ST_ERROR(header_only("{\"__metadata__\":{\"a\":1}}"),
                    "__metadata__ value 'a' is not a string");
    EXPECT_ST_ERROR(header_only("{\"__metadata__\":{\"a\":\"x\"},\"__metadata__\":{}}"),
                    "duplicate key");
    EXPECT_ST_ERROR(header_only("{\"evil\\nname\":5}"),
                    "tensor 'evil\\x0aname' is not a JSON object");
}

// ---- truncations and mutations ---------------------------------------------------------------

TEST(SafetensorsRobustness, EveryTruncationThrows) {
    StWriter w = all_dtypes_writer();
    w.tensors.erase(w.tensors.begin() + 16);  // "empty": keep the last tensor non-empty...
    const Bytes full = w.build();
    ASSERT_TRUE(parses_cleanly(full));
    for (size_t len = 0; len < full.size(); ++len) {
        const Bytes prefix(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(len));
        EXPECT_FALSE(parses_cleanly(prefix))
            << "prefix of " << len << " bytes parsed";  // ...ending at EOF
    }
}

TEST(SafetensorsRobustness, RandomMutationsNeverCrash) {
    StWriter w;
    w.metadata = {{"format", "pt"}};
    w.add("a", "F32", {2, 3});
    w.add("b", "BF16", {5});
    w.add("c", "U8", {1});
    w.add("d", "I64", {0});
    w.add("e", "F16", {4});
    const Bytes full = w.build();
    const size_t header_end =
        8 + (static_cast<size_t>(full[0]) | static_cast<size_t>(full[1]) << 8);
    const char interesting[] = "{}[]\",:-0123456789eE.\\ntfu ";
    std::mt19937_64 rng(777);
    int parsed = 0;
    const int kIterations = 6000;
    for (int it = 0; it < kIterations; ++it) {
        Bytes m = full;
        const int n_edits = 1 + static_cast<int>(rng() % 3);
        for (int e = 0; e < n_edits && !m.empty(); ++e) {
            const size_t limit = rng() % 8 == 0 ? m.size() : std::min(m.size(), header_end);
            const size_t pos = rng() % limit;
            switch (rng() % 6) {
                case 0:
                    m[pos] ^= static_cast<uint8_t>(1u << (rng() % 8));
                    break;
                case 1:
                    m[pos] = static_cast<uint8_t>(rng());
                    break;
                case 2:
                    m[pos] = static_cast<uint8_t>(interesting[rng() % (sizeof interesting - 1)]);
                    break;
                case 3:
                    m.erase(m.begin() + static_cast<std::ptrdiff_t>(pos));
                    break;
                case 4:
                    m.insert(m.begin() + static_cast<std::ptrdiff_t>(pos),
                             static_cast<uint8_t>(interesting[rng() % (sizeof interesting - 1)]));
                    break;
                case 5:
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
    EXPECT_GT(parsed, 0);
    EXPECT_LT(parsed, kIterations);
}

}  // namespace
}  // namespace warden::model
