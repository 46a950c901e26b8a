#pragma once
// Helpers shared by the tokenizer tests.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "util/error.h"

namespace warden::tokenizer::testing {

inline std::string shared_dir() {
    return WARDEN_SHARED_DIR;
}

// Expects `fn` to throw util::Error whose message contains `needle`.
template <typename Fn>
void expect_error(Fn&& fn, const std::string& needle) {
    try {
        fn();
        ADD_FAILURE() << "no error; expected one mentioning '" << needle << "'";
    } catch (const util::Error& e) {
        EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "message: " << e.what();
    }
}

// A fresh directory under the system temp dir, removed with everything in it on destruction.
class TempDir {
  public:
    TempDir() {
        path_ =
            std::filesystem::temp_directory_path() /
            ("warden_tok_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
        std::filesystem::create_directories(path_);
    }
    ~TempDir() {
        std::error_code ec;
        std::filesystem::remove_all(path_, ec);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    void write(const std::string& name, const std::string& content) const {
        std::ofstream(path_ / name, std::ios::binary) << content;
    }
    std::string str() const { return path_.string(); }

  private:
    static inline int counter_ = 0;
    std::filesystem::path path_;
};
inline std::string source_dir() {
    return WARDEN_SOURCE_DIR;
}

inline bool read_file(const std::string& path, std::string& out) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return false;
    std::stringstream ss;
    ss << in.rdbuf();
    out = ss.str();
    return true;
}

// Hex dump for readable failure messages.
inline std::string escaped(const std::string& s) {
    std::string out;
    for (unsigned char c : s) {
        if (c >= 0x20 && c < 0x7F && c != '\\') {
            out += static_cast<char>(c);
        } else {
            char buf[8];
            std::snprintf(buf, sizeof(buf), "\\x%02X", c);
            out += buf;
        }
    }
    return out;
}

// Minimal GGUF v3 writer (metadata only) for building vocabularies in memory.
class GgufBuilder {
  public:
    GgufBuilder& str(const std::string& key, const std::string& v) {
        key_(key, 8);
        s_(v);
        ++n_;
        return *this;
    }
    GgufBuilder& u32(const std::string& key, uint32_t v) {
        key_(key, 4);
        put(v);
        ++n_;
        return *this;
    }
    GgufBuilder& i32(const std::string& key, int32_t v) {
        key_(key, 5);
        put(v);
        ++n_;
        return *this;
    }
    GgufBuilder& boolean(const std::string& key, bool v) {
        key_(key, 7);
        put(static_cast<uint8_t>(v));
        ++n_;
        return *this;
    }
    GgufBuilder& strs(const std::string& key, const std::vector<std::string>& v) {
        key_(key, 9);
        put(uint32_t{8});
        put(static_cast<uint64_t>(v.size()));
        for (const auto& s : v) s_(s);
        ++n_;
        return *this;
    }
    GgufBuilder& i32s(const std::string& key, const std::vector<int32_t>& v) {
        key_(key, 9);
        put(uint32_t{5});
        put(static_cast<uint64_t>(v.size()));
        for (auto x : v) put(x);
        ++n_;
        return *this;
    }
    GgufBuilder& f32s(const std::string& key, const std::vector<float>& v) {
        key_(key, 9);
        put(uint32_t{6});
        put(static_cast<uint64_t>(v.size()));
        for (auto x : v) put(x);
        ++n_;
        return *this;
    }
    std::vector<uint8_t> bytes() const {
        std::vector<uint8_t> out;
        auto app = [&](const void* p, size_t n) {
            const auto* b = static_cast<const uint8_t*>(p);
            out.insert(out.end(), b, b + n);
        };
        const uint32_t magic = 0x46554747u, version = 3;
        const uint64_t n_tensors = 0;
        app(&magic, 4);
        app(&version, 4);
        app(&n_tensors, 8);
        app(&n_, 8);
        out.insert(out.end(), body_.begin(), body_.end());
        return out;
    }

  private:
    template <typename T>
    void put(T v) {
        const auto* b = reinterpret_cast<const uint8_t*>(&v);
        body_.insert(body_.end(), b, b + sizeof(T));
    }
    void s_(const std::string& s) {
        put(static_cast<uint64_t>(s.size()));
        body_.insert(body_.end(), s.begin(), s.end());
    }
    void key_(const std::string& k, uint32_t type) {
        s_(k);
        put(type);
    }
    std::vector<uint8_t> body_;
    uint64_t n_ = 0;
};

}  // namespace warden::tokenizer::testing
