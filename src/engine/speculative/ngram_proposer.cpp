#include "engine/speculative/ngram_proposer.h"

#include <algorithm>

#include "util/error.h"

namespace warden::engine::speculative {

NgramProposer::NgramProposer(int32_t min_n, int32_t max_n) : min_n_(min_n), max_n_(max_n) {
    util::check(min_n >= 1 && max_n >= min_n, "ngram proposer: need 1 <= min_n <= max_n");
}

NgramProposer::Match NgramProposer::find(std::span<const int32_t> tokens, int32_t k, int32_t min_n,
                                         int32_t max_n) {
    Match out;
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
            out.draft.assign(tokens.begin() + from, tokens.begin() + from + cnt);
            // How far the agreement reaches back past the n-gram.
            int64_t m = n;
            while (m < kMaxEvidence && s - (m - n) - 1 >= 0 &&
                   tokens[static_cast<size_t>(s - (m - n) - 1)] ==
                       tokens[static_cast<size_t>(len - m - 1)])
                ++m;
            out.length = static_cast<int32_t>(m);
            return out;
        }
    }
    return out;
}

void NgramProposer::propose(std::span<DraftRequest*> reqs) {
    for (DraftRequest* r : reqs) {
        Match m = find(r->tokens, r->k, min_n_, max_n_);
        r->draft = std::move(m.draft);
        r->evidence = m.length;
        r->q.clear();
    }
}

}  // namespace warden::engine::speculative
