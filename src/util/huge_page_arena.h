#pragma once
// Memory for what decode streams through every step, the model's weights and the KV pool:
// zeroed, 64-byte aligned, and carved out of 2 MiB-aligned anonymous mappings marked
// MADV_HUGEPAGE, so the kernel can back them with 2 MiB pages.
//
// Why: batch-1 decode streams every weight byte once per token, and long-context attention visits
// every KV page of a sequence, a few KiB each, in a scattered order. On 4 KiB pages that is a TLB
// miss (a two-level page walk in a VM) every 4 KiB, and a hardware-prefetcher restart. Measured on
// a 2-vCPU VM with alternating builds: one-thread int4 decode +9.5%, the default model +12%,
// 8k-context decode of 8 sequences +12-23% from the KV pool alone.
//
// Matrices are carved from shared chunks rather than mapped one by one because most matrices of
// small and mid-sized models are under 2 MiB, or a little over a multiple of it: alone, few of
// their bytes would fill whole huge pages. A chunk lives as long as any buffer carved from it
// (shared ownership), so the arena itself can go away after loading. Freed buffers are not
// reused: an arena is for memory allocated once (a model's weights). Untouched parts of a chunk
// cost address space only.
//
// Built with AddressSanitizer, every buffer is a separate heap block instead, so that overruns
// between matrices are still caught.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <utility>

namespace warden::util {

// A buffer's bytes and what keeps them alive. Move-only: a copy would share the bytes, and two
// owners of one KV pool or one matrix that each think the bytes are theirs is how data leaks.
class ArenaBuffer {
  public:
    ArenaBuffer() = default;
    ArenaBuffer(ArenaBuffer&& o) noexcept
        : owner_(std::move(o.owner_)),
          data_(std::exchange(o.data_, nullptr)),
          size_(std::exchange(o.size_, 0)) {}
    ArenaBuffer& operator=(ArenaBuffer&& o) noexcept {
        owner_ = std::move(o.owner_);
        data_ = std::exchange(o.data_, nullptr);
        size_ = std::exchange(o.size_, 0);
        return *this;
    }
    ArenaBuffer(const ArenaBuffer&) = delete;
    ArenaBuffer& operator=(const ArenaBuffer&) = delete;
    // A standalone zeroed heap buffer (tests, tools); throws Error when out of memory.
    explicit ArenaBuffer(size_t bytes);

    uint8_t* data() const { return data_; }
    size_t size() const { return size_; }
    std::span<const uint8_t> bytes() const { return {data_, size_}; }

  private:
    friend class HugePageArena;
    ArenaBuffer(std::shared_ptr<void> owner, uint8_t* data, size_t size)
        : owner_(std::move(owner)), data_(data), size_(size) {}
    std::shared_ptr<void> owner_;
    uint8_t* data_ = nullptr;
    size_t size_ = 0;
};

// Foreground work that background memory population yields to. While any ForegroundWork in the
// process is active, map_populating's threads start no new huge page: the engine keeps one active
// while it has requests, so zeroing the rest of a KV pool (a GB at first-touch speed) never
// competes with a step for a core, for memory bandwidth or for the mapping's lock (a step that
// maps memory would otherwise wait behind a populate call). set() from one thread only.
class ForegroundWork {
  public:
    ForegroundWork() = default;
    ~ForegroundWork() { set(false); }
    ForegroundWork(const ForegroundWork&) = delete;
    ForegroundWork& operator=(const ForegroundWork&) = delete;
    void set(bool active);
    // Whether any ForegroundWork in the process is active.
    static bool any_active();

  private:
    bool active_ = false;
};

class HugePageArena {
  public:
    static constexpr size_t kHugePage = size_t{2} << 20;
    static constexpr size_t kAlign = 64;

    // chunk_bytes: the size of the shared chunks (rounded up to 2 MiB). A request of half a chunk
    // or more gets a chunk of its own, so a large matrix never strands the rest of a chunk.
    explicit HugePageArena(size_t chunk_bytes = size_t{64} << 20);

    // Zeroed bytes; throws Error naming the size when the memory cannot be mapped. Thread-safe.
    ArenaBuffer allocate(size_t bytes);

    // `bytes` zeroed bytes at the start of a 2 MiB-aligned mapping of their own, mapped in whole
    // huge pages (a heap block under AddressSanitizer): for one large buffer such as the KV pool,
    // and for requests of half a chunk or more. Throws Error as allocate() does.
    // populate: also make every page resident and writable now (MADV_POPULATE_WRITE: the kernel
    // faults the zero pages in without the process writing them; a plain write of every page on
    // kernels before 5.14), so no later access pays a first-touch fault. Where the kernel reports
    // that it cannot back the range (ENOMEM), that is an Error here; the kernel may still call
    // the OOM killer first, as it would for the writes.
    static ArenaBuffer map(size_t bytes, bool populate = false);

    // map() with the first `now_bytes` (rounded up to 2 MiB) made resident before returning, as
    // populate does (ENOMEM there is an Error), and the rest made resident by a background thread
    // (a few nice steps down), one huge page at a time, while the caller goes on and only while no
    // ForegroundWork is active (below): the KV pool of a
    // starting server, where zeroing the whole pool (a GB or more) up front would be most of the
    // start-up time. The thread holds the mapping only while it populates a chunk and stops once
    // the buffer is gone; a page it has not reached yet is faulted in by its first write, as
    // without populate, and a failure there (a kernel without MADV_POPULATE_WRITE, memory short)
    // just ends the thread. More bytes than available_memory_bytes() (MemAvailable, the memory
    // cgroup's room) are an Error up front, so a pool too large for the machine is refused at
    // start, not OOM-killed later.
    static ArenaBuffer map_populating(size_t bytes, size_t now_bytes);
    // Bytes that map_populating's background threads have still to make resident, process-wide
    // (0 once every pool is resident, or its thread gave up): the /metrics gauge
    // warden:memory_populate_pending_bytes, so a memory measurement can wait for a settled RSS.
    static size_t populate_pending_bytes();

    // Bytes of the mappings made so far (address space; only touched pages become resident).
    size_t mapped_bytes() const;
    // Bytes allocate() has handed out so far (in every build).
    size_t allocated_bytes() const;

    // False in AddressSanitizer builds, where allocate() and map() hand out separate heap blocks.
    static bool maps_chunks();

  private:
    size_t chunk_bytes_;
    mutable std::mutex mu_;
    ArenaBuffer current_;  // the shared chunk being carved, chunk_bytes_ long
    size_t used_ = 0;      // bytes of current_ handed out, rounded up to kAlign
    size_t mapped_ = 0;
    size_t allocated_ = 0;
};

}  // namespace warden::util
