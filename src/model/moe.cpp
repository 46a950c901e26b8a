#include "model/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "util/error.h"

namespace warden::model {

namespace {

// Indices of the k largest of v[0, n) (ties: lower index first), best first.
void top_k_indices(const float* v, int64_t n, int64_t k, int32_t* out) {
    for (int64_t j = 0; j < k; ++j) out[j] = -1;
    for (int64_t i = 0; i < n; ++i) {
        // Insert i into the sorted list out[0, k) if it beats the last entry.
        int64_t pos = k;
        while (pos > 0 && (out[pos - 1] < 0 || v[i] > v[out[pos - 1]])) --pos;
        if (pos == k) continue;
        for (int64_t j = k - 1; j > pos; --j) out[j] = out[j - 1];
        out[pos] = static_cast<int32_t>(i);
    }
}

}  // namespace

void moe_route(const MoeConfig& m, const float* logits, const float* bias, int64_t n,
               int32_t* experts, float* weights) {
    const int64_t E = m.n_experts, K = m.top_k;
    util::check(E > 0 && K > 0 && K <= E, "moe_route: bad expert counts");
    std::vector<float> score(static_cast<size_t>(E)), choice(static_cast<size_t>(E));
    for (int64_t t = 0; t < n; ++t) {
        const float* lg = logits + t * E;
        int32_t* sel = experts + t * K;
        float* wt = weights + t * K;
        if (m.scoring == RouterScoring::Softmax) {
            std::memcpy(score.data(), lg, static_cast<size_t>(E) * sizeof(float));
            kernels::softmax(score.data(), E);
            top_k_indices(score.data(), E, K, sel);
            for (int64_t j = 0; j < K; ++j) wt[j] = score[static_cast<size_t>(sel[j])];
            if (m.norm_topk_prob) {
                float sum = 0.0f;
                for (int64_t j = 0; j < K; ++j) sum += wt[j];
                for (int64_t j = 0; j < K; ++j) wt[j] /= sum;
            }
            continue;
        }
        for (int64_t e = 0; e < E; ++e) {
            score[static_cast<size_t>(e)] = 1.0f / (1.0f + std::exp(-lg[e]));
            choice[static_cast<size_t>(e)] =
                score[static_cast<size_t>(e)] + (m.score_bias && bias ? bias[e] : 0.0f);
        }
        if (m.n_group > 1) {
            const int64_t G = m.n_group, per = E / G;
            std::vector<float> group_score(static_cast<size_t>(G));
            for (int64_t g = 0; g < G; ++g) {
                int32_t best2[2];
                top_k_indices(choice.data() + g * per, per, 2, best2);
                group_score[static_cast<size_t>(g)] =
                    choice[static_cast<size_t>(g * per + best2[0])] +
                    choice[static_cast<size_t>(g * per + best2[1])];
            }
            std::vector<int32_t> keep(static_cast<size_t>(m.topk_group));
            top_k_indices(group_score.data(), G, m.topk_group, keep.data());
            std::vector<char> eligible(static_cast<size_t>(G), 0);
            for (int32_t g : keep) eligible[static_cast<size_t>(g)] = 1;
            // -inf, as DeepSeek-V3's reference gate, transformers 5, vLLM and SGLang: with a
            // negative correction bias every eligible choice can be below 0, and a 0.0 mask would
            // then pick experts of groups that were just excluded.
            for (int64_t e = 0; e < E; ++e)
                if (!eligible[static_cast<size_t>(e / per)])
                    choice[static_cast<size_t>(e)] = -std::numeric_limits<float>::infinity();
        }
        top_k_indices(choice.data(), E, K, sel);
        for (int64_t j = 0; j < K; ++j) wt[j] = score[static_cast<size_t>(sel[j])];
        if (m.norm_topk_prob) {
            float sum = 0.0f;
            for (int64_t j = 0; j < K; ++j) sum += wt[j];
            sum += 1e-20f;
            for (int64_t j = 0; j < K; ++j) wt[j] /= sum;
        }
        for (int64_t j = 0; j < K; ++j) wt[j] *= m.routed_scaling;
    }
}

void MoeFfn::forward(const ModelConfig& c, const MoeWeights& w, const float* x, int64_t n,
                     float* out, util::ThreadPool& pool) {
    const MoeConfig& m = c.moe;
    const int64_t d = c.d_model, E = m.n_experts, K = m.top_k, de = m.d_expert;
    const auto N = static_cast<size_t>(n);
    logits_.resize(N * static_cast<size_t>(E));
    sel_.resize(N * static_cast<size_t>(K));
    wsel_.resize(N * static_cast<size_t>(K));
    if (observer) observer->observe(w.router, x, n);
    kernels::matmul(w.router.view(), x, n, logits_.data(), pool);
    moe_route(m, logits_.data(), w.router_bias.empty() ? nullptr : w.router_bias.data(), n,
              sel_.data(), wsel_.data());

    // Counting sort of the (token, slot) pairs by expert; within an expert, token order.
    counts_.assign(static_cast<size_t>(E), 0);
    for (int32_t e : sel_) ++counts_[static_cast<size_t>(e)];
    start_.assign(static_cast<size_t>(E) + 1, 0);
    for (int64_t e = 0; e < E; ++e)
        start_[static_cast<size_t>(e) + 1] =
            start_[static_cast<size_t>(e)] + counts_[static_cast<size_t>(e)];
    order_.resize(N * static_cast<size_t>(K));
    {
        std::vector<int64_t> fill(start_.begin(), start_.end() - 1);
        for (int64_t i = 0; i < n * K; ++i)
            order_[static_cast<size_t>(fill[static_cast<size_t>(sel_[static_cast<size_t>(i)])]++)] =
                i;
    }

    std::fill(out, out + n * d, 0.0f);
    const int64_t ws = m.n_shared * de;
    // Experts go to the pool in chunks of whole experts holding at most `budget` gathered rows
    // (a batch-1 or batch-32 step is one chunk): per chunk, one kernels::matmul_grouped call for
    // every expert's gate and up and one for every down, instead of two dispatches per expert,
    // each with its barrier (what bounded batch 1: docs/MOE.md, Tried and dropped). The budget
    // keeps the gathered buffers at O(max(n, 256)) rows for a long prefill chunk, as one expert's
    // were.
    const int64_t budget = std::max<int64_t>(n, 256);
    auto chunk_end = [&](int64_t e0) {  // experts [e0, result) form the chunk that starts at e0
        const int64_t r0 = start_[static_cast<size_t>(e0)];
        int64_t e1 = e0 + 1;
        while (e1 < E && start_[static_cast<size_t>(e1) + 1] - r0 <= budget) ++e1;
        return e1;
    };
    // Gathered rows of any chunk: at most the budget (one expert has at most n rows), and at most
    // all n * top_k.
    const int64_t cap = std::min(n * K, budget);
    xe_.resize(static_cast<size_t>(cap * d));
    ye_.resize(static_cast<size_t>(cap * d));
    g_.resize(static_cast<size_t>(cap * de));
    u_.resize(static_cast<size_t>(cap * de));
    gs_.resize(static_cast<size_t>(n * ws));
    us_.resize(static_cast<size_t>(n * ws));
    ys_.resize(static_cast<size_t>(m.n_shared > 0 ? n * d : 0));
    // groups_ holds spans of outs_: with room for a chunk's most matrices (every expert's gate
    // and up, the shared expert's) reserved, outs_ never reallocates under them.
    outs_.reserve(static_cast<size_t>(2 * E + 2));

    for (int64_t e0 = 0; e0 < E;) {
        const int64_t e1 = chunk_end(e0);
        const int64_t r0 = start_[static_cast<size_t>(e0)], r1 = start_[static_cast<size_t>(e1)];
        const bool shared = e0 == 0 && m.n_shared > 0;  // the shared experts join the first chunk
        // An expert that every token chose has the tokens in order as its rows (top-k picks an
        // expert at most once per token; order_ keeps token order), i.e. x itself: every routed
        // expert of a batch-1 step. Its gate and up read x in place, in one group with the shared
        // experts', so x is quantized once for all of them, as for the dense FFN.
        auto reads_x = [&](int64_t e) { return n > 0 && counts_[static_cast<size_t>(e)] == n; };

        // Gate and up.
        outs_.clear();
        groups_.clear();
        for (int64_t e = e0; e < e1; ++e) {
            if (!reads_x(e)) continue;
            const auto ue = static_cast<size_t>(e);
            const int64_t o = start_[ue] - r0;
            if (observer) {
                observer->observe(w.gate[ue], x, n);
                observer->observe(w.up[ue], x, n);
            }
            outs_.push_back({&w.gate[ue].view(), g_.data() + o * de});
            outs_.push_back({&w.up[ue].view(), u_.data() + o * de});
        }
        if (shared) {
            if (observer) {
                observer->observe(w.shared_gate, x, n);
                observer->observe(w.shared_up, x, n);
            }
            outs_.push_back({&w.shared_gate.view(), gs_.data()});
            outs_.push_back({&w.shared_up.view(), us_.data()});
        }
        if (!outs_.empty()) groups_.push_back({std::span(outs_.data(), outs_.size()), x, n});
        for (int64_t e = e0; e < e1; ++e) {
            const auto ue = static_cast<size_t>(e);
            const int64_t rows = counts_[ue], o = start_[ue] - r0;
            if (rows == 0 || reads_x(e)) continue;
            float* xe = xe_.data() + o * d;
            for (int64_t j = 0; j < rows; ++j) {
                const int64_t t = order_[static_cast<size_t>(start_[ue] + j)] / K;
                std::memcpy(xe + j * d, x + t * d, static_cast<size_t>(d) * sizeof(float));
            }
            if (observer) {
                observer->observe(w.gate[ue], xe, rows);
                observer->observe(w.up[ue], xe, rows);
            }
            outs_.push_back({&w.gate[ue].view(), g_.data() + o * de});
            outs_.push_back({&w.up[ue].view(), u_.data() + o * de});
            groups_.push_back({std::span(outs_.data() + outs_.size() - 2, 2), xe, rows});
        }
        kernels::matmul_grouped(groups_, pool);
        kernels::silu_mul(g_.data(), u_.data(), g_.data(), (r1 - r0) * de);
        if (shared) kernels::silu_mul(gs_.data(), us_.data(), gs_.data(), n * ws);

        // Down: every expert's input is its own rows of g_.
        outs_.clear();
        groups_.clear();
        auto add_down = [&](const Matrix& wd, const float* in, int64_t rows, float* y) {
            if (observer) observer->observe(wd, in, rows);
            outs_.push_back({&wd.view(), y});
            groups_.push_back({std::span(outs_.data() + outs_.size() - 1, 1), in, rows});
        };
        for (int64_t e = e0; e < e1; ++e) {
            const auto ue = static_cast<size_t>(e);
            if (counts_[ue] == 0) continue;
            add_down(w.down[ue], g_.data() + (start_[ue] - r0) * de, counts_[ue],
                     ye_.data() + (start_[ue] - r0) * d);
        }
        if (shared) add_down(w.shared_down, gs_.data(), n, ys_.data());
        kernels::matmul_grouped(groups_, pool);
        // Weighted sum into out, in expert order then token order (as one expert at a time did).
        for (int64_t i = r0; i < r1; ++i) {
            const int64_t slot = order_[static_cast<size_t>(i)];
            kernels::axpy_f32(wsel_[static_cast<size_t>(slot)], ye_.data() + (i - r0) * d,
                              out + (slot / K) * d, d);
        }
        e0 = e1;
    }
    if (m.n_shared > 0)
        for (int64_t i = 0; i < n * d; ++i) out[i] += ys_[static_cast<size_t>(i)];
}

std::unique_ptr<MoeWeights> load_moe_weights(const ModelConfig& c, const MoeTensorLoader& load) {
    const MoeConfig& m = c.moe;
    const int64_t d = c.d_model, de = m.d_expert;
    auto w = std::make_unique<MoeWeights>();
    w->router = load.matrix_f32("mlp.gate.weight", m.n_experts, d);
    if (m.score_bias) w->router_bias = load.vec("mlp.gate.e_score_correction_bias", m.n_experts);
    w->gate.reserve(static_cast<size_t>(m.n_experts));
    w->up.reserve(static_cast<size_t>(m.n_experts));
    w->down.reserve(static_cast<size_t>(m.n_experts));
    for (int64_t e = 0; e < m.n_experts; ++e) {
        const std::string p = "mlp.experts." + std::to_string(e) + ".";
        w->gate.push_back(load.matrix(p + "gate_proj.weight", de, d));
        w->up.push_back(load.matrix(p + "up_proj.weight", de, d));
        w->down.push_back(load.matrix(p + "down_proj.weight", d, de));
    }
    if (m.n_shared > 0) {
        const int64_t ws = m.n_shared * de;
        w->shared_gate = load.matrix("mlp.shared_experts.gate_proj.weight", ws, d);
        w->shared_up = load.matrix("mlp.shared_experts.up_proj.weight", ws, d);
        w->shared_down = load.matrix("mlp.shared_experts.down_proj.weight", d, ws);
    }
    return w;
}

}  // namespace warden::model
