#pragma once
// Strong types for the units of the KV pool, so a page id is never mistaken for a slot, a
// position or a sequence id.
#include <cstdint>

namespace warden::kv {

struct PageId {
    int32_t v = 0;
    friend bool operator==(PageId a, PageId b) { return a.v == b.v; }
};
constexpr PageId kNullPage{0};

using Generation = uint64_t;

// One entry of a page table: the page and the generation the holder expects it to have.
struct PageRef {
    PageId page;
    Generation gen = 0;
    friend bool operator==(PageRef a, PageRef b) { return a.page == b.page && a.gen == b.gen; }
};

struct SeqId {
    int64_t v = 0;
    friend bool operator==(SeqId a, SeqId b) { return a.v == b.v; }
};

}  // namespace warden::kv
