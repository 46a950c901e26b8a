#pragma once
// A hook that sees the input rows of the weight matrices a forward step multiplies, before the
// multiplication: `warden imatrix` (convert/imatrix_collector.h) sums each column's squared input
// there, as llama.cpp's llama-imatrix does from its graph callback. Null by default, so serving
// pays one pointer test per matrix. Observed: every layer matrix that a quantized checkpoint holds
// (GQA q/k/v/o, dense gate/up/down, the MoE router, routed experts with the rows routed to each,
// shared experts, MLA q / q_a / q_b / kv_a / o) and the output head, for the rows whose logits the
// step computes. Not observed: MLA's per-head k_b / v_b halves (kept unquantized).
#include <cstdint>

namespace warden::model {

class Matrix;

class ActivationObserver {
  public:
    virtual ~ActivationObserver() = default;
    // x: n_rows rows of m.cols() floats, the input of y = x m^T. Called on the thread that runs
    // the forward step, never concurrently.
    virtual void observe(const Matrix& m, const float* x, int64_t n_rows) = 0;
};

}  // namespace warden::model
