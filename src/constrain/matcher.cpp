#include "constrain/matcher.h"

#include <algorithm>
#include <numeric>

namespace warden::constrain {

namespace {

// More live stacks than this means a pathologically ambiguous grammar: the text is refused
// rather than the server slowed down without bound.
constexpr size_t kMaxStacks = 4096;
constexpr int kMaxExpandDepth = 4096;

}  // namespace

std::string MatchState::key() const {
    std::string k(reinterpret_cast<const char*>(stacks.data()), stacks.size() * sizeof(uint32_t));
    k += static_cast<char>(need);
    k += static_cast<char>(len);
    k += static_cast<char>(accepting);
    k.append(reinterpret_cast<const char*>(&partial), sizeof partial);
    return k;
}

bool Program::Set::matches(uint32_t cp) const {
    if (cp < 128) return (ascii[cp >> 6] >> (cp & 63)) & 1;
    auto it = std::upper_bound(ranges.begin(), ranges.end(), cp,
                               [](uint32_t v, const CharRange& r) { return v < r.lo; });
    if (it == ranges.begin()) return false;
    --it;
    return cp <= it->hi;
}

bool Program::Set::intersects(uint32_t lo, uint32_t hi) const {
    for (const auto& r : ranges)
        if (r.lo <= hi && lo <= r.hi) return true;
    return false;
}

Program::Program(const Grammar& g) : root_(g.root) {
    rule_starts_.resize(g.rules.size());
    for (size_t r = 0; r < g.rules.size(); ++r) {
        for (const auto& seq : g.rules[r].alts) {
            rule_starts_[r].push_back(static_cast<uint32_t>(ops_.size()));
            for (const auto& e : seq) {
                if (e.kind == Element::Kind::Ref) {
                    ops_.push_back({Op::Ref, e.rule});
                } else {
                    Set s;
                    s.ranges = normalize_ranges(e.ranges, e.negated);
                    for (uint32_t cp = 0; cp < 128; ++cp)
                        for (const auto& x : s.ranges)
                            if (cp >= x.lo && cp <= x.hi)
                                s.ascii[cp >> 6] |= uint64_t{1} << (cp & 63);
                    ops_.push_back({Op::Chars, static_cast<uint32_t>(sets_.size())});
                    sets_.push_back(std::move(s));
                }
            }
            ops_.push_back({Op::End, 0});
        }
    }
}

void Program::Builder::add(const std::vector<uint32_t>& st) {
    if (n >= kMaxStacks) {
        overflow = true;
        return;
    }
    if (n == stacks.size()) stacks.emplace_back();
    stacks[n++].assign(st.begin(), st.end());
}

void Program::expand(std::vector<uint32_t>& st, Builder& out, int depth) const {
    if (depth > kMaxExpandDepth) {
        out.overflow = true;
        return;
    }
    if (st.empty()) {
        out.accepting = true;
        return;
    }
    const uint32_t p = st.back();
    const Op op = ops_[p];
    if (op.kind == Op::Chars) {
        out.add(st);
        return;
    }
    st.pop_back();
    if (op.kind == Op::End) {
        expand(st, out, depth + 1);
    } else {
        // The continuation after the reference, unless the reference ends its alternative.
        const bool push = ops_[p + 1].kind != Op::End;
        if (push) st.push_back(p + 1);
        for (uint32_t a : rule_starts_[op.arg]) {
            st.push_back(a);
            expand(st, out, depth + 1);
            st.pop_back();
        }
        if (push) st.pop_back();
    }
    st.push_back(p);
}

void Program::finish(Builder& b, MatchState& out) const {
    out.stacks.clear();
    out.partial = 0;
    out.need = 0;
    out.len = 0;
    out.accepting = b.accepting;
    if (b.overflow) {
        out.accepting = false;
        b.n = 0;
        return;
    }
    // Sort and deduplicate (an index sort: the vectors keep their capacity for the next call).
    thread_local std::vector<uint32_t> idx;
    idx.resize(b.n);
    std::iota(idx.begin(), idx.end(), 0u);
    std::sort(idx.begin(), idx.end(),
              [&](uint32_t x, uint32_t y) { return b.stacks[x] < b.stacks[y]; });
    const std::vector<uint32_t>* prev = nullptr;
    for (uint32_t i : idx) {
        const auto& s = b.stacks[i];
        if (prev && *prev == s) continue;
        out.stacks.push_back(static_cast<uint32_t>(s.size()));
        out.stacks.insert(out.stacks.end(), s.begin(), s.end());
        prev = &s;
    }
    b.n = 0;
}

MatchState Program::initial() const {
    thread_local Builder b;
    b.n = 0;
    b.accepting = b.overflow = false;
    std::vector<uint32_t> st;
    for (uint32_t a : rule_starts_[root_]) {
        st.assign(1, a);
        expand(st, b, 0);
    }
    MatchState s;
    finish(b, s);
    return s;
}

bool Program::advance_cp(const MatchState& in, uint32_t cp, MatchState& out) const {
    thread_local Builder b;
    thread_local std::vector<uint32_t> st;
    b.n = 0;
    b.accepting = b.overflow = false;
    const uint32_t* p = in.stacks.data();
    const uint32_t* end = p + in.stacks.size();
    while (p < end) {
        const uint32_t n = *p++;
        const uint32_t top = p[n - 1];
        if (sets_[ops_[top].arg].matches(cp)) {
            st.assign(p, p + n);
            st.back() = top + 1;
            expand(st, b, 0);
        }
        p += n;
    }
    finish(b, out);
    return out.alive();
}

bool Program::viable_prefix(const MatchState& s) const {
    // The code points the sequence read so far can still become (no overlong forms).
    const unsigned shift = 6u * s.need;
    const uint32_t min_cp = s.len == 2 ? 0x80 : s.len == 3 ? 0x800 : 0x10000;
    const uint32_t lo = std::max(s.partial << shift, min_cp);
    const uint32_t hi = std::min((s.partial << shift) | ((1u << shift) - 1), 0x10FFFFu);
    if (lo > hi) return false;
    const uint32_t* p = s.stacks.data();
    const uint32_t* end = p + s.stacks.size();
    while (p < end) {
        const uint32_t n = *p++;
        if (sets_[ops_[p[n - 1]].arg].intersects(lo, hi)) return true;
        p += n;
    }
    return false;
}

bool Program::advance_byte(const MatchState& in, uint8_t b, MatchState& out) const {
    if (in.need == 0) {
        if (b < 0x80) return advance_cp(in, b, out);
        uint8_t len;
        uint32_t bits;
        if (b >= 0xC2 && b <= 0xDF)
            len = 2, bits = b & 0x1F;
        else if (b >= 0xE0 && b <= 0xEF)
            len = 3, bits = b & 0x0F;
        else if (b >= 0xF0 && b <= 0xF4)
            len = 4, bits = b & 0x07;
        else
            return false;
        out.stacks = in.stacks;
        out.accepting = false;
        out.partial = bits;
        out.need = static_cast<uint8_t>(len - 1);
        out.len = len;
        return viable_prefix(out);
    }
    if ((b & 0xC0) != 0x80) return false;
    const uint32_t cp = (in.partial << 6) | (b & 0x3F);
    if (in.need > 1) {
        // Reject overlong and out-of-range prefixes early (second byte of E0/ED/F0/F4).
        out.stacks = in.stacks;
        out.accepting = false;
        out.partial = cp;
        out.need = static_cast<uint8_t>(in.need - 1);
        out.len = in.len;
        const unsigned shift = 6u * out.need;
        const uint32_t lo = cp << shift, hi = lo | ((1u << shift) - 1);
        if (in.len == 3 && hi < 0x800) return false;
        if (in.len == 4 && (hi < 0x10000 || lo > 0x10FFFF)) return false;
        if (lo >= 0xD800 && hi <= 0xDFFF) return false;
        return viable_prefix(out);
    }
    if ((in.len == 2 && cp < 0x80) || (in.len == 3 && cp < 0x800) ||
        (in.len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF))
        return false;
    return advance_cp(in, cp, out);  // in's stacks are those of the boundary before the sequence
}

bool Program::advance(MatchState& s, std::string_view bytes) const {
    MatchState next;
    for (char c : bytes) {
        if (!advance_byte(s, static_cast<uint8_t>(c), next)) return false;
        std::swap(s, next);
    }
    return true;
}

}  // namespace warden::constrain
