#include "constrain/token_mask.h"

#include <algorithm>
#include <chrono>

#include "constrain/mask_counters.h"
#include "tokenizer/tokenizer.h"

namespace warden::constrain {

namespace {

// Masks kept per grammar; past this the cache starts over (a mask is vocab/8 bytes).
constexpr size_t kMaxCachedMasks = 1024;

}  // namespace

Vocabulary::Vocabulary(const tokenizer::Tokenizer& tok) {
    const int32_t n = tok.vocab_size();
    bytes_.resize(static_cast<size_t>(n));
    std::vector<char> usable(static_cast<size_t>(n), 0);
    for (int32_t id = 0; id < n; ++id) {
        bytes_[static_cast<size_t>(id)] = tok.token_bytes(id);
        usable[static_cast<size_t>(id)] =
            !tok.is_special(id) && !bytes_[static_cast<size_t>(id)].empty();
        if (usable[static_cast<size_t>(id)]) {
            std::string start = tok.token_piece(id, true);
            if (start != bytes_[static_cast<size_t>(id)])
                start_pieces_.emplace_back(id, std::move(start));
        }
    }
    stop_ = tok.stop_ids();
    for (int32_t s : stop_)
        if (s >= 0 && s < n) usable[static_cast<size_t>(s)] = 0;
    index(usable);
}

Vocabulary::Vocabulary(std::vector<std::string> tokens, std::vector<int32_t> stop)
    : bytes_(std::move(tokens)), stop_(std::move(stop)) {
    std::vector<char> usable(bytes_.size(), 0);
    for (size_t i = 0; i < bytes_.size(); ++i) usable[i] = !bytes_[i].empty();
    for (int32_t s : stop_)
        if (s >= 0 && static_cast<size_t>(s) < bytes_.size()) usable[static_cast<size_t>(s)] = 0;
    index(usable);
}

void Vocabulary::index(const std::vector<char>& usable) {
    for (size_t i = 0; i < bytes_.size(); ++i)
        (usable[i] ? sorted_ : unusable_).push_back(static_cast<int32_t>(i));
    std::sort(sorted_.begin(), sorted_.end(), [&](int32_t a, int32_t b) {
        return bytes_[static_cast<size_t>(a)] < bytes_[static_cast<size_t>(b)];
    });
    lcp_.assign(sorted_.size(), 0);
    for (size_t i = 0; i < sorted_.size(); ++i) {
        const std::string& cur = bytes_[static_cast<size_t>(sorted_[i])];
        max_len_ = std::max(max_len_, cur.size());
        if (i == 0) continue;
        const std::string& prev = bytes_[static_cast<size_t>(sorted_[i - 1])];
        size_t k = 0;
        while (k < prev.size() && k < cur.size() && prev[k] == cur[k] && k < 65535) ++k;
        lcp_[i] = static_cast<uint16_t>(k);
    }
    suffix_start_.reserve(sorted_.size() + 1);
    for (size_t i = 0; i < sorted_.size(); ++i) {
        suffix_start_.push_back(static_cast<uint32_t>(suffixes_.size()));
        suffixes_.append(bytes_[static_cast<size_t>(sorted_[i])], lcp_[i]);
    }
    suffix_start_.push_back(static_cast<uint32_t>(suffixes_.size()));
}

CompiledGrammar::CompiledGrammar(const Grammar& g, std::shared_ptr<const Vocabulary> vocab,
                                 size_t memo_entries)
    : program_(g), vocab_(std::move(vocab)), memo_(program_, memo_entries) {}

bool CompiledGrammar::memo_walk(const MatchState& s, TokenMask& m) const {
    const Vocabulary& v = *vocab_;
    // ids[d]: the state after the first d bytes of the current token.
    thread_local std::vector<uint32_t> ids;
    if (ids.size() < v.max_len() + 1) ids.resize(v.max_len() + 1);
    ids[0] = memo_.intern(s);
    if (ids[0] == TransitionMemo::kFull) return false;
    // A token is walked from its common prefix with the previous one (whose states up to there
    // are known: had the previous token died before that point, this one would be skipped), so
    // only the bytes after that prefix are read.
    size_t dead_len = SIZE_MAX;  // the previous token's first dead_len bytes are refused
    const auto& sorted = v.sorted();
    const auto& lcp = v.lcp();
    const auto* suffixes = reinterpret_cast<const uint8_t*>(v.suffixes().data());
    const auto& start = v.suffix_start();
    for (size_t i = 0; i < sorted.size(); ++i) {
        const size_t common = lcp[i];
        if (dead_len <= common) continue;  // shares the refused prefix
        dead_len = SIZE_MAX;
        const uint8_t* b = suffixes + start[i];
        const size_t n = start[i + 1] - start[i];
        size_t k = 0;
        for (; k < n; ++k) {
            const uint32_t t = memo_.next(ids[common + k], b[k]);
            if (t == TransitionMemo::kDead) break;
            if (t == TransitionMemo::kFull) return false;
            ids[common + k + 1] = t;
        }
        if (k < n) {
            dead_len = common + k + 1;
            continue;
        }
        const auto id = static_cast<size_t>(sorted[i]);
        m[id >> 6] |= uint64_t{1} << (id & 63);
    }
    return true;
}

TokenMask CompiledGrammar::compute_mask(const MatchState& s) const {
    const size_t words = (static_cast<size_t>(vocab_->size()) + 63) / 64;
    {
        std::lock_guard lk(memo_mu_);
        // A full memo starts over; a walk that fills even an empty one runs without it.
        for (int attempt = 0; attempt < 2; ++attempt) {
            TokenMask m(words, 0);
            if (memo_walk(s, m)) return m;
            memo_.clear();
        }
    }
    return reference_mask(s);
}

TokenMask CompiledGrammar::reference_mask(const MatchState& s) const {
    const Vocabulary& v = *vocab_;
    TokenMask m((static_cast<size_t>(v.size()) + 63) / 64, 0);
    // states[d]: the state after the first d bytes of the current token; valid up to `valid`.
    thread_local std::vector<MatchState> states;
    if (states.size() < v.max_len() + 1) states.resize(v.max_len() + 1);
    states[0] = s;
    size_t valid = 0;
    size_t dead_len = SIZE_MAX;  // the previous token's first dead_len bytes are refused
    const auto& sorted = v.sorted();
    const auto& lcp = v.lcp();
    for (size_t i = 0; i < sorted.size(); ++i) {
        const size_t common = lcp[i];
        if (dead_len <= common) continue;  // shares the refused prefix
        dead_len = SIZE_MAX;
        valid = std::min(valid, common);
        const std::string& b = v.bytes(sorted[i]);
        size_t d = valid;
        for (; d < b.size(); ++d)
            if (!program_.advance_byte(states[d], static_cast<uint8_t>(b[d]), states[d + 1])) break;
        if (d < b.size()) {
            dead_len = d + 1;
            valid = d;
            continue;
        }
        valid = b.size();
        const auto id = static_cast<size_t>(sorted[i]);
        m[id >> 6] |= uint64_t{1} << (id & 63);
    }
    return m;
}

std::shared_ptr<const TokenMask> CompiledGrammar::mask(const MatchState& s) const {
    std::string key = s.key();
    {
        std::lock_guard lk(mu_);
        auto it = cache_.find(key);
        if (it != cache_.end()) {
            ++stats_.hits;
            count_mask_hit();
            return it->second;
        }
        ++stats_.misses;
    }
    // Computed outside the lock: two sequences missing the same state both compute it.
    const auto t0 = std::chrono::steady_clock::now();
    auto m = std::make_shared<const TokenMask>(compute_mask(s));
    count_mask_miss(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    std::lock_guard lk(mu_);
    if (cache_.size() >= kMaxCachedMasks) cache_.clear();
    cache_.emplace(std::move(key), m);
    return m;
}

CompiledGrammar::Stats CompiledGrammar::stats() const {
    std::lock_guard lk(mu_);
    return stats_;
}

}  // namespace warden::constrain
