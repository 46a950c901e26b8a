// util::HugePageArena: weight buffers are zeroed, 64-byte aligned and disjoint; they outlive the
// arena; shared chunks start on a 2 MiB boundary and carry the MADV_HUGEPAGE advice (the "hg"
// flag in /proc/self/smaps, set whether or not the kernel has huge pages to give); a large
// request gets a chunk of its own; an impossible size is a clear error. And a loaded model's
// matrices and the KV pool come from such chunks. In AddressSanitizer builds the arena hands out
// heap blocks instead (so overruns between matrices stay visible), and the chunk checks do not
// apply.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "kv/page_pool.h"
#include "model/model.h"
#include "smaps.h"
#include "tiny_llama.h"
#include "util/error.h"
#include "util/huge_page_arena.h"
#include "util/memory_info.h"

namespace warden {
namespace {

using util::ArenaBuffer;
using util::HugePageArena;

// Pages of [p, p + bytes) the kernel has in memory (mincore), and how many pages there are.
std::pair<size_t, size_t> resident_pages(const void* p, size_t bytes) {
    const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    const auto a = reinterpret_cast<uintptr_t>(p) / page * page;
    const size_t n = (reinterpret_cast<uintptr_t>(p) + bytes - a + page - 1) / page;
    std::vector<unsigned char> vec(n);
    if (::mincore(reinterpret_cast<void*>(a), n * page, vec.data()) != 0) return {0, n};
    return {static_cast<size_t>(
                std::count_if(vec.begin(), vec.end(), [](unsigned char v) { return v & 1; })),
            n};
}

// The VmFlags of the mapping that holds p, from /proc/self/smaps; empty if none does.
std::string vm_flags_of(const void* p) {
    const auto f = test::smaps_field(p, "VmFlags");
    return f ? *f + " " : std::string();
}

// Kernels built without transparent huge pages have no such file, and no "hg" flag to show.
bool kernel_has_thp() {
    return std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled").good();
}

// True when p's mapping carries the MADV_HUGEPAGE advice; also true on a kernel without THP,
// where there is nothing to advise (kernel_has_thp).
bool advised_huge(const void* p) {
    if (!kernel_has_thp()) return true;
    return vm_flags_of(p).find(" hg ") != std::string::npos;
}

TEST(HugePageArena, BuffersAreZeroedAlignedDisjointAndOutliveTheArena) {
    std::vector<ArenaBuffer> bufs;
    {
        HugePageArena arena(size_t{4} << 20);
        for (size_t n : {size_t{1}, size_t{63}, size_t{64}, size_t{65}, size_t{4096},
                         size_t{300000}, size_t{1} << 20, size_t{777}, size_t{1} << 20})
            bufs.push_back(arena.allocate(n));
        EXPECT_EQ(arena.allocate(0).size(), 0u);
        EXPECT_EQ(arena.allocate(0).data(), nullptr);
    }
    // A move leaves nothing behind to alias the bytes.
    ArenaBuffer moved = std::move(bufs.back());
    EXPECT_EQ(bufs.back().data(), nullptr);
    EXPECT_EQ(bufs.back().size(), 0u);
    bufs.back() = std::move(moved);
    EXPECT_EQ(moved.data(), nullptr);
    // The arena is gone; its chunks live on in the buffers.
    for (size_t i = 0; i < bufs.size(); ++i) {
        const ArenaBuffer& b = bufs[i];
        ASSERT_NE(b.data(), nullptr);
        EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % HugePageArena::kAlign, 0u) << i;
        EXPECT_TRUE(std::all_of(b.bytes().begin(), b.bytes().end(), [](uint8_t x) {
            return x == 0;
        })) << i;
        std::fill(b.data(), b.data() + b.size(), static_cast<uint8_t>(i + 1));
    }
    for (size_t i = 0; i < bufs.size(); ++i) {
        const auto bytes = bufs[i].bytes();
        EXPECT_TRUE(std::all_of(bytes.begin(), bytes.end(), [&](uint8_t x) { return x == i + 1; }))
            << "buffer " << i << " was overwritten by another";
    }
}

TEST(HugePageArena, ChunksAreHugePageAlignedAndAdvised) {
    if (!HugePageArena::maps_chunks()) {
        HugePageArena arena;
        EXPECT_NE(arena.allocate(100).data(), nullptr);
        EXPECT_EQ(arena.mapped_bytes(), 0u);
        return;  // AddressSanitizer build: heap blocks, checked above
    }
    HugePageArena arena(size_t{3} << 20);  // rounded up to 4 MiB
    const ArenaBuffer first = arena.allocate(1000);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(first.data()) % HugePageArena::kHugePage, 0u);
    EXPECT_EQ(arena.mapped_bytes(), size_t{4} << 20);
    EXPECT_TRUE(advised_huge(first.data())) << "VmFlags:" << vm_flags_of(first.data());

    // Small requests share the chunk, one after another.
    const ArenaBuffer second = arena.allocate(5000);
    EXPECT_EQ(second.data(), first.data() + 1024);
    EXPECT_EQ(arena.mapped_bytes(), size_t{4} << 20);

    // Half a chunk or more: a chunk of its own, rounded up to whole huge pages, and the shared
    // chunk keeps serving small requests where it left off.
    const ArenaBuffer big = arena.allocate((size_t{2} << 20) + 1);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(big.data()) % HugePageArena::kHugePage, 0u);
    EXPECT_EQ(arena.mapped_bytes(), size_t{8} << 20);
    EXPECT_TRUE(advised_huge(big.data()));
    const ArenaBuffer half = arena.allocate(size_t{2} << 20);  // exactly half: its own too
    EXPECT_EQ(reinterpret_cast<uintptr_t>(half.data()) % HugePageArena::kHugePage, 0u);
    EXPECT_EQ(arena.mapped_bytes(), size_t{10} << 20);
    EXPECT_EQ(arena.allocate(64).data(), second.data() + 5056);

    // A request that does not fit the rest of the shared chunk opens a new one.
    const ArenaBuffer fill = arena.allocate((size_t{2} << 20) - 1);
    EXPECT_EQ(arena.mapped_bytes(), size_t{10} << 20);
    const ArenaBuffer next = arena.allocate((size_t{2} << 20) - 64);
    EXPECT_EQ(arena.mapped_bytes(), size_t{14} << 20);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(next.data()) % HugePageArena::kHugePage, 0u);
}

TEST(HugePageArena, ImpossibleSizeIsAClearError) {
    if (!HugePageArena::maps_chunks())
        GTEST_SKIP() << "AddressSanitizer aborts on such a heap request";
    HugePageArena arena;
    // The size in the message is rounded up to MiB without wrapping, even at SIZE_MAX.
    for (const auto& [bytes, want] :
         {std::pair{SIZE_MAX / 2, std::string("out of memory: cannot allocate 8796093022208 MiB")},
          std::pair{SIZE_MAX, std::string("out of memory: cannot allocate 17592186044416 MiB")}}) {
        try {
            (void)arena.allocate(bytes);
            ADD_FAILURE() << "expected an error for " << bytes << " bytes";
        } catch (const util::Error& e) {
            EXPECT_EQ(std::string(e.what()), want);
        }
    }
    EXPECT_EQ(arena.mapped_bytes(), 0u);
    EXPECT_NE(arena.allocate(100).data(), nullptr);  // and the arena still works
}

TEST(HugePageArena, LoadedModelMatricesComeFromAdvisedChunks) {
    if (!test::tiny_llama_present()) GTEST_SKIP() << "tests/golden/models/tiny-llama missing";
    if (!HugePageArena::maps_chunks())
        GTEST_SKIP() << "AddressSanitizer build: weights are heap blocks";
    test::TinyLlama t;
    const model::ModelWeights& w = t.model->weights;
    EXPECT_TRUE(advised_huge(w.token_embd.view().data));
    for (const auto& L : w.layers) {
        EXPECT_TRUE(advised_huge(L.wq.view().data));
        EXPECT_TRUE(advised_huge(L.w_down.view().data));
    }
}

// map(bytes, populate = true) leaves every page resident before anything touches it (and zeroed);
// a plain map leaves them all to first touch. The KV pool is populated.
TEST(HugePageArena, PopulatedMappingIsResidentBeforeFirstTouch) {
    const size_t bytes = size_t{6} << 20;
    const ArenaBuffer lazy = HugePageArena::map(bytes);
    const ArenaBuffer eager = HugePageArena::map(bytes, /*populate=*/true);
    const auto [eager_in, eager_n] = resident_pages(eager.data(), bytes);
    EXPECT_EQ(eager_in, eager_n);
    if (HugePageArena::maps_chunks()) {  // a heap block under AddressSanitizer is written already
        const auto [lazy_in, lazy_n] = resident_pages(lazy.data(), bytes);
        EXPECT_EQ(lazy_in, 0u) << "of " << lazy_n;
    }
    EXPECT_TRUE(std::all_of(eager.data(), eager.data() + bytes, [](uint8_t x) { return x == 0; }));
}

// map_populating: the first now_bytes are resident on return, the rest become resident in the
// background (bounded wait) while the caller writes to the buffer; a buffer dropped while the
// thread still runs is fine.
TEST(HugePageArena, BackgroundPopulationMakesTheRestResident) {
    const size_t bytes = size_t{80} << 20, now = size_t{4} << 20;
    ArenaBuffer buf = HugePageArena::map_populating(bytes, now);
    const auto [first_in, first_n] = resident_pages(buf.data(), now);
    EXPECT_EQ(first_in, first_n);
    buf.data()[bytes - 1] = 7;  // a write racing the population keeps its value
    size_t in = 0, n = 1;
    for (int i = 0; i < 1000 && in != n; ++i) {
        std::tie(in, n) = resident_pages(buf.data(), bytes);
        if (in != n) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_EQ(in, n);
    EXPECT_EQ(buf.data()[bytes - 1], 7);
    EXPECT_TRUE(std::all_of(buf.data(), buf.data() + bytes - 1, [](uint8_t x) { return x == 0; }));
    ArenaBuffer dropped = HugePageArena::map_populating(size_t{256} << 20, now);
    dropped = ArenaBuffer();  // the background thread stops at its next chunk
    // Nothing stays pending: what was made resident is counted off, what a stopped thread left
    // undone is given up (the /metrics gauge an RSS measurement waits on reads 0 again).
    size_t pending = 1;
    for (int i = 0; i < 3000 && pending != 0; ++i) {
        pending = HugePageArena::populate_pending_bytes();
        if (pending != 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_EQ(pending, 0u);
}

// While foreground work is active (the engine has requests), the background population starts
// no new huge page; it goes on once the work ends.
TEST(HugePageArena, BackgroundPopulationWaitsForForegroundWork) {
    if (!HugePageArena::maps_chunks()) GTEST_SKIP() << "AddressSanitizer build: heap blocks";
    const size_t bytes = size_t{64} << 20, now = size_t{2} << 20;
    util::ForegroundWork busy;
    busy.set(true);
    EXPECT_TRUE(util::ForegroundWork::any_active());
    ArenaBuffer buf = HugePageArena::map_populating(bytes, now);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    // At most the huge page a call had begun before the work was seen is resident past `now`.
    const auto [in, n] = resident_pages(buf.data(), bytes);
    const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    EXPECT_LE(in * page, now + (size_t{2} << 20)) << in << " of " << n << " pages resident";
    busy.set(false);
    EXPECT_FALSE(util::ForegroundWork::any_active());
    size_t done = 0, total = 1;
    for (int i = 0; i < 1000 && done != total; ++i) {
        std::tie(done, total) = resident_pages(buf.data(), bytes);
        if (done != total) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_EQ(done, total);
}

TEST(HugePageArena, KvPoolIsOneAdvisedZeroedMapping) {
    kv::PagePool pool(64, 16, 8192);
    const uint8_t* first = pool.data(kv::PageId{0});
    const uint8_t* last = pool.data(kv::PageId{64});
    EXPECT_EQ(last, first + 64 * 8192);
    const auto [in, n] = resident_pages(first, 65 * 8192);  // before the reads below
    EXPECT_EQ(in, n);
    EXPECT_TRUE(std::all_of(first, last + 8192, [](uint8_t x) { return x == 0; }));
    if (!HugePageArena::maps_chunks()) return;  // AddressSanitizer build: one heap block
    EXPECT_EQ(reinterpret_cast<uintptr_t>(first) % HugePageArena::kHugePage, 0u);
    EXPECT_TRUE(advised_huge(first));
    EXPECT_TRUE(advised_huge(last));
}

// A pool larger than the memory this process can still make resident is refused at once, with
// the figures, instead of being handed out and met by the OOM killer as it fills.
TEST(HugePageArena, BackgroundPopulationRefusesMoreThanAvailable) {
    if (!HugePageArena::maps_chunks()) GTEST_SKIP() << "AddressSanitizer build: heap blocks";
    const auto avail = util::available_memory_bytes();
    ASSERT_TRUE(avail.has_value()) << "no /proc/meminfo on this Linux host";
    const size_t too_much = static_cast<size_t>(*avail) + (size_t{1} << 30);
    try {
        ArenaBuffer buf = HugePageArena::map_populating(too_much, size_t{4} << 20);
        FAIL() << "mapped " << (too_much >> 20) << " MiB with " << (*avail >> 20) << " available";
    } catch (const util::Error& e) {
        EXPECT_NE(std::string(e.what()).find("can be made resident"), std::string::npos)
            << e.what();
    }
}

}  // namespace
}  // namespace warden
