#pragma once
// Draft-model proposals: a smaller or cheaper model (sharing the target's vocabulary) runs k
// decode steps ahead of each sequence. Self-speculation is the same checkpoint in a cheaper
// weight format (an int4 draft of a bf16 target): no second checkpoint needed.
//
// The draft's KV lives in the target's paged pool, under its own page table per sequence, with
// the same integrity check before every draft step and counted against the same budget (so the
// draft must share the target's KV geometry: layers, kv heads, head dim). Draft pages are taken
// only while the pool keeps a page per running sequence free, so drafting never forces a
// preemption; a sequence short of pages simply gets no draft that step. After verification the
// draft's KV past the accepted length is rolled back (rollback), and all of it is freed when
// the sequence ends or is preempted (release).
#include <memory>

#include "engine/speculative/proposer.h"
#include "engine/speculative/proposer_kv.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "model/transformer.h"

namespace warden::engine::speculative {

struct DraftStats {
    int64_t steps = 0, tokens = 0;  // draft forward steps, tokens run through the draft
    int64_t no_pages = 0;           // proposals skipped for want of free pages
    int64_t integrity_violations = 0;
};

class DraftProposer final : public Proposer {
  public:
    // `kv` is the target's cache (its geometry must match the draft's); `draft` is owned.
    DraftProposer(std::unique_ptr<model::Model> draft, kv::KvCache& kv, util::ThreadPool& pool);
    const char* name() const override { return "draft"; }
    void propose(std::span<DraftRequest*> reqs) override;
    void rollback(kv::SeqId id, int64_t n_valid) override;
    void release(kv::SeqId id) override;
    const DraftStats& stats() const { return stats_; }
    int64_t pages_held() const { return seqs_.pages_held(); }

  private:
    struct SeqDraft {
        kv::PageTable table;
        std::vector<int32_t> tokens;       // the inputs whose K/V the draft holds, in order
        std::unique_ptr<Sampler> sampler;  // temperature > 0: the draft's own draws
    };
    void shrink(SeqDraft& d, int64_t n_valid);

    std::unique_ptr<model::Model> model_;
    model::Transformer tf_;
    kv::KvCache& kv_;
    ProposerKv<SeqDraft> seqs_;
    DraftStats stats_;
};

}  // namespace warden::engine::speculative
