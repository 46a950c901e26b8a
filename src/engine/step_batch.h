#pragma once
// The one thing the scheduler hands the executor per step. No global "current context":
// everything a step needs about each sequence is here.
#include <cstdint>
#include <span>
#include <vector>

#include "kv/page_table.h"

namespace warden::engine {

struct StepSeq {
    kv::SeqId id;
    std::span<const int32_t>
        tokens;        // tokens to compute this step (prefill chunk or 1 decode token)
    int64_t pos0 = 0;  // their first position == tokens already cached
    const kv::PageTable* table =
        nullptr;              // covers [0, pos0 + tokens.size()), with expected generations
    bool want_logits = true;  // logits of the last token (sampling needs them)
    // Logits of every token of the step ([n, vocab]; the last row is the one above). Only
    // for prompt logprobs: other sequences of the batch compute exactly what they would alone.
    bool all_logits = false;
    // Speculative verification: the tokens are the last sampled one and drafts after it; every
    // position's logits come back ([n, vocab]) and the rows are computed as decode rows (the
    // runtime weights, not --prefill-weights), so each equals a one-token step's bits.
    bool verify = false;
};

struct StepBatch {
    std::vector<StepSeq> seqs;
    // Every computed row's final hidden state comes back too (StepResult::hidden): an MTP
    // proposer reads them (speculative/mtp_proposer.h).
    bool want_hidden = false;
    int64_t n_tokens() const {
        int64_t n = 0;
        for (const auto& s : seqs) n += static_cast<int64_t>(s.tokens.size());
        return n;
    }
};

}  // namespace warden::engine
