#include "util/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <system_error>
#include <thread>
#include <utility>

#include "util/error.h"
#include "util/memory_info.h"

namespace warden::util {

MappedFile::MappedFile(const std::string& path) : path_(path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw Error("cannot open '" + path + "': " + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        int e = errno;
        ::close(fd);
        throw Error("cannot stat '" + path + "': " + std::strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        throw Error("'" + path + "' is not a regular file");
    }
    size_ = static_cast<size_t>(st.st_size);
    if (size_ > 0) {
        void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            ::close(fd);
            throw Error("cannot mmap '" + path + "': " + std::strerror(e));
        }
        data_ = static_cast<const uint8_t*>(p);
    }
    ::close(fd);
}

MappedFile::~MappedFile() {
    if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
    if (this != &other) {
        if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
        path_ = std::move(other.path_);
        data_ = std::exchange(other.data_, nullptr);
        size_ = std::exchange(other.size_, 0);
    }
    return *this;
}

void release_mapped_pages(const void* p, size_t n) {
    const long page = sysconf(_SC_PAGESIZE);
    if (page <= 0 || p == nullptr || n == 0) return;
    const auto ps = static_cast<uintptr_t>(page);
    const auto lo = reinterpret_cast<uintptr_t>(p);
    const uintptr_t a = (lo + ps - 1) / ps * ps;
    const uintptr_t b = (lo + n) / ps * ps;
    if (b > a) (void)madvise(reinterpret_cast<void*>(a), b - a, MADV_DONTNEED);
}

namespace {

// An open regular file to advise on (fd -1 where it cannot be opened or is not regular).
struct AdvisedFile {
    int fd = -1;
    uint64_t size = 0;
    explicit AdvisedFile(const std::string& path) {
        fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        struct stat st {};
        if (fd >= 0 && (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))) {
            ::close(fd);
            fd = -1;
        }
        if (fd >= 0) size = static_cast<uint64_t>(st.st_size);
    }
    ~AdvisedFile() {
        if (fd >= 0) ::close(fd);
    }
    AdvisedFile(const AdvisedFile&) = delete;
    AdvisedFile& operator=(const AdvisedFile&) = delete;

    // prefetch_range's work on this file.
    uint64_t advise(uint64_t offset, uint64_t length, uint64_t budget) const {
        if (fd < 0 || offset >= size) return 0;
        const uint64_t end = offset + std::min(length, size - offset);
        uint64_t advised = 0;
        // One call per chunk: the kernel reads at most its readahead window (the device's
        // read_ahead_kb, 128 KiB by default) per POSIX_FADV_WILLNEED call and drops the rest of
        // a larger range, so one call for the whole range would read only its first window.
        for (uint64_t off = offset; off < end && advised < budget; off += kPrefetchChunk) {
            const uint64_t n = std::min({kPrefetchChunk, end - off, budget - advised});
            if (::posix_fadvise(fd, static_cast<off_t>(off), static_cast<off_t>(n),
                                POSIX_FADV_WILLNEED) != 0)
                break;
            advised += n;
        }
        return advised;
    }
};

}  // namespace

uint64_t prefetch_range(const FileRange& range, uint64_t budget) {
    return AdvisedFile(range.path).advise(range.offset, range.length, budget);
}

void prefetch_in_background(std::vector<FileRange> ranges) {
    // At most half the memory available now, so a checkpoint larger than memory does not evict
    // its own first pages before the loader reads them.
    const uint64_t budget = available_memory_bytes().value_or(UINT64_MAX) / 2;
    try {
        std::thread([ranges = std::move(ranges), budget] {
            uint64_t left = budget;
            // One open file while consecutive ranges lie in it (a plan holds a range per scale
            // tensor: tens of thousands for a large MoE checkpoint).
            std::unique_ptr<AdvisedFile> file;
            const std::string* open_path = nullptr;
            for (const FileRange& r : ranges) {
                if (!open_path || r.path != *open_path) {
                    file = std::make_unique<AdvisedFile>(r.path);
                    open_path = &r.path;
                }
                left -= file->advise(r.offset, r.length, left);
            }
        }).detach();
    } catch (const std::system_error&) {  // no thread to spare: the mapping's faults read it
    }
}

void prefetch_in_background(const std::vector<std::string>& paths) {
    std::vector<FileRange> ranges;
    ranges.reserve(paths.size());
    for (const std::string& p : paths) ranges.push_back({p, 0, UINT64_MAX});
    prefetch_in_background(std::move(ranges));
}

}  // namespace warden::util
