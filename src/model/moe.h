#pragma once
// Mixture-of-experts FFN (Qwen3-MoE, GLM-4 MoE, DeepSeek-V3): a router picks top_k routed
// experts per token, each expert is a SwiGLU FFN, and the outputs are summed with the router's
// weights, plus optional always-on shared experts.
//
// Expert matmuls are batched by expert across the tokens of a step: the rows routed to expert e
// are gathered, go through e's three matmuls at once (its weights are read once per step, not
// once per token), and are scatter-added back with their routing weights. Per token the routed
// outputs are added in ascending expert order (as transformers does), so a token's result does
// not depend on which other tokens share the step (the matmul kernels are batch-invariant).
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/matmul.h"
#include "model/activation_observer.h"
#include "model/model_config.h"
#include "model/weights.h"
#include "util/thread_pool.h"

namespace warden::model {

// Expert selection for n tokens. logits: [n, n_experts] router outputs; bias: [n_experts]
// correction bias (used for Sigmoid scoring when m.score_bias; may be nullptr otherwise).
// Writes experts[n, top_k] (distinct ids, best first) and weights[n, top_k]:
//  Softmax: p = softmax(logits); top_k of p; renormalized to sum 1 when norm_topk_prob.
//  Sigmoid: s = sigmoid(logits); choice = s + bias; with n_group > 1 each group is scored by the
//           sum of its two best choices, the best topk_group groups stay eligible and the other
//           experts' choices become -inf (DeepSeek-V3's masked_fill); top_k of choice; the weights
//           are s (without bias), renormalized when norm_topk_prob (sum + 1e-20), times
//           routed_scaling.
// Ties pick the lower expert id.
void moe_route(const MoeConfig& m, const float* logits, const float* bias, int64_t n,
               int32_t* experts, float* weights);

class MoeFfn {
  public:
    // out[n, d_model] = routed experts (+ shared experts) applied to x[n, d_model] (the
    // post-attention-normed hidden states). out must not alias x.
    void forward(const ModelConfig& c, const MoeWeights& w, const float* x, int64_t n, float* out,
                 util::ThreadPool& pool);

    // Tokens routed to each expert by the last forward() (for tests and statistics).
    const std::vector<int64_t>& last_expert_counts() const { return counts_; }

    // Sees the router's, each expert's and the shared experts' inputs
    // (model/activation_observer.h).
    ActivationObserver* observer = nullptr;

  private:
    std::vector<float> logits_;    // [n, n_experts]
    std::vector<int32_t> sel_;     // [n, top_k]
    std::vector<float> wsel_;      // [n, top_k]
    std::vector<int64_t> counts_;  // [n_experts]
    std::vector<int64_t> start_;   // [n_experts + 1] offsets into order_
    std::vector<int64_t>
        order_;  // [n * top_k] (token, slot) index t * top_k + j, grouped by expert
    // One chunk of experts (forward()): m = its gathered rows, in order_'s order.
    std::vector<float> xe_;       // [m, d_model] gathered inputs (experts that read x skip theirs)
    std::vector<float> g_, u_;    // [m, d_expert]
    std::vector<float> ye_;       // [m, d_model]
    std::vector<float> gs_, us_;  // [n, n_shared * d_expert] the shared experts'
    std::vector<float> ys_;       // [n, d_model]
    // One kernels::matmul_grouped call: its matrices, and its groups (spans of outs_) by input.
    std::vector<kernels::MatmulOut> outs_;
    std::vector<kernels::MatmulGroup> groups_;
};

// Loads one layer's MoE weights through the model loader's callbacks. Names are relative to the
// layer (HF: "mlp.gate.weight", "mlp.experts.<e>.gate_proj.weight", ...). `matrix` loads in the
// runtime weight format, `matrix_f32` in f32 (router), `vec` a 1-D tensor; all throw util::Error
// on a missing tensor or a wrong shape.
struct MoeTensorLoader {
    std::function<Matrix(const std::string& name, int64_t rows, int64_t cols)> matrix;
    std::function<Matrix(const std::string& name, int64_t rows, int64_t cols)> matrix_f32;
    std::function<std::vector<float>(const std::string& name, int64_t n)> vec;
    // Packs rows x cols f32 values (row-major) into a matrix of the runtime weight format.
    std::function<Matrix(int64_t rows, int64_t cols, const float* data)> pack;
    // Optional (may be empty): whether the checkpoint has the tensor; a tensor of exactly `dims`
    // (outermost first) as f32 values, throwing util::Error on a missing tensor or a wrong shape.
    std::function<bool(const std::string& name)> has;
    std::function<std::vector<float>(const std::string& name, const std::vector<int64_t>& dims)>
        f32;
};
std::unique_ptr<MoeWeights> load_moe_weights(const ModelConfig& c, const MoeTensorLoader& load);

}  // namespace warden::model
