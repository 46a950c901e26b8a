#pragma once
// Runtime weights of a dense transformer. Matrices are in the runtime format (bf16 by
// default, f32 with --dtype f32); when the checkpoint already stores that format the matrix
// borrows the mmap'd bytes instead of copying them (a 2 GB BF16 model loads in milliseconds).
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

    // Borrows external memory that outlives this matrix.
    static Matrix borrow(kernels::WeightType t, int64_t rows, int64_t cols, const void* data);
    // Allocates an owned, zeroed matrix.
    static Matrix owned(kernels::WeightType t, int64_t rows, int64_t cols);
    // A view of another matrix (tied embeddings): same bytes, no copy.
    Matrix alias() const { return borrow(view_.type, view_.rows, view_.cols, view_.data); }

    const kernels::WeightMatrix& view() const { return view_; }
    int64_t rows() const { return view_.rows; }
    int64_t cols() const { return view_.cols; }
    void* mutable_data() { return owned_.data(); }
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
