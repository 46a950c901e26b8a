// Prefetching a checkpoint into the page cache before the loader's mappings read it: the whole
// file, not only the kernel's first readahead window (POSIX_FADV_WILLNEED reads at most one
// window per call), and no more than the budget.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "util/mapped_file.h"

using namespace warden::util;
namespace fs = std::filesystem;

namespace {

struct TempFile {
    std::string path;
    TempFile(const std::string& name, uint64_t bytes)
        : path((fs::temp_directory_path() /
                ("warden_prefetch_" + std::to_string(::getpid()) + "_" + name))
                   .string()) {
        std::ofstream f(path, std::ios::binary);
        std::vector<char> block(1 << 20);
        for (size_t i = 0; i < block.size(); ++i) block[i] = static_cast<char>(i * 131 + 7);
        for (uint64_t left = bytes; left > 0;) {
            const auto n = static_cast<std::streamsize>(std::min<uint64_t>(left, block.size()));
            f.write(block.data(), n);
            left -= static_cast<uint64_t>(n);
        }
    }
    ~TempFile() { std::remove(path.c_str()); }
};

// The fraction of the pages of bytes [from, from + n) of the file in the page cache (mincore on a
// mapping of it); from: a multiple of the page size.
double resident_fraction(const MappedFile& m, size_t from = 0, size_t n = SIZE_MAX) {
    const long page = ::sysconf(_SC_PAGESIZE);
    n = std::min(n, m.size() - from);
    const size_t pages = (n + static_cast<size_t>(page) - 1) / static_cast<size_t>(page);
    std::vector<unsigned char> vec(pages);
    if (::mincore(const_cast<uint8_t*>(m.data()) + from, n, vec.data()) != 0) return -1.0;
    size_t in = 0;
    for (unsigned char v : vec) in += v & 1;
    return static_cast<double>(in) / static_cast<double>(pages);
}

// resident_fraction once the background reads have completed: polled for at most 5 s until every
// page of the range is in.
double resident_fraction_after_reads(const MappedFile& m, size_t from = 0, size_t n = SIZE_MAX) {
    double frac = 0.0;
    for (int i = 0; i < 200 && frac < 1.0; ++i) {
        frac = resident_fraction(m, from, n);
        if (frac < 1.0) std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    return frac;
}

// Drops the file's clean pages from the page cache (written back first).
void evict(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
}

}  // namespace

TEST(Prefetch, AsksForTheWholeRangeInChunksUpToTheBudgetAndTheFilesEnd) {
    const uint64_t size = 3 * kPrefetchChunk + 5;
    TempFile f("sizes", size);
    EXPECT_EQ(prefetch_range({f.path}, UINT64_MAX), size);
    EXPECT_EQ(prefetch_range({f.path}, kPrefetchChunk + 1), kPrefetchChunk + 1);
    EXPECT_EQ(prefetch_range({f.path}, 0), 0u);
    EXPECT_EQ(prefetch_range({f.path + ".missing"}, UINT64_MAX), 0u);
    EXPECT_EQ(prefetch_range({f.path, 7, 2 * kPrefetchChunk}, UINT64_MAX), 2 * kPrefetchChunk);
    EXPECT_EQ(prefetch_range({f.path, 2 * kPrefetchChunk, UINT64_MAX}, UINT64_MAX),
              kPrefetchChunk + 5);
    EXPECT_EQ(prefetch_range({f.path, size - 3, 100}, UINT64_MAX), 3u);
    EXPECT_EQ(prefetch_range({f.path, size, 100}, UINT64_MAX), 0u);
    EXPECT_EQ(prefetch_range({f.path, size + 10, 100}, UINT64_MAX), 0u);
}

TEST(Prefetch, ReadsEveryPageOfAFileLargerThanOneReadaheadWindow) {
    // Larger than any device's readahead window warden is likely to meet (read_ahead_kb is 128
    // KiB by default and a few MiB on virtual disks): one WILLNEED call for the whole range
    // would leave most of it unread.
    TempFile f("whole", 48ull << 20);
    MappedFile m(f.path);
    evict(f.path);
    if (resident_fraction(m) > 0.1)
        GTEST_SKIP() << "this filesystem keeps the file's pages in memory (tmpfs?), so there is "
                        "nothing to prefetch";
    EXPECT_EQ(prefetch_range({f.path}, UINT64_MAX), m.size());
    EXPECT_EQ(resident_fraction_after_reads(m), 1.0);
}

TEST(Prefetch, ReadsARangeAndNotTheBytesBeforeIt) {
    // The loader asks for the bytes it reads first (scales, a head it converts) before the rest.
    TempFile f("range", 48ull << 20);
    MappedFile m(f.path);
    evict(f.path);
    if (resident_fraction(m) > 0.1)
        GTEST_SKIP() << "this filesystem keeps the file's pages in memory (tmpfs?), so there is "
                        "nothing to prefetch";
    constexpr size_t kFrom = 24ull << 20, kLen = 16ull << 20;
    EXPECT_EQ(prefetch_range({f.path, kFrom, kLen}, UINT64_MAX), kLen);
    EXPECT_EQ(resident_fraction_after_reads(m, kFrom, kLen), 1.0);
    EXPECT_LT(resident_fraction(m, 0, 16ull << 20), 0.5);
}

TEST(Prefetch, InTheBackgroundReadsEveryRangeOfEveryFileInTurn) {
    // The background thread keeps one file open across consecutive ranges of it, and opens the
    // next file when a range lies in another.
    TempFile a("multi_a", 8ull << 20), b("multi_b", 8ull << 20);
    MappedFile ma(a.path), mb(b.path);
    evict(a.path);
    evict(b.path);
    if (resident_fraction(ma) > 0.1 || resident_fraction(mb) > 0.1)
        GTEST_SKIP() << "this filesystem keeps the file's pages in memory (tmpfs?), so there is "
                        "nothing to prefetch";
    constexpr uint64_t kHalf = 4ull << 20;
    prefetch_in_background(std::vector<FileRange>{
        {a.path, kHalf, kHalf}, {b.path, 0, kHalf}, {b.path, kHalf, kHalf}, {a.path, 0, kHalf}});
    EXPECT_EQ(resident_fraction_after_reads(ma), 1.0);
    EXPECT_EQ(resident_fraction_after_reads(mb), 1.0);
}
