#include "util/huge_page_arena.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <utility>

#include "util/error.h"
#include "util/memory_info.h"
#include "util/thread_priority.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE \
    23  // Linux 5.14 (uapi asm-generic/mman-common.h); older headers lack it
#endif

#if defined(__SANITIZE_ADDRESS__)
#define WARDEN_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define WARDEN_ASAN 1
#endif
#endif

namespace warden::util {

namespace {

// Bytes the background population threads have still to make resident (populate_pending_bytes).
std::atomic<size_t> g_populate_pending{0};
// Active ForegroundWork objects.
std::atomic<int> g_foreground{0};

#ifdef WARDEN_ASAN
constexpr bool kAsan = true;
#else
constexpr bool kAsan = false;
#endif

size_t round_up(size_t n, size_t to) {
    return (n + to - 1) / to * to;
}

std::string out_of_memory(size_t bytes) {
    const size_t mib =
        (bytes >> 20) + ((bytes & ((size_t{1} << 20) - 1)) != 0);  // no wrap at SIZE_MAX
    return "out of memory: cannot allocate " + std::to_string(mib) + " MiB";
}

}  // namespace

ArenaBuffer::ArenaBuffer(size_t bytes) : size_(bytes) {
    if (bytes == 0) return;
    // aligned_alloc, not calloc: the 64-byte alignment holds for heap buffers too
    // (AddressSanitizer's calloc aligns to 8 or 16 only).
    const size_t padded = round_up(bytes, HugePageArena::kAlign);
    void* p = padded < bytes ? nullptr : std::aligned_alloc(HugePageArena::kAlign, padded);
    if (p == nullptr) throw Error(out_of_memory(bytes));
    std::memset(p, 0, padded);
    owner_ = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
    data_ = static_cast<uint8_t*>(p);
}

HugePageArena::HugePageArena(size_t chunk_bytes)
    : chunk_bytes_(round_up(chunk_bytes == 0 ? 1 : chunk_bytes, kHugePage)) {}

ArenaBuffer HugePageArena::map(size_t bytes, bool populate) {
    if (bytes == 0) return {};
    if (kAsan) return ArenaBuffer(bytes);  // written (zeroed) in full already
    // Map one huge page more than asked, then trim both ends so the mapping starts on a 2 MiB
    // boundary: the kernel only backs whole, aligned 2 MiB ranges with huge pages.
    const size_t want = round_up(bytes, kHugePage);
    if (want < bytes || want > SIZE_MAX - kHugePage) throw Error(out_of_memory(bytes));
    void* p = ::mmap(nullptr, want + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                     -1, 0);
    if (p == MAP_FAILED) throw Error(out_of_memory(bytes));
    const auto start = reinterpret_cast<uintptr_t>(p);
    const uintptr_t base = round_up(start, kHugePage);
    if (base > start) ::munmap(p, base - start);
    ::munmap(reinterpret_cast<void*>(base + want), start + kHugePage - base);  // never empty
    // A hint: where the kernel has no transparent huge pages it fails, and where they are set to
    // `never` it is ignored; either way 4 KiB pages serve as before.
    ::madvise(reinterpret_cast<void*>(base), want, MADV_HUGEPAGE);
    auto* data = reinterpret_cast<uint8_t*>(base);
    if (populate && ::madvise(data, want, MADV_POPULATE_WRITE) != 0) {
        const int err = errno;
        if (err == EINVAL) {  // a kernel before 5.14: write every page instead
            std::memset(data, 0, want);
        } else {  // ENOMEM and the like: nothing to back it with
            ::munmap(data, want);
            throw Error(out_of_memory(bytes) + " (" + std::strerror(err) + ")");
        }
    }
    return ArenaBuffer(std::shared_ptr<void>(data, [want](void* q) { ::munmap(q, want); }), data,
                       bytes);
}

size_t HugePageArena::populate_pending_bytes() {
    return g_populate_pending.load();
}

void ForegroundWork::set(bool active) {
    if (active == active_) return;
    active_ = active;
    g_foreground.fetch_add(active ? 1 : -1, std::memory_order_relaxed);
}

bool ForegroundWork::any_active() {
    return g_foreground.load(std::memory_order_relaxed) > 0;
}

ArenaBuffer HugePageArena::map_populating(size_t bytes, size_t now_bytes) {
    if (bytes == 0) return {};
    if (kAsan) return ArenaBuffer(bytes);  // written (zeroed) in full already
    const size_t want = round_up(bytes, kHugePage);
    const size_t first = std::min(want, round_up(std::max<size_t>(now_bytes, 1), kHugePage));
    // Most of the range becomes resident only later, where running short of memory would mean the
    // OOM killer, not an error: refuse up front what cannot be backed now.
    if (const auto avail = available_memory_bytes(); avail && bytes > *avail)
        throw Error(out_of_memory(bytes) + ": only " + std::to_string(*avail >> 20) +
                    " MiB can be made resident (MemAvailable, memory cgroup limit)");
    ArenaBuffer buf = map(bytes);
    if (::madvise(buf.data_, first, MADV_POPULATE_WRITE) != 0) {
        const int err = errno;
        if (err == EINVAL) {  // a kernel before 5.14: write those pages instead
            std::memset(buf.data_, 0, first);
        } else {
            throw Error(out_of_memory(bytes) + " (" + std::strerror(err) + ")");
        }
    }
    if (first < want) {
        g_populate_pending.fetch_add(want - first);
        std::thread([watch = std::weak_ptr<void>(buf.owner_), data = buf.data_, first, want] {
            // A few nice steps down, and one huge page per call: a call in progress when a request
            // arrives ends within milliseconds, and between calls the thread waits while the
            // engine has work (ForegroundWork), so it runs on idle cores only.
            (void)lower_this_thread_priority(5);
            size_t off = first;
            for (; off < want; off += kHugePage) {
                while (g_foreground.load(std::memory_order_relaxed) > 0 && !watch.expired())
                    std::this_thread::sleep_for(std::chrono::milliseconds(2));
                const std::shared_ptr<void> alive = watch.lock();  // the mapping stays meanwhile
                if (!alive) break;
                const size_t n = std::min(kHugePage, want - off);
                if (::madvise(data + off, n, MADV_POPULATE_WRITE) != 0) break;
                g_populate_pending.fetch_sub(n);
            }
            if (off < want) g_populate_pending.fetch_sub(want - off);  // given up: nothing pending
        }).detach();
    }
    return buf;
}

ArenaBuffer HugePageArena::allocate(size_t bytes) {
    if (bytes == 0) return {};
    std::lock_guard lock(mu_);
    allocated_ += bytes;
    if (kAsan) return ArenaBuffer(bytes);  // separate blocks: overruns between them stay visible
    if (bytes >= chunk_bytes_ / 2) {
        ArenaBuffer own = map(bytes);
        mapped_ += round_up(bytes, kHugePage);
        return own;
    }
    if (current_.data() == nullptr || current_.size() - used_ < bytes) {
        current_ = map(chunk_bytes_);  // chunk_bytes_ is whole huge pages
        mapped_ += chunk_bytes_;
        used_ = 0;
    }
    uint8_t* p = current_.data() + used_;
    used_ = std::min(current_.size(), round_up(used_ + bytes, kAlign));
    return ArenaBuffer(current_.owner_, p, bytes);
}

bool HugePageArena::maps_chunks() {
    return !kAsan;
}

size_t HugePageArena::mapped_bytes() const {
    std::lock_guard lock(mu_);
    return mapped_;
}

size_t HugePageArena::allocated_bytes() const {
    std::lock_guard lock(mu_);
    return allocated_;
}

}  // namespace warden::util
