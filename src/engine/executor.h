#pragma once
// Runs a StepBatch through the model over the paged KV cache, enforcing the integrity
// contract: before a sequence's KV is read or written (once per step, or before every layer),
// its page table is checked against the pool; a sequence that fails is dropped from the step
// untouched and reported, and every other sequence computes exactly what it would have.
#include <cstdint>
#include <optional>
#include <vector>

#include "engine/step_batch.h"
#include "kv/kv_cache.h"
#include "model/transformer.h"

namespace warden::engine {

struct StepResult {
    // Per sequence of the batch, in order:
    std::vector<char> ok;                                          // computed fully
    std::vector<std::optional<kv::IntegrityViolation>> violation;  // why not, when !ok
    // [vocab] when ok && want_logits; [n, vocab] (every token of the step) when all_logits or
    // verify
    std::vector<std::vector<float>> logits;
    // [n, d_model] per ok sequence when the batch wants_hidden (model::SeqInput::hidden_out)
    std::vector<std::vector<float>> hidden;
};

struct ExecutorStats {
    int64_t steps = 0;
    int64_t integrity_checks = 0;      // page-table verifications run
    int64_t integrity_violations = 0;  // sequences dropped by a failed check
};

class Executor {
  public:
    Executor(model::Transformer& tf, kv::KvCache& kv, kv::IntegrityMode mode);

    StepResult execute(const StepBatch& batch);
    const ExecutorStats& stats() const { return stats_; }
    kv::IntegrityMode mode() const { return mode_; }
    int64_t vocab_size() const { return tf_.model().config.vocab_size; }

  private:
    model::Transformer& tf_;
    kv::KvCache& kv_;
    kv::IntegrityMode mode_;
    ExecutorStats stats_;
};

}  // namespace warden::engine
