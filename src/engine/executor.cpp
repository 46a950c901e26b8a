#include "engine/executor.h"

#include "util/assert.h"
#include "util/error.h"

namespace warden::engine {

Executor::Executor(model::Transformer& tf, kv::KvCache& kv, kv::IntegrityMode mode)
    : tf_(tf), kv_(kv), mode_(mode) {}

StepResult Executor::execute(const StepBatch& batch) {
    const size_t n = batch.seqs.size();
    StepResult r;
    r.ok.assign(n, 0);
    r.violation.resize(n);
    r.logits.resize(n);
    if (batch.want_hidden) r.hidden.resize(n);
    ++stats_.steps;
    const int64_t vocab = tf_.model().config.vocab_size;
    const int64_t d_model = tf_.model().config.d_model;

    auto check = [&](size_t i) -> bool {
        ++stats_.integrity_checks;
        r.violation[i] = kv_.verify(batch.seqs[i].id, *batch.seqs[i].table);
        if (!r.violation[i]) return true;
        ++stats_.integrity_violations;
        return false;
    };

    // Step mode: verify every table before any layer runs; failed sequences are not batched.
    std::vector<size_t> members;  // batch index of each model input
    std::vector<model::SeqInput> inputs;
    std::vector<std::vector<int32_t>> page_ids(n);
    for (size_t i = 0; i < n; ++i) {
        const StepSeq& s = batch.seqs[i];
        WARDEN_ASSERT(s.table != nullptr, "executor: sequence without a page table");
        util::check(
            s.table->capacity(kv_.page_size()) >= s.pos0 + static_cast<int64_t>(s.tokens.size()),
            "executor: page table of seq " + std::to_string(s.id.v) + " does not cover the step");
        if (mode_ == kv::IntegrityMode::Step && !check(i)) continue;
        page_ids[i].reserve(s.table->pages.size());
        for (const kv::PageRef& p : s.table->pages) page_ids[i].push_back(p.page.v);
        const size_t rows = s.all_logits || s.verify ? s.tokens.size() : s.want_logits ? 1 : 0;
        if (rows) r.logits[i].assign(rows * static_cast<size_t>(vocab), 0.0f);
        model::SeqInput in;
        in.tokens = s.tokens;
        in.pos0 = s.pos0;
        in.page_ids = page_ids[i].data();
        in.logits = rows ? r.logits[i].data() : nullptr;
        in.all_logits = s.all_logits || s.verify;
        in.decode_rows = s.verify;
        if (batch.want_hidden) {
            r.hidden[i].assign(s.tokens.size() * static_cast<size_t>(d_model), 0.0f);
            in.hidden_out = r.hidden[i].data();
        }
        inputs.push_back(in);
        members.push_back(i);
    }
    if (inputs.empty()) return r;

    model::LayerCheck layer_check = [&](size_t input, int64_t) { return check(members[input]); };
    const auto alive =
        tf_.step(inputs, kv_.storage(), mode_ == kv::IntegrityMode::Layer ? &layer_check : nullptr);
    for (size_t j = 0; j < members.size(); ++j) {
        const size_t i = members[j];
        r.ok[i] = alive[j];
        if (!alive[j]) r.logits[i].clear();
        if (!alive[j] && batch.want_hidden) r.hidden[i].clear();
    }
    return r;
}

}  // namespace warden::engine
