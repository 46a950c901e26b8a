#pragma once
// Speculative decoding's configuration, per-sequence state, counters, and the choice of how
// many tokens to draft for a sequence in a step.
//
// The choice (adaptive): a draft token at depth i is worth a^i tokens (a: the sequence's
// measured per-token acceptance rate) and costs one more row in the step. With the step's time
// modelled as T(B) = T0 + B * t_row over its B rows (fitted online over recent steps), a token
// is worth T(B) / B of step time at B decoding rows, so depth i is drafted while
// a^i * T(B) / B > t_row. At batch 1 the step is weight-bound (t_row << T0) and long drafts pay;
// at high concurrency the step is compute-bound (B * t_row ~ T(B)) and only near-certain drafts
// do, so speculation switches itself off where it would slow the batch down.
#include <array>
#include <cstdint>
#include <random>
#include <vector>

namespace warden::engine::speculative {

struct SpecConfig {
    int32_t max_k = 0;                // 0: speculation off
    bool adaptive = true;             // false: always draft max_k (tests, measurements)
    double initial_acceptance = 0.6;  // a sequence's acceptance estimate before any verification
};

inline constexpr int64_t kProbeInterval = 16;
inline constexpr int64_t kMaxProbeInterval = 256;

// Per sequence (lives in the scheduler's Seq).
struct SeqState {
    std::vector<int32_t> input;  // this step's verified input: the last sampled token, drafts
    std::vector<std::vector<std::pair<float, int32_t>>> q;  // the drafts' distributions
    // Draft tokens kept and drafts cut by a rejection, exponentially decayed (update_acceptance);
    // acceptance() is their per-token rate.
    double kept = 0, rejected = 0;
    // Per-token acceptance, tokens kept over tokens tried, with half a rejection of prior so a run
    // of whole drafts does not read as certain; < 0 before any verification.
    double acceptance() const {
        return kept + rejected > 0 ? kept / (kept + rejected + 0.5) : -1.0;
    }
    int32_t evidence = 0;    // the verified draft's evidence (DraftRequest::evidence; 0: none)
    int64_t idle_steps = 0;  // decode steps since the last draft (probing when adaptivity stops)
    // Decode steps between probes while the policy drafts nothing: doubled after each probe that
    // keeps no token (up to kMaxProbeInterval), back to kProbeInterval once one is kept, so a
    // draft model that does not match the target stops paying for its catch-up passes.
    int64_t probe_interval = kProbeInterval;
    bool probing = false;       // this step's draft is a probe
    bool drafted_last = false;  // the previous step verified a draft of this sequence
    std::mt19937_64 rng;        // acceptance tests and replacement draws (seeded from the request)
    bool seeded = false;
};

struct SpecStats {
    int64_t verify_steps = 0;  // steps with at least one draft
    int64_t drafted_seqs = 0;  // (sequence, step) pairs with a draft
    int64_t proposed = 0, accepted = 0;
    std::vector<int64_t> proposed_at, accepted_at;  // by draft position 1..K (index 0 = 1)
    double draft_ms = 0, verify_step_ms = 0, rollback_ms = 0;
    int64_t rollback_pages = 0;  // whole pages past the accepted length given back
};

// Online fit of step time against rows: T(B) = T0 + B * t_row (exponentially weighted).
class StepCostModel {
  public:
    void observe(int64_t rows, double ms);
    // t_row / T(B) * B: the fraction of a B-row step's time its rows cost (in (0, 1)).
    double row_share(int64_t rows) const;

    // Before the steps are measured, a row is taken to cost half the fixed part, as the int4
    // kernels' extra rows do on a CPU core (a one-row step of the default model is 3.8 ms, each
    // further row 1.4 ms; docs/SPECULATIVE.md). Assuming rows nearly free made a sequence's
    // first drafts four tokens deep whatever their evidence.
    static constexpr double kPriorRow = 0.5;
    static constexpr double kPriorWeight = 4.0;  // steps, at each of two sizes

    // The fitted time of a step of `rows` rows in ms; false (ms untouched) before the steps can
    // be fitted.
    bool step_ms(int64_t rows, double& ms) const;

  private:
    void add(double rows, double ms, double weight);
    // False (t0, t_row untouched): too few or too alike steps to fit.
    bool fit(double& t0, double& t_row) const;
    double w_ = 0, sx_ = 0, sy_ = 0, sxx_ = 0, sxy_ = 0;
};

// The proposer's own time per drafted token in steady drafting (a draft model's forward passes;
// about zero for prompt lookup), exponentially weighted over recent proposals; the caller leaves
// out proposals that first catch up over tokens the draft skipped, which a probe pays once. A token
// at depth i then pays only while a^i * T(B) / B > t_row + draft time per token; without this a
// draft model whose drafts are rarely kept (a poor match for the target) costs its forward passes
// for nothing.
class DraftCostModel {
  public:
    void observe(int64_t drafted_tokens, double ms);
    // The proposer's share of a step of `decode_rows` rows per draft token it adds:
    // decode_rows * (ms per drafted token) / T(decode_rows); 0 before either is measured.
    double share(const StepCostModel& step, int64_t decode_rows) const;

  private:
    double tokens_ = 0, ms_ = 0;
};

// How many tokens to draft for a sequence with acceptance estimate `a` in a step with
// `decode_rows` decoding sequences; draft_share: DraftCostModel::share.
int32_t choose_k(const SpecConfig& cfg, double a, int64_t decode_rows, const StepCostModel& cost,
                 double draft_share = 0.0);

// Folds one verification into the sequence's acceptance estimate (and, after a probe, its
// probe interval).
void update_acceptance(SeqState& st, int64_t n_proposed, int64_t n_accepted);

// A draft's acceptance as two rates: `first`, that its first token is kept, and `next`, that a
// later token is kept given every token before it was. Depth i is drafted while
// first * next^(i-1) > B * t_row / T(B). Prompt lookup needs the split: its first token is the
// risky one (the output may leave the quoted text at any token), while the tokens after a kept
// one nearly always follow (a draft continues a quote), so one per-token rate a with a^i
// under-drafts the quotes it pays on and over-drafts guesses.
int32_t choose_depth(const SpecConfig& cfg, double first, double next, int64_t decode_rows,
                     const StepCostModel& cost, double draft_share = 0.0);

// Acceptance by the proposer's evidence (DraftRequest::evidence), measured over all sequences:
// for prompt lookup, a draft found from a one-token match is rarely kept and one continuing a
// match of three tokens or more nearly always (quoted text), whatever the sequence's recent
// record, so each draft is sized by its evidence class. `first` is measured per class (1, 2,
// 3-4, 5-8, 9+ matched tokens) as kept / tried over the class's recent verifications; `next`
// over all classes as kept / (kept + rejections) of the tokens after a kept first one (a fully
// kept draft counts its tokens and no rejection, so always-kept drafts drive it towards 1 and
// let the drafts grow). Both start from a prior weighted as one verification.
class EvidenceAcceptance {
  public:
    struct Estimate {
        double first = 0, next = 0;
    };
    Estimate estimate(int32_t evidence) const;
    void observe(int32_t evidence, int64_t n_proposed, int64_t n_accepted);

    // The priors: first-token acceptance by class (measured on the grounded prompts of
    // bench/spec_bench.py) and the continuation's.
    static constexpr std::array<double, 5> kFirstPrior{0.2, 0.5, 0.7, 0.85, 0.9};
    static constexpr double kNextPrior = 0.8;

  private:
    static size_t bucket(int32_t evidence);  // 1, 2, 3-4, 5-8, 9 and more
    struct First {
        double kept = 0, tried = 0;  // exponentially decayed per verification
    };
    std::array<First, 5> first_{};
    double next_kept_ = 0, next_rejected_ = 0;
};

}  // namespace warden::engine::speculative
