// Speculative decoding inside the scheduler: drafts for the decoding sequences before a step
// (propose_drafts, draft_tokens), and after it the target's verdict (accept_verified): the
// longest prefix of the drafts the target agrees with is kept, the first disagreement is
// replaced by the target's own token, and the KV written for the rejected positions is rolled
// back (the table's length drops to the accepted length, whole pages past it return to the
// pool). Greedy sampling keeps exactly the tokens a step-by-step decode would produce; with
// temperature the tokens follow the target's distribution (rejection.h).
#include <algorithm>
#include <chrono>
#include <utility>

#include "engine/logit_processors.h"
#include "engine/scheduler.h"
#include "engine/scheduler_seq.h"
#include "engine/speculative/rejection.h"
#include "util/error.h"
#include "util/log.h"

namespace warden::engine {

void Scheduler::set_speculative(speculative::Proposer* p, speculative::SpecConfig cfg) {
    util::check(cfg.max_k >= 0 && cfg.max_k <= 64, "--spec-tokens must be in [0, 64]");
    // Verification needs a step's logits to equal a one-token step's: chunk-fresh KV makes them
    // depend on how the tokens are grouped.
    util::check(cfg.max_k == 0 || p == nullptr || kv_.storage().fresh != kernels::FreshKv::Chunk,
                "speculative decoding needs fresh KV 'self' or 'none' (not 'chunk')");
    proposer_ = cfg.max_k > 0 ? p : nullptr;
    spec_ = cfg;
    if (static_cast<int32_t>(stats_.spec.proposed_at.size()) < cfg.max_k) {
        stats_.spec.proposed_at.resize(static_cast<size_t>(cfg.max_k), 0);
        stats_.spec.accepted_at.resize(static_cast<size_t>(cfg.max_k), 0);
    }
}

// Asks the proposer for drafts of every sequence about to decode one token. How many each
// gets is the policy's choice (policy.h), capped so no draft runs past max_new_tokens: made
// before proposing from the sequence's acceptance, or, for a proposer whose drafts carry their
// evidence, after it from the acceptance measured for that evidence.
void Scheduler::propose_drafts() {
    const auto t0 = Clock::now();
    int64_t decoding = 0;
    for (const auto& p : running_)
        if (p && !p->finished && !p->cancelled &&
            p->n_computed + 1 == static_cast<int64_t>(p->tokens.size()))
            ++decoding;
    const bool by_evidence = spec_.adaptive && proposer_->sizes_by_evidence();
    // A proposer that follows every decoding sequence (MTP) runs whether or not it drafts: its
    // time is not a draft token's price.
    const double draft_share =
        proposer_->wants_hidden() ? 0.0 : draft_cost_.share(step_cost_, decoding);
    std::vector<speculative::DraftRequest> reqs;
    std::vector<Seq*> owners;
    reqs.reserve(running_.size());
    // Whether every sequence asked for a draft drafted in the previous step too: only then is
    // the proposer's time the steady price of its drafts (DraftCostModel), not a catch-up over
    // the tokens it skipped, which a probe pays once.
    bool steady = true;
    for (auto& p : running_) {
        if (!p) continue;
        Seq& s = *p;
        const bool drafted_last = std::exchange(s.spec.drafted_last, false);
        s.spec.input.clear();
        s.spec.q.clear();
        if (s.finished || s.cancelled || s.n_computed + 1 != static_cast<int64_t>(s.tokens.size()))
            continue;
        int64_t k = by_evidence ? spec_.max_k
                                : speculative::choose_k(spec_, s.spec.acceptance(), decoding,
                                                        step_cost_, draft_share);
        if (k == 0 && ++s.spec.idle_steps >= s.spec.probe_interval) {
            k = 1;  // probe now and then, so a sequence whose text turns repetitive is noticed
            s.spec.idle_steps = 0;
            s.spec.probing = true;
        }
        // Every verified token may be emitted: at most max_new_tokens - generated in all.
        k = std::min<int64_t>(k, s.req.max_new_tokens - s.generated() - 1);
        // A proposer that follows the target's hidden states (MTP) sees every decoding sequence,
        // k = 0 included, so it keeps up with them.
        if (k <= 0 && !proposer_->wants_hidden()) continue;
        k = std::max<int64_t>(k, 0);
        if (k > 0 && !drafted_last) steady = false;
        speculative::DraftRequest r;
        r.id = s.id;
        r.tokens = s.tokens;
        r.n_prompt = s.n_prompt;
        r.k = static_cast<int32_t>(k);
        r.sampling = &s.req.sampling;
        reqs.push_back(std::move(r));
        owners.push_back(&s);
    }
    if (reqs.empty()) return;
    std::vector<speculative::DraftRequest*> ptrs;
    for (auto& r : reqs) ptrs.push_back(&r);
    const auto t_propose = Clock::now();
    proposer_->propose(ptrs);
    int64_t drafted = 0;
    for (const auto& r : reqs) drafted += static_cast<int64_t>(r.draft.size());
    if (steady)
        draft_cost_.observe(
            drafted, std::chrono::duration<double, std::milli>(Clock::now() - t_propose).count());
    for (size_t j = 0; j < reqs.size(); ++j) {
        Seq& s = *owners[j];
        auto& r = reqs[j];
        s.spec.evidence = 0;
        util::check(static_cast<int32_t>(r.draft.size()) <= r.k &&
                        (r.q.empty() || r.q.size() == r.draft.size()),
                    std::string("speculative: proposer ") + proposer_->name() +
                        " returned a malformed draft");
        if (by_evidence && !r.draft.empty()) {
            const auto a = spec_evidence_.estimate(r.evidence);
            int64_t keep = speculative::choose_depth(spec_, a.first, a.next, decoding, step_cost_,
                                                     draft_share);
            if (keep == 0 && ++s.spec.idle_steps >= 16) keep = 1;  // probe the class now and then
            if (static_cast<int64_t>(r.draft.size()) > keep) {
                r.draft.resize(static_cast<size_t>(keep));
                if (r.q.size() > r.draft.size()) r.q.resize(r.draft.size());
            }
            s.spec.evidence = std::max(r.evidence, 1);
        }
    }
    if (spec_.adaptive && decoding > 1 && waiting_.empty() && !critical_path_drafts(owners, reqs))
        for (auto& r : reqs) {
            r.draft.clear();
            r.q.clear();
        }
    for (size_t j = 0; j < reqs.size(); ++j) {
        Seq& s = *owners[j];
        auto& r = reqs[j];
        if (r.draft.empty()) {
            s.spec.probing = false;
            continue;
        }
        s.spec.idle_steps = 0;
        s.spec.drafted_last = true;
        s.spec.input.reserve(r.draft.size() + 1);
        s.spec.input.push_back(s.tokens.back());
        s.spec.input.insert(s.spec.input.end(), r.draft.begin(), r.draft.end());
        s.spec.q = std::move(r.q);
    }
    stats_.spec.draft_ms += std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// With nothing waiting, a batch takes as many steps as its longest sequence needs: accepted
// drafts of any other sequence only move its rows to earlier steps, and rejected ones add rows,
// which costs once the step is compute-bound. So with several sequences decoding and an empty
// queue, drafts are worth verifying only when every sequence with the most tokens left
// (max_new_tokens) has one.
bool Scheduler::critical_path_drafts(const std::vector<Seq*>& owners,
                                     const std::vector<speculative::DraftRequest>& reqs) const {
    int64_t most = 0;
    for (const auto& p : running_)
        if (p && !p->finished && !p->cancelled &&
            p->n_computed + 1 == static_cast<int64_t>(p->tokens.size()))
            most = std::max(most, p->req.max_new_tokens - p->generated());
    for (const auto& p : running_) {
        if (!p || p->finished || p->cancelled ||
            p->n_computed + 1 != static_cast<int64_t>(p->tokens.size()) ||
            p->req.max_new_tokens - p->generated() < most)
            continue;
        const auto it = std::find(owners.begin(), owners.end(), p.get());
        if (it == owners.end() || reqs[static_cast<size_t>(it - owners.begin())].draft.empty())
            return false;
    }
    return true;
}

// The tokens the sequence verifies this step (1 + drafts), after reserving their pages; 0 or 1
// when it decodes plainly. Drafts never preempt anyone: without free pages (or budget) for all
// of them, the sequence drafts fewer.
int64_t Scheduler::draft_tokens(Seq& s, int64_t budget) {
    if (s.spec.input.size() < 2 || s.n_computed + 1 != static_cast<int64_t>(s.tokens.size()) ||
        s.tokens.back() != s.spec.input.front()) {
        s.spec.input.clear();
        return 0;
    }
    auto n = std::min<int64_t>(static_cast<int64_t>(s.spec.input.size()), budget);
    while (n > 1 && !kv_.reserve(s.table, s.n_computed + n)) {
        const int64_t short_by = kv_.pages_for(s.n_computed + n) -
                                 static_cast<int64_t>(s.table.pages.size()) -
                                 kv_.pool().free_pages();
        if (evict_for(short_by) == 0) --n;
    }
    s.spec.input.resize(static_cast<size_t>(std::max<int64_t>(n, 1)));
    if (s.spec.q.size() > s.spec.input.size() - 1) s.spec.q.resize(s.spec.input.size() - 1);
    if (n <= 1) s.spec.input.clear();
    return n;
}

// Applies a verify step's logits: row j is the target's distribution after input[0..j], so
// draft input[j + 1] is checked against row j; the first rejection (or a stop condition) ends
// the run. The accepted drafts' KV is kept, the rest rolled back.
void Scheduler::accept_verified(Seq& s, const StepSeq& ss, const std::vector<float>& logits,
                                Clock::time_point done) {
    const auto n_in = static_cast<int64_t>(ss.tokens.size());
    const auto vocab = static_cast<int64_t>(logits.size()) / n_in;
    util::check(vocab * n_in == static_cast<int64_t>(logits.size()) && n_in >= 2,
                "speculative: verify step returned the wrong number of logits");
    const std::vector<int32_t> input(ss.tokens.begin(), ss.tokens.end());
    const int64_t n_draft = n_in - 1;
    if (!s.spec.seeded) {
        s.spec.rng.seed(s.req.sampling.seed ^ 0x9e3779b97f4a7c15ULL);
        s.spec.seeded = true;
    }
    std::vector<float> work;
    int64_t accepted = 0;
    // Counted before any token is delivered: finishing hands the result over.
    s.res.timing.spec_proposed += n_draft;
    for (int64_t j = 0; j < n_in && !s.finished; ++j) {
        const std::span<const float> row(logits.data() + j * vocab, static_cast<size_t>(vocab));
        work.assign(row.begin(), row.end());
        apply_logit_processors(s.req, s.generated(), work);
        int32_t tok = 0;
        bool keep = false;
        if (j < n_draft) {
            const int32_t d = input[static_cast<size_t>(j + 1)];
            if (s.sampler->greedy()) {
                tok = s.sampler->sample(work, s.tokens, static_cast<size_t>(s.n_prompt));
                keep = tok == d;
            } else {
                const auto& p =
                    s.sampler->distribution(work, s.tokens, static_cast<size_t>(s.n_prompt));
                const speculative::Dist q =
                    static_cast<size_t>(j) < s.spec.q.size()
                        ? speculative::Dist(s.spec.q[static_cast<size_t>(j)])
                        : speculative::Dist();
                const double u = speculative::uniform01(s.spec.rng);
                const speculative::Verdict v = speculative::verify_token(p, q, d, u, s.spec.rng);
                tok = v.token;
                keep = v.accepted;
            }
            ++stats_.spec.proposed_at[static_cast<size_t>(j)];
            if (keep) ++stats_.spec.accepted_at[static_cast<size_t>(j)];
        } else {
            tok = s.sampler->sample(work, s.tokens, static_cast<size_t>(s.n_prompt));
        }
        // The position of input[j] is now final: its KV stays.
        ++s.n_computed;
        TokenInfo info;
        if (s.req.top_logprobs >= 0) info.logprobs = token_logprobs(row, tok, s.req.top_logprobs);
        s.tokens.push_back(tok);
        ++stats_.generated_tokens;
        const int64_t generated = s.generated();
        if (generated == 1) s.t_first = done;
        s.t_last = done;
        info.token = tok;
        if (keep) {
            ++accepted;
            ++s.res.timing.spec_accepted;
        }
        if (on_token_) on_token_(s.h, info);
        if (const auto why = stop_reason(s.req, tok, generated)) finish(s, *why);
        if (!keep) break;
    }
    ++stats_.spec.drafted_seqs;
    stats_.spec.proposed += n_draft;
    stats_.spec.accepted += accepted;
    speculative::update_acceptance(s.spec, n_draft, accepted);
    if (s.spec.evidence > 0) spec_evidence_.observe(s.spec.evidence, n_draft, accepted);
    s.spec.evidence = 0;
    s.spec.input.clear();
    s.spec.q.clear();
    if (s.finished) return;  // its pages are already back in the pool
    s.table.n_tokens = s.n_computed;
    if (proposer_) proposer_->rollback(s.id, s.n_computed);
    if (!rollback_pages(s)) {
        spdlog::warn("request {}: the pool refused a rolled-back page; ending it", s.h);
        finish(s, FinishReason::IntegrityError);
        return;
    }
    if (s.n_computed / kv_.page_size() > (s.n_computed - accepted - 1) / kv_.page_size()) offer(s);
}

// Whole pages past the sequence's computed length go back to the pool (the positions written
// for rejected drafts). False when the pool refused one: the table was stale.
bool Scheduler::rollback_pages(Seq& s) {
    const auto t0 = Clock::now();
    const int64_t keep = kv_.pages_for(s.n_computed);
    bool ok = true;
    while (static_cast<int64_t>(s.table.pages.size()) > keep) {
        const kv::PageRef p = s.table.pages.back();
        s.table.pages.pop_back();
        if (kv_.pool().release(p) != kv::PoolStatus::Ok) {
            ++stats_.refused_frees;
            ok = false;
        }
        ++stats_.spec.rollback_pages;
    }
    stats_.spec.rollback_ms += std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    return ok;
}

void Scheduler::release_draft(Seq& s) {
    s.spec.input.clear();
    s.spec.q.clear();
    if (proposer_) proposer_->release(s.id);
}

// Feeds the step-time model the policy weighs drafts with: decode-only steps (no prefill
// chunk), by rows.
void Scheduler::note_step_cost(const StepPlan& plan, double ms) {
    bool any_verify = false;
    for (const StepSeq& ss : plan.batch.seqs) {
        if (ss.tokens.size() > 1 && !ss.verify) return;
        any_verify = any_verify || ss.verify;
    }
    step_cost_.observe(plan.batch.n_tokens(), ms);
    if (any_verify) {
        ++stats_.spec.verify_steps;
        stats_.spec.verify_step_ms += ms;
    }
}

}  // namespace warden::engine
