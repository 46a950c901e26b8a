#pragma once
// Prompt-lookup (n-gram) proposals, no model: find the most recent earlier occurrence of the
// sequence's last n tokens in its prompt + output, for the longest n in [min_n, max_n] that
// occurs, and propose the tokens that followed it. Pays off where the output quotes its input
// (summaries, edits, code changes, extraction).
#include "engine/speculative/proposer.h"

namespace warden::engine::speculative {

class NgramProposer final : public Proposer {
  public:
    explicit NgramProposer(int32_t min_n = 1, int32_t max_n = 4);
    const char* name() const override { return "ngram"; }
    void propose(std::span<DraftRequest*> reqs) override;
    // The evidence is the match length: single-token matches are mostly wrong, matches of three
    // tokens or more mostly right (quoting), so the scheduler sizes each draft by it.
    bool sizes_by_evidence() const override { return true; }

    struct Match {
        std::vector<int32_t> draft;  // up to k tokens continuing the history, or none
        int32_t length = 0;  // how many tokens before the draft agree with the history's end
                             // (at least the n-gram; counted up to kMaxEvidence)
    };
    static constexpr int32_t kMaxEvidence = 16;
    static Match find(std::span<const int32_t> tokens, int32_t k, int32_t min_n, int32_t max_n);
    // The draft alone (tests).
    static std::vector<int32_t> lookup(std::span<const int32_t> tokens, int32_t k, int32_t min_n,
                                       int32_t max_n) {
        return find(tokens, k, min_n, max_n).draft;
    }

  private:
    int32_t min_n_, max_n_;
};

}  // namespace warden::engine::speculative
