#pragma once
// Multi-token-prediction drafts: the nextn layer that DeepSeek-V3 / Kimi-K2 and GLM-4.5
// checkpoints ship after their decoder layers (model::load_mtp_model) predicts the token after
// next from the target's final hidden state and the next token:
//
//   row p:  x = eh_proj([enorm(embed(t[p+1])), hnorm(h[p])]), one decoder block at position p
//           (its own KV), shared_head.norm and the head -> logits for t[p+2]
//
// h[p] is the target's hidden state at position p after its final norm (the input of its head,
// as vLLM and SGLang hand it over), and the embedding is zero at position 0 (vLLM's DeepSeek MTP).
// Every target position gets its MTP row once its next token is final, so the layer's KV covers
// the sequence like the target's. The first draft comes from the last row (the token just
// sampled); draft j + 1 chains the layer on its own output: row p + j takes draft j and the
// block output of row p + j - 1 (before shared_head.norm), as vLLM does when it asks one MTP
// layer for several tokens. Chained rows are provisional: the next proposal rewrites them from
// the target's real hidden states.
//
// The target's hidden states arrive after every step (observe_hidden) and are held until their
// row runs: one row per sequence and decode step, a verify step's rows, or a whole prompt until
// the sequence's first proposal (d_model floats per token). A sequence whose prompt the target
// did not compute (prefix-cache hits) has no hidden states for it and gets no MTP drafts.
//
// The MTP layer's KV lives in the target's paged pool under its own page table per sequence,
// like a draft model's (draft_proposer.h): same integrity check before each MTP step, same
// budget, pages taken only while one page per decoding sequence stays free. It uses the first
// layer slot of its pages (the pool's pages are sized for all the target's layers).
#include <map>
#include <memory>

#include "engine/speculative/proposer.h"
#include "engine/speculative/proposer_kv.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "model/transformer.h"

namespace warden::engine::speculative {

struct MtpStats {
    int64_t steps = 0, rows = 0;  // MTP forward steps, rows run through the layer
    int64_t no_pages = 0;         // proposals skipped for want of free pages
    int64_t no_hidden = 0;        // sequences without the target's hidden states (no drafts)
    int64_t integrity_violations = 0;
};

class MtpProposer final : public Proposer {
  public:
    // `mtp` is model::load_mtp_model's one-layer model (owned); `kv` the target's cache.
    MtpProposer(std::unique_ptr<model::Model> mtp, kv::KvCache& kv, util::ThreadPool& pool);
    const char* name() const override { return "mtp"; }
    void propose(std::span<DraftRequest*> reqs) override;
    void rollback(kv::SeqId id, int64_t n_valid) override;
    void release(kv::SeqId id) override;
    bool wants_hidden() const override { return true; }
    void observe_hidden(kv::SeqId id, int64_t pos0, std::span<const int32_t> tokens,
                        const float* hidden) override;
    const MtpStats& stats() const { return stats_; }
    int64_t pages_held() const { return seqs_.pages_held(); }

  private:
    struct SeqMtp {
        kv::PageTable table;
        int64_t rows = 0;  // MTP rows [0, rows) are final (real hidden states, final tokens)
        std::map<int64_t, std::vector<float>> hidden;  // position -> target hidden, not yet run
        bool lost = false;  // a position's hidden state never came: no drafts until release
        std::unique_ptr<Sampler> sampler;  // temperature > 0: the MTP's own draws
    };
    void shrink(SeqMtp& m, int64_t n_rows);

    std::unique_ptr<model::Model> model_;
    model::Transformer tf_;
    kv::KvCache& kv_;
    ProposerKv<SeqMtp> seqs_;
    MtpStats stats_;
};

}  // namespace warden::engine::speculative
