#include "engine/speculative/ngram_proposer.h"

#include <algorithm>

#include "util/error.h"

namespace warden::engine::speculative {

NgramProposer::NgramProposer(int32_t min_n, int32_t max_n) : min_n_(min_n), max_n_(max_n) {
    util::check(min_n >= 1 && max_n >= min_n, "ngram proposer: need 1 <= min_n <= max_n");
}

std::vector<int32_t> NgramProposer::lookup(std::span<const int32_t> tokens, int32_t k,
                                           int32_t min_n, int32_t max_n) {
    std::vector<int32_t> out;
    const auto len = static_cast<int64_t>(tokens.size());
    if (k <= 0) return out;
    for (int64_t n = std::min<int64_t>(max_n, len - 1); n >= min_n; --n) {
        const int32_t* tail = tokens.data() + len - n;
        // Most recent match first: the start s of an earlier occurrence, s + n < len so that at
        // least one token follows it.
        for (int64_t s = len - n - 1; s >= 0; --s) {
            if (!std::equal(tail, tail + n, tokens.data() + s)) continue;
            const int64_t from = s + n;
            const int64_t cnt = std::min<int64_t>(k, len - from);
            out.assign(tokens.begin() + from, tokens.begin() + from + cnt);
            return out;
        }
    }
    return out;
}

void NgramProposer::propose(std::span<DraftRequest*> reqs) {
    for (DraftRequest* r : reqs) {
        r->draft = lookup(r->tokens, r->k, min_n_, max_n_);
        r->q.clear();
    }
}

}  // namespace warden::engine::speculative
