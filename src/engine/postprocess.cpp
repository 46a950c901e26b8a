// Applying a step's result to the sequences in it: integrity failures end their sequence,
// computed tokens advance it (and offer completed prefill pages to the prefix cache), and a
// sequence whose last token was computed gets its next token sampled, delivered and checked
// against the stop conditions.
#include <algorithm>
#include <optional>

#include "engine/scheduler.h"
#include "engine/scheduler_seq.h"
#include "util/error.h"
#include "util/log.h"

namespace warden::engine {

namespace {

// Stop conditions after a sampled token: a stop id ends the request as Stop, reaching
// max_new_tokens as Length (a stop id wins when both hold).
std::optional<FinishReason> stop_reason(const Request& req, int32_t token, int64_t generated) {
    if (std::find(req.stop_ids.begin(), req.stop_ids.end(), token) != req.stop_ids.end())
        return FinishReason::Stop;
    if (generated >= req.max_new_tokens) return FinishReason::Length;
    return std::nullopt;
}

}  // namespace

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
        const int64_t before = s.n_computed;
        s.n_computed += static_cast<int64_t>(batch.seqs[b].tokens.size());
        s.table.n_tokens = s.n_computed;
        // A prefill chunk that completed a page: offer the full pages now, so that concurrent
        // requests with the same prefix hit while this one is still running.
        if (batch.seqs[b].tokens.size() > 1 &&
            s.n_computed / kv_.page_size() > before / kv_.page_size())
            offer(s);
        if (batch.seqs[b].want_logits) sample_next(s, r.logits[b], done);
    }
}

// Samples the sequence's next token from its last position's logits, delivers it (on_token)
// and finishes the sequence when a stop condition holds.
void Scheduler::sample_next(Seq& s, const std::vector<float>& logits, Clock::time_point done) {
    if (s.generated() == 0 && s.req.on_prompt_computed)
        s.req.on_prompt_computed(kv_, s.table, logits);  // disaggregated prefill: hand off
    TokenInfo info;
    std::vector<float> work = logits;  // the sampler modifies its input; logprobs read the original
    const int32_t tok = s.sampler->sample(work, s.tokens, static_cast<size_t>(s.n_prompt));
    if (s.req.top_logprobs >= 0) info.logprobs = token_logprobs(logits, tok, s.req.top_logprobs);
    s.tokens.push_back(tok);
    ++stats_.generated_tokens;
    const int64_t generated = s.generated();
    if (generated == 1) s.t_first = done;
    s.t_last = done;
    info.token = tok;
    if (on_token_) on_token_(s.h, info);
    if (const std::optional<FinishReason> why = stop_reason(s.req, tok, generated)) finish(s, *why);
}

}  // namespace warden::engine
