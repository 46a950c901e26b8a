// The KV handoff's checkpoint identity: content decides it, not the path.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "formats/checkpoint_identity.h"
#include "util/error.h"

namespace fs = std::filesystem;
using warden::formats::checkpoint_identity;

namespace {

class CheckpointIdentity : public ::testing::Test {
  protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() /
               ("warden_ckpt_id_" + std::to_string(::getpid()) + "_" +
                ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::remove_all(dir_);
        fs::create_directories(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }

    static std::vector<char> random_bytes(size_t n, uint32_t seed) {
        std::mt19937 rng(seed);
        std::vector<char> v(n);
        for (auto& c : v) c = static_cast<char>(rng());
        return v;
    }
    std::string write(const std::string& rel, const std::vector<char>& bytes) {
        const fs::path p = dir_ / rel;
        fs::create_directories(p.parent_path());
        std::ofstream(p, std::ios::binary)
            .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
        return p.string();
    }

    fs::path dir_;
};

constexpr size_t kBig = (3u << 20) + 12345;  // past the hashed 1 MiB head: sampled tail

TEST_F(CheckpointIdentity, SameBytesUnderAnotherNameAreTheSameCheckpoint) {
    const auto bytes = random_bytes(kBig, 1);
    const std::string a = write("a/model.gguf", bytes);
    const std::string b = write("b/renamed-copy.gguf", bytes);
    EXPECT_EQ(checkpoint_identity(a), checkpoint_identity(b));
    EXPECT_EQ(checkpoint_identity(a).size(), 16u);
}

TEST_F(CheckpointIdentity, SameNameAndSizeButOtherBytesDiffer) {
    auto bytes = random_bytes(kBig, 2);
    const std::string a = write("a/model.gguf", bytes);
    const std::string id = checkpoint_identity(a);
    // A byte in the head (metadata), in the first and last tail samples: each changes the id.
    for (size_t pos : {size_t{100}, size_t{1u << 20}, kBig - 1}) {
        auto changed = bytes;
        changed[pos] ^= 0x5a;
        EXPECT_NE(checkpoint_identity(write("b/model.gguf", changed)), id) << "byte " << pos;
    }
    // A different file size with the same head.
    auto longer = bytes;
    longer.push_back(0);
    EXPECT_NE(checkpoint_identity(write("c/model.gguf", longer)), id);
}

TEST_F(CheckpointIdentity, SmallFileIsHashedWhole) {
    auto bytes = random_bytes(5000, 3);
    const std::string id = checkpoint_identity(write("a/m.gguf", bytes));
    bytes[4999] ^= 1;
    EXPECT_NE(checkpoint_identity(write("b/m.gguf", bytes)), id);
    EXPECT_NE(checkpoint_identity(write("c/empty.gguf", {})), id);
}

TEST_F(CheckpointIdentity, DirectoryCoversEveryFileByName) {
    const auto cfg = random_bytes(300, 4);
    const auto weights = random_bytes(kBig, 5);
    write("hf1/config.json", cfg);
    write("hf1/model.safetensors", weights);
    // Written in the other order: the listing order does not matter.
    write("hf2/model.safetensors", weights);
    write("hf2/config.json", cfg);
    const std::string id = checkpoint_identity((dir_ / "hf1").string());
    EXPECT_EQ(checkpoint_identity((dir_ / "hf2").string()), id);
    // Another file name inside the directory, or another config: another checkpoint.
    write("hf3/config.json", cfg);
    write("hf3/model-00001-of-00001.safetensors", weights);
    EXPECT_NE(checkpoint_identity((dir_ / "hf3").string()), id);
    auto cfg2 = cfg;
    cfg2[0] ^= 1;
    write("hf4/config.json", cfg2);
    write("hf4/model.safetensors", weights);
    EXPECT_NE(checkpoint_identity((dir_ / "hf4").string()), id);
}

TEST_F(CheckpointIdentity, MissingPathIsAClearError) {
    EXPECT_THROW(checkpoint_identity((dir_ / "no-such-file.gguf").string()), warden::util::Error);
}

}  // namespace
