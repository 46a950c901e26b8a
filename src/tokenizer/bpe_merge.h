#pragma once
// The merge loop shared by the byte-level BPE tokenizer (merge table, bpe.cpp) and the tiktoken
// one (rank table, load_tiktoken.cpp): starting from one part per byte, repeatedly merge the
// adjacent pair with the lowest rank, the leftmost first among equal ranks, until no adjacent
// pair has one.
#include <cstdint>
#include <functional>
#include <optional>
#include <queue>
#include <vector>

namespace warden::tokenizer::detail {

// One part of a piece's current segmentation, a doubly linked list over the piece's bytes.
struct MergePart {
    int32_t id;           // token of the bytes [start, start + len) (-1: none)
    int32_t prev, next;   // neighbours in the current segmentation (-1: none)
    uint32_t start, len;  // len 0: merged into its left neighbour
};

// A merge of two adjacent parts: its rank (lower merges first) and the merged part's token.
struct Merge {
    int32_t rank, id;
};

// The n single-byte parts of a piece, part i holding token byte_id(i).
template <typename ByteId>
std::vector<MergePart> byte_parts(int32_t n, ByteId byte_id) {
    std::vector<MergePart> parts(static_cast<size_t>(n));
    for (int32_t i = 0; i < n; ++i)
        parts[static_cast<size_t>(i)] = {byte_id(i), i - 1, i + 1 < n ? i + 1 : -1,
                                         static_cast<uint32_t>(i), 1};
    return parts;
}

// Merges parts in place; merge_of(left, right) gives the merge of two adjacent parts or nullopt.
// Afterwards the parts reachable from part 0 through `next` are the segmentation. A queued pair is
// stale once either part's length changed (a part's bytes, hence its token, follow from its start
// and length).
template <typename MergeOf>
void merge_lowest_rank(std::vector<MergePart>& parts, MergeOf merge_of) {
    struct Candidate {
        int32_t rank, left, id;
        uint32_t left_len, right_len;  // lengths when queued
        bool operator>(const Candidate& o) const {
            return rank != o.rank ? rank > o.rank : left > o.left;
        }
    };
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
    auto consider = [&](int32_t l) {
        if (l < 0) return;
        const int32_t r = parts[static_cast<size_t>(l)].next;
        if (r < 0) return;
        const MergePart& a = parts[static_cast<size_t>(l)];
        const MergePart& b = parts[static_cast<size_t>(r)];
        if (const std::optional<Merge> m = merge_of(a, b))
            queue.push({m->rank, l, m->id, a.len, b.len});
    };
    for (int32_t i = 0; i + 1 < static_cast<int32_t>(parts.size()); ++i) consider(i);
    while (!queue.empty()) {
        const Candidate c = queue.top();
        queue.pop();
        MergePart& left = parts[static_cast<size_t>(c.left)];
        if (left.len != c.left_len || left.next < 0) continue;
        MergePart& right = parts[static_cast<size_t>(left.next)];
        if (right.len != c.right_len) continue;
        left.id = c.id;
        left.len += right.len;
        right.len = 0;
        left.next = right.next;
        if (left.next >= 0) parts[static_cast<size_t>(left.next)].prev = c.left;
        consider(left.prev);
        consider(c.left);
    }
}

}  // namespace warden::tokenizer::detail
