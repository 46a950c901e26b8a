#pragma once
// Per-sequence page tables and the integrity verifier. A sequence's table lists, for each
// block of page_size consecutive token positions, the page holding its K/V and the generation
// the sequence expects that page to have. Tables are append-only while the sequence lives.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kv/page_pool.h"

namespace warden::kv {

struct PageTable {
    std::vector<PageRef> pages;  // [ceil(n_tokens_capacity / page_size)]
    int64_t n_tokens = 0;        // positions written so far

    int64_t capacity(int32_t page_size) const {
        return static_cast<int64_t>(pages.size()) * page_size;
    }
};

enum class IntegrityMode { Off, Step, Layer };
const char* integrity_mode_name(IntegrityMode m);
IntegrityMode parse_integrity_mode(const std::string& s);  // throws util::Error

// What the verifier found wrong with one entry of one sequence's table. Carries ids and
// generations only, never KV contents, so it is safe to log.
struct IntegrityViolation {
    SeqId seq;
    int64_t entry = 0;  // index in the page table
    PageId page;
    Generation expected = 0;
    Generation found = 0;
    PoolStatus status = PoolStatus::Ok;
    std::string describe() const;
};

// Checks every entry of `table` against the pool. nullopt when all are live.
std::optional<IntegrityViolation> verify_table(const PagePool& pool, SeqId seq,
                                               std::span<const PageRef> table);

}  // namespace warden::kv
