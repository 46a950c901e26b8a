#include "util/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>
#include <thread>
#include <utility>

#include "util/error.h"

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

void prefetch_in_background(std::vector<std::string> paths) {
    try {
        std::thread([paths = std::move(paths)] {
            for (const std::string& path : paths) {
                const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
                if (fd < 0) continue;
                (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_WILLNEED);
                ::close(fd);
            }
        }).detach();
    } catch (const std::system_error&) {  // no thread to spare: the mapping's faults read it
    }
}

}  // namespace warden::util
