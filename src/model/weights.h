#pragma once
// Runtime weights of a dense transformer. Matrices are in the runtime format (bf16 by
// default, f32 with --dtype f32), packed in the kernels' panel layout (kernels/matmul.h) at
// load time: the layout is what makes every output a fixed FMA chain, hence batch-invariant.
#include <cstdint>
#include <vector>

#include "kernels/matmul.h"

namespace warden::model {

enum class RuntimeDType { BF16, F32 };
const char* runtime_dtype_name(RuntimeDType t);

class Matrix {
public:
    Matrix() = default;
    Matrix(Matrix&&) noexcept = default;
    Matrix& operator=(Matrix&&) noexcept = default;
    Matrix(const Matrix&) = delete;
    Matrix& operator=(const Matrix&) = delete;

    // Allocates an owned, zeroed packed matrix; fill it with pack_row.
    static Matrix owned(kernels::WeightType t, int64_t rows, int64_t cols);
    // A view of another matrix (tied embeddings): same bytes, no copy. The original must
    // outlive the alias.
    Matrix alias() const;
    void pack_row(int64_t r, const float* row);

    const kernels::WeightMatrix& view() const { return view_; }
    int64_t rows() const { return view_.rows; }
    int64_t cols() const { return view_.cols; }
    int64_t bytes() const;
    // Row r as f32 (embedding lookup).
    void row_f32(int64_t r, float* out) const;

private:
    kernels::WeightMatrix view_;
    std::vector<uint8_t> owned_;
};

struct LayerWeights {
    std::vector<float> attn_norm, ffn_norm;  // [d_model]
    std::vector<float> q_norm, k_norm;       // [head_dim] (qwen3)
    std::vector<float> bq, bk, bv;           // biases (qwen2); empty when absent
    Matrix wq, wk, wv, wo;                   // [n_heads*hd, d], [n_kv*hd, d] x2, [d, n_heads*hd]
    Matrix w_gate, w_up, w_down;             // [d_ff, d] x2, [d, d_ff]
};

struct ModelWeights {
    Matrix token_embd;                // [vocab, d_model]
    std::vector<float> output_norm;   // [d_model]
    Matrix output;                    // [vocab, d_model]; aliases token_embd when tied
    std::vector<LayerWeights> layers;
};

}  // namespace warden::model
