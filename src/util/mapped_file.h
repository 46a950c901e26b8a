#pragma once
// A read-only memory-mapped file. Model weights are mapped, never read into heap buffers, so
// loading a multi-GB checkpoint costs page-cache residency only.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace warden::util {

class MappedFile {
  public:
    explicit MappedFile(const std::string& path);  // throws Error naming the path on failure
    ~MappedFile();
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;
    MappedFile(MappedFile&& other) noexcept;
    MappedFile& operator=(MappedFile&& other) noexcept;

    const uint8_t* data() const { return data_; }
    size_t size() const { return size_; }
    const std::string& path() const { return path_; }

  private:
    std::string path_;
    const uint8_t* data_ = nullptr;
    size_t size_ = 0;
};

// A byte range of a file: [offset, offset + length), cut at the file's end.
struct FileRange {
    std::string path;
    uint64_t offset = 0;
    uint64_t length = UINT64_MAX;
};

// Asks the kernel to read the ranges into the page cache, one after another in the order given, on
// a thread of its own (POSIX_FADV_WILLNEED, one readahead window per call), and returns at once.
// For a loader about to read those bytes through mappings: the disk then streams them while the
// loader parses and checks, instead of one readahead window per page fault of each loading
// thread, and bytes the loader needs first can be asked for first. At most half of the memory
// available at the call is asked for. Does nothing for pages already cached; errors (a file gone
// meanwhile) are ignored, as the mappings' own reads report them.
void prefetch_in_background(std::vector<FileRange> ranges);
// The same for whole files, one after another.
void prefetch_in_background(const std::vector<std::string>& paths);

// The work of prefetch_in_background for one range, on the calling thread: asks for its first
// budget bytes in chunks of kPrefetchChunk and returns how many bytes were asked for (0 when the
// file cannot be opened or the range starts at or past its end). The reads themselves complete
// in the background.
inline constexpr uint64_t kPrefetchChunk = 128 * 1024;
uint64_t prefetch_range(const FileRange& range, uint64_t budget);

// Drops this process's pages of a read-only file mapping that lie wholly inside [p, p + n)
// (MADV_DONTNEED; a page shared with a neighbouring range stays). Advice only: a later read
// faults the page back in from the file, and failure is harmless.
void release_mapped_pages(const void* p, size_t n);

}  // namespace warden::util
