#include "engine/speculative/policy.h"

#include <algorithm>
#include <cmath>

namespace warden::engine::speculative {

void StepCostModel::add(double rows, double ms, double weight) {
    w_ += weight;
    sx_ += weight * rows;
    sy_ += weight * ms;
    sxx_ += weight * rows * rows;
    sxy_ += weight * rows * ms;
}

void StepCostModel::observe(int64_t rows, double ms) {
    constexpr double kDecay = 0.98;  // about the last 50 steps
    const auto x = static_cast<double>(rows);
    if (w_ == 0 && ms > 0) {
        // The prior, scaled to the first step, as kPriorWeight steps of 1 and of 5 rows: they
        // fade with the measured steps, so a shared machine's first few cannot fit a slope near
        // zero or one and size the drafts by it.
        const double t0 = ms / (1.0 + kPriorRow * x);
        add(1, t0 * (1.0 + kPriorRow), kPriorWeight);
        add(5, t0 * (1.0 + 5 * kPriorRow), kPriorWeight);
    }
    // A step the machine's other work preempted reads as several times its cost: each step
    // moves the fit by at most a factor of two from what it predicts.
    double t0 = 0, t_row = 0;
    if (fit(t0, t_row)) {
        const double predicted = t0 + t_row * x;
        ms = std::clamp(ms, 0.5 * predicted, 2.0 * predicted);
    }
    w_ *= kDecay;
    sx_ *= kDecay;
    sy_ *= kDecay;
    sxx_ *= kDecay;
    sxy_ *= kDecay;
    add(x, ms, 1.0);
}

bool StepCostModel::fit(double& t0, double& t_row) const {
    const double var = sxx_ * w_ - sx_ * sx_;
    if (w_ <= 0 || var <= 1e-6 * w_ * w_) return false;
    const double slope = (sxy_ * w_ - sx_ * sy_) / var;
    if (slope <= 0) return false;
    // A noisy fit can put the intercept near zero, which would read every row as the whole
    // cost: the fixed part is taken as at least a fifth of the mean step.
    t_row = slope;
    t0 = std::max((sy_ - slope * sx_) / w_, 0.2 * sy_ / w_);
    return true;
}

bool StepCostModel::step_ms(int64_t rows, double& ms) const {
    double t0 = 0, t_row = 0;
    if (!fit(t0, t_row)) return false;
    ms = t0 + static_cast<double>(std::max<int64_t>(rows, 1)) * t_row;
    return true;
}

void DraftCostModel::observe(int64_t drafted_tokens, double ms) {
    if (drafted_tokens <= 0 || !(ms >= 0)) return;
    constexpr double kDecay = 0.9;  // about the last 10 proposals
    tokens_ = tokens_ * kDecay + static_cast<double>(drafted_tokens);
    ms_ = ms_ * kDecay + ms;
}

double DraftCostModel::share(const StepCostModel& step, int64_t decode_rows) const {
    double t = 0;
    if (tokens_ <= 0 || !step.step_ms(decode_rows, t) || t <= 0) return 0.0;
    return static_cast<double>(std::max<int64_t>(decode_rows, 1)) * (ms_ / tokens_) / t;
}

double StepCostModel::row_share(int64_t rows) const {
    double t0 = 1.0, t_row = kPriorRow;  // the prior until the steps can be fitted
    (void)fit(t0, t_row);
    const auto b = static_cast<double>(std::max<int64_t>(rows, 1));
    return b * t_row / (t0 + b * t_row);
}

int32_t choose_k(const SpecConfig& cfg, double a, int64_t decode_rows, const StepCostModel& cost,
                 double draft_share) {
    if (a < 0) a = cfg.initial_acceptance;
    return choose_depth(cfg, a, a, decode_rows, cost, draft_share);
}

int32_t choose_depth(const SpecConfig& cfg, double first, double next, int64_t decode_rows,
                     const StepCostModel& cost, double draft_share) {
    if (cfg.max_k <= 0) return 0;
    if (!cfg.adaptive) return cfg.max_k;
    const double share = cost.row_share(decode_rows) + std::max(0.0, draft_share);
    int32_t k = 0;
    double p = first;  // the chance that every token up to depth k + 1 is kept
    while (k < cfg.max_k && p > share) {
        ++k;
        p *= next;
    }
    return k;
}

void update_acceptance(SeqState& st, int64_t n_proposed, int64_t n_accepted) {
    if (n_proposed > 0) {
        // The maximum-likelihood rate of a geometric run counts a draft kept whole as no
        // rejection, so a draft cut short by its depth does not read as one (a one-token draft
        // kept every time reads as nearly 1, not as one kept token of two). About the last five
        // verifications count.
        constexpr double kDecay = 0.8;
        st.kept = st.kept * kDecay + static_cast<double>(n_accepted);
        st.rejected = st.rejected * kDecay + (n_accepted < n_proposed ? 1.0 : 0.0);
    }
    if (st.probing && n_proposed > 0)
        st.probe_interval =
            n_accepted > 0 ? kProbeInterval : std::min(2 * st.probe_interval, kMaxProbeInterval);
    st.probing = false;
}

size_t EvidenceAcceptance::bucket(int32_t evidence) {
    if (evidence <= 1) return 0;
    if (evidence == 2) return 1;
    if (evidence <= 4) return 2;
    if (evidence <= 8) return 3;
    return 4;
}

EvidenceAcceptance::Estimate EvidenceAcceptance::estimate(int32_t evidence) const {
    const size_t b = bucket(evidence);
    const First& f = first_[b];
    Estimate e;
    e.first = (f.kept + kFirstPrior[b]) / (f.tried + 1.0);
    e.next = (next_kept_ + kNextPrior) / (next_kept_ + next_rejected_ + 1.0);
    return e;
}

void EvidenceAcceptance::observe(int32_t evidence, int64_t n_proposed, int64_t n_accepted) {
    if (n_proposed <= 0) return;
    // About the last 10 verifications: the text a sequence copies changes within a few
    // sentences (a quote ends, a summary leaves its source).
    constexpr double kDecay = 0.9;
    First& f = first_[bucket(evidence)];
    f.kept = f.kept * kDecay + (n_accepted > 0 ? 1.0 : 0.0);
    f.tried = f.tried * kDecay + 1.0;
    if (n_accepted > 0 && n_proposed > 1) {
        next_kept_ = next_kept_ * kDecay + static_cast<double>(n_accepted - 1);
        next_rejected_ = next_rejected_ * kDecay + (n_accepted < n_proposed ? 1.0 : 0.0);
    }
}

}  // namespace warden::engine::speculative
