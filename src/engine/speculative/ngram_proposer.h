#pragma once
// Prompt-lookup (n-gram) proposals, no model: find the most recent earlier occurrence of the
// sequence's last n tokens in its prompt + output, for the longest n in [min_n, max_n] that
// occurs, and propose the tokens that followed it. Pays off where the output quotes its input
// (summaries, edits, code changes, extraction).
#include "engine/speculative/proposer.h"

namespace warden::engine::speculative {

class NgramProposer final : public Proposer {
  public:
    explicit NgramProposer(int32_t min_n = 2, int32_t max_n = 4);
    const char* name() const override { return "ngram"; }
    void propose(std::span<DraftRequest*> reqs) override;

    // The lookup itself (tests): up to k tokens continuing `tokens`, or none.
    static std::vector<int32_t> lookup(std::span<const int32_t> tokens, int32_t k, int32_t min_n,
                                       int32_t max_n);

  private:
    int32_t min_n_, max_n_;
};

}  // namespace warden::engine::speculative
