#include "formats/checkpoint_identity.h"

#include <xxhash.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <vector>

#include "util/error.h"

namespace warden::formats {

namespace {

using util::Error;

constexpr uint64_t kHeadBytes = 1 << 20;
constexpr uint64_t kSampleBytes = 4096;
constexpr int kSamples = 64;

void hash_bytes(XXH3_state_t* st, const void* p, size_t n) {
    if (XXH3_64bits_update(st, p, n) != XXH_OK) throw Error("checkpoint identity: hash failed");
}

void hash_file(XXH3_state_t* st, const std::filesystem::path& file) {
    std::error_code ec;
    const uint64_t size = std::filesystem::file_size(file, ec);
    if (ec) throw Error("checkpoint identity: cannot stat " + file.string() + ": " + ec.message());
    std::ifstream in(file, std::ios::binary);
    if (!in) throw Error("checkpoint identity: cannot open " + file.string());
    hash_bytes(st, &size, sizeof size);
    std::vector<char> buf(static_cast<size_t>(std::min(size, kHeadBytes)));
    auto read_at = [&](uint64_t off, size_t n) {
        in.seekg(static_cast<std::streamoff>(off));
        if (!in.read(buf.data(), static_cast<std::streamsize>(n)))
            throw Error("checkpoint identity: cannot read " + file.string());
        hash_bytes(st, buf.data(), n);
    };
    read_at(0, buf.size());
    if (size <= kHeadBytes) return;
    // Samples spread evenly over the bytes after the head, the last one ending at the file's end.
    const uint64_t rest = size - kHeadBytes;
    const uint64_t n = std::min(kSampleBytes, rest);
    for (int i = 0; i < kSamples; ++i) {
        const uint64_t off = kHeadBytes + (rest - n) * static_cast<uint64_t>(i) / (kSamples - 1);
        read_at(off, static_cast<size_t>(n));
    }
}

}  // namespace

std::string checkpoint_identity(const std::string& path) {
    namespace fs = std::filesystem;
    std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> st(XXH3_createState(),
                                                                &XXH3_freeState);
    if (!st || XXH3_64bits_reset(st.get()) != XXH_OK)
        throw Error("checkpoint identity: hash state");
    std::error_code ec;
    if (fs::is_directory(path, ec)) {
        std::vector<fs::path> files;
        for (const auto& entry : fs::directory_iterator(path, ec)) {
            std::error_code type_ec;
            if (entry.is_regular_file(type_ec)) files.push_back(entry.path());
        }
        if (ec) throw Error("checkpoint identity: cannot list " + path + ": " + ec.message());
        std::sort(files.begin(), files.end());
        for (const auto& f : files) {
            const std::string name = f.filename().string();
            hash_bytes(st.get(), name.data(), name.size() + 1);  // the NUL separates names
            hash_file(st.get(), f);
        }
    } else {
        hash_file(st.get(), path);
    }
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx",
                  static_cast<unsigned long long>(XXH3_64bits_digest(st.get())));
    return hex;
}

}  // namespace warden::formats
