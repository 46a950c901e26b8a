// Applying a step's result to the sequences in it: integrity failures end their sequence,
// computed tokens advance it (and offer completed prefill pages to the prefix cache), and a
// sequence whose last token was computed gets its next token sampled, delivered and checked
// against the stop conditions.
#include <algorithm>
#include <optional>

#include "engine/constrained_sample.h"
#include "engine/logit_processors.h"
#include "engine/scheduler.h"
#include "engine/scheduler_seq.h"
#include "util/error.h"
#include "util/log.h"

namespace warden::engine {

// Stop conditions after a sampled token: a stop id ends the request as Stop, reaching
// max_new_tokens as Length (a stop id wins when both hold).
std::optional<FinishReason> stop_reason(const Request& req, int32_t token, int64_t generated) {
    if (generated > req.min_tokens &&
        std::find(req.stop_ids.begin(), req.stop_ids.end(), token) != req.stop_ids.end())
        return FinishReason::Stop;
    if (generated >= req.max_new_tokens) return FinishReason::Length;
    return std::nullopt;
}

void Scheduler::postprocess(const StepPlan& plan, const StepResult& r, Clock::time_point done) {
    const StepBatch& batch = plan.batch;
    for (size_t b = 0; b < batch.seqs.size(); ++b) {
        Seq& s = *running_[plan.member[b]];
        if (s.cancelled) {
            util::check(!r.ok[b], "a cancelled sequence's stale step was not refused");
            continue;
        }
        if (s.finished) continue;
        if (!r.ok[b]) {
            s.res.violation = r.violation[b];
            if (r.violation[b])
                spdlog::warn("request {} aborted: {}", s.h, r.violation[b]->describe());
            finish(s, FinishReason::IntegrityError);
            continue;
        }
        if (batch.seqs[b].verify) {
            accept_verified(s, batch.seqs[b], r.logits[b], done);
            continue;
        }
        const int64_t before = s.n_computed;
        s.n_computed += static_cast<int64_t>(batch.seqs[b].tokens.size());
        s.table.n_tokens = s.n_computed;
        report_prompt_progress(s);
        // A prefill chunk that completed a page: offer the full pages now, so that concurrent
        // requests with the same prefix hit while this one is still running.
        if (batch.seqs[b].tokens.size() > 1 &&
            s.n_computed / kv_.page_size() > before / kv_.page_size())
            offer(s);
        if (batch.seqs[b].all_logits) {
            record_prompt_logprobs(s, before, r.logits[b]);
            if (batch.seqs[b].want_logits) {
                const size_t vocab = r.logits[b].size() / batch.seqs[b].tokens.size();
                sample_next(s,
                            std::vector<float>(r.logits[b].end() - static_cast<ptrdiff_t>(vocab),
                                               r.logits[b].end()),
                            done);
            }
        } else if (batch.seqs[b].want_logits) {
            sample_next(s, r.logits[b], done);
        }
    }
}

// Prompt tokens computed (or attached from the prefix cache) since the last report; positions
// recomputed after preemption were reported the first time.
void Scheduler::report_prompt_progress(Seq& s) {
    const int64_t upto = std::min(s.n_computed, s.n_prompt);
    if (upto <= s.n_prompt_reported) return;
    if (on_prompt_tokens_) on_prompt_tokens_(s.h, upto - s.n_prompt_reported);
    s.n_prompt_reported = upto;
}

// A prompt chunk computed at every position: row j (position pos0 + j) gives the logprob of
// prompt token pos0 + j + 1. Positions already recorded (a chunk recomputed after preemption)
// are skipped, so each is recorded once and in order.
void Scheduler::record_prompt_logprobs(Seq& s, int64_t pos0, const std::vector<float>& logits) {
    const auto vocab = static_cast<size_t>(exec_.vocab_size());
    const int64_t rows = static_cast<int64_t>(logits.size() / vocab);
    for (int64_t j = 0; j < rows; ++j) {
        const int64_t pos = pos0 + j;
        if (pos + 1 >= s.n_prompt || pos != static_cast<int64_t>(s.prompt_lp.size())) continue;
        const std::span<const float> row(logits.data() + static_cast<size_t>(j) * vocab, vocab);
        s.prompt_lp.push_back(
            token_logprobs(row, s.tokens[static_cast<size_t>(pos + 1)], s.req.prompt_logprobs));
    }
}

// Samples the sequence's next token from its last position's logits, delivers it (on_token)
// and finishes the sequence when a stop condition holds.
void Scheduler::sample_next(Seq& s, const std::vector<float>& logits, Clock::time_point done) {
    if (s.generated() == 0 && s.req.on_prompt_computed)
        s.req.on_prompt_computed(kv_, s.table, logits);  // disaggregated prefill: hand off
    if (s.generated() == 0) report_prompt_progress(s);   // a prompt prefilled elsewhere
    TokenInfo info;
    std::vector<float> work = logits;  // the sampler modifies its input; logprobs read the original
    apply_logit_processors(s.req, s.generated(), work);
    if (s.generated() == 0 && s.req.prompt_logprobs >= 0)
        info.prompt_logprobs = std::move(s.prompt_lp);
    const int32_t tok =
        s.req.constraint ? sample_constrained(*s.sampler, *s.req.constraint, work, s.req.stop_ids,
                                              s.tokens, static_cast<size_t>(s.n_prompt))
                         : s.sampler->sample(work, s.tokens, static_cast<size_t>(s.n_prompt));
    if (tok < 0) {  // the grammar allows no token at all: the output ends here
        finish(s, FinishReason::Stop);
        return;
    }
    if (s.req.top_logprobs >= 0) info.logprobs = token_logprobs(logits, tok, s.req.top_logprobs);
    s.tokens.push_back(tok);
    ++stats_.generated_tokens;
    const int64_t generated = s.generated();
    if (generated == 1) s.t_first = done;
    s.t_last = done;
    info.token = tok;
    if (on_token_) on_token_(s.h, info);
    if (const std::optional<FinishReason> why = stop_reason(s.req, tok, generated))
        finish(s, *why);
    else if (s.req.constraint && s.req.constraint->must_stop() && s.req.stop_ids.empty())
        finish(s, FinishReason::Stop);  // complete, and no stop token to end it with
}

}  // namespace warden::engine
