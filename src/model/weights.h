#pragma once
// Runtime weights of a dense transformer. Matrices are in the runtime format (bf16 by
// default, f32 with --dtype f32), packed in the kernels' panel layout (kernels/matmul.h) at
// load time: the layout is what makes every output a fixed FMA chain, hence batch-invariant.
#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kernels/matmul.h"
#include "kernels/matmul_quant.h"
#include "util/huge_page_arena.h"

namespace warden::model {

enum class RuntimeDType { BF16, F32 };
const char* runtime_dtype_name(RuntimeDType t);

struct DeferredCopy;

class Matrix {
  public:
    Matrix() = default;
    Matrix(Matrix&&) noexcept = default;
    Matrix& operator=(Matrix&&) noexcept = default;
    Matrix(const Matrix&) = delete;
    Matrix& operator=(const Matrix&) = delete;

    // Allocates an owned, zeroed packed matrix; fill it with pack_row. The bytes come from
    // `arena` (2 MiB pages where available, util/huge_page_arena.h), else from the heap.
    static Matrix owned(tensor::WeightType t, int64_t rows, int64_t cols,
                        util::HugePageArena* arena = nullptr);
    // Allocates an owned, zeroed quantized matrix of `layout`'s format and shape (Q4/Q8/FP8,
    // kernels/matmul_quant.h); fill it with pack_quant_row.
    static Matrix quantized(const kernels::WeightMatrix& layout,
                            util::HugePageArena* arena = nullptr);
    // A matrix that reads `data` where it is (GGUF blocks that run as stored, kernels/
    // matmul_kquant.h: a view into the mapped file, no copy); `keep` holds those bytes alive as
    // long as the matrix or an alias of it. Only an is_kquant layout: its rows are read one by one
    // and only up to `rows` (no panel padding). Nothing may be packed into it.
    static Matrix mapped(const kernels::WeightMatrix& layout, const void* data,
                         std::shared_ptr<const void> keep);
    // A row-major int4 matrix read where the file maps it (kernels/matmul_quant.h: a
    // compressed-tensors checkpoint's packed codes at `codes`, its scales at `scales`); `keep`
    // holds both alive. `layout`: symmetric W4A8 int4 of the checkpoint's group and scale dtype.
    static Matrix mapped_q4_rows(const kernels::WeightMatrix& layout, const void* codes,
                                 const void* scales, std::shared_ptr<const void> keep);
    // A block-scaled FP8 matrix read where the file maps it (kernels/matmul_quant.h: an FP8
    // checkpoint's e4m3 codes at `codes`, its f32 scale grid at `grid` with scale_block_rows rows
    // per scale); `keep` holds both alive. `layout`: fp8-bG of the checkpoint's block columns.
    static Matrix mapped_fp8_rows(const kernels::WeightMatrix& layout, const void* codes,
                                  const float* grid, int64_t scale_block_rows,
                                  std::shared_ptr<const void> keep);
    // An f32 or bf16 lookup table read where the file maps it (an embedding table that is not
    // also the head): row r at data + r * cols elements, as the file stores it; only row_f32 reads
    // it (kernels::WeightMatrix::row_major), no copy. `keep` holds the bytes alive.
    static Matrix mapped_rows(tensor::WeightType t, int64_t rows, int64_t cols, const void* data,
                              std::shared_ptr<const void> keep);
    void pack_quant_row(int64_t r, const kernels::QuantRow& row);
    bool is_quantized() const;
    // A view of another matrix (tied embeddings): same bytes, no copy. The original must
    // outlive the alias.
    Matrix alias() const;
    void pack_row(int64_t r, const float* row);
    // Rows [r0, r1) of a BF16 matrix straight from bf16 source rows (kernels::pack_bf16_rows).
    void pack_bf16_rows(int64_t r0, int64_t r1, const uint8_t* src);
    // An FP8 matrix's codes of rows [r0, r1) from row-major codes, and row r's scales
    // (kernels::pack_fp8_codes, kernels::pack_fp8_scales).
    void pack_fp8_codes(int64_t r0, int64_t r1, const uint8_t* src);
    void pack_fp8_scales(int64_t r, const float* s);
    // An int4 matrix's codes of rows [r0, r1) from row-major 4-bit codes, and row r's group
    // scales (kernels::pack_q4_codes, kernels::pack_q4_scales).
    void pack_q4_codes(int64_t r0, int64_t r1, const kernels::Q4CodeRows& src);
    void pack_q4_scales(int64_t r, const uint16_t* d, const uint16_t* m);
    // Panel p of an int8-g32 / int4-g32 / int4-g32-asym matrix (f16 scales) from GGUF Q8_0 /
    // Q4_0 / Q4_1 rows (row 16p at src, row_bytes apart): kernels::pack_q8_0_panel,
    // kernels::pack_q4_block_panel.
    void pack_block_panel(int64_t p, const uint8_t* src, int64_t row_bytes);
    // Panel p of an int4 matrix from the row-major int4 matrix `rows` of its shape, group and
    // scale dtype: kernels::pack_q4_rows_panel.
    void pack_q4_rows_panel(int64_t p, const kernels::WeightMatrix& rows);
    // Panel p of an fp8-bG matrix from the row-major FP8 matrix `rows` of its shape and block:
    // kernels::pack_fp8_rows_panel.
    void pack_fp8_rows_panel(int64_t p, const kernels::WeightMatrix& rows);
    // A bf16 matrix, once packed: replaces its panels with their AMX-BF16 tile copy
    // (kernels/matmul_bf16_tiles.h, "Tile-only matrices"), which every matmul and row lookup then
    // reads. Returns the bytes the tile layout adds over the panels (column padding; 0 for other
    // types). Aliases made before it keep the panels.
    int64_t add_bf16_tiles(util::HugePageArena* arena = nullptr);
    // Reads go to `copy` once it is published (DeferredCopy), to this matrix's own bytes before;
    // aliases made afterwards share it. The copy must have this matrix's shape.
    void set_deferred_copy(std::shared_ptr<DeferredCopy> copy);
    // Whether reads go to a published deferred copy.
    bool reads_deferred_copy() const;

    // The weights' first byte, whichever layout holds them (prefetching; telling aliases apart).
    const void* storage() const {
        const kernels::WeightMatrix& v = view();
        return v.data ? v.data : v.tiles;
    }

    // Whether `o` is this matrix or an alias of it (tied embeddings): the same bytes in every
    // layout, whichever one reads use at the moment.
    bool shares_weights_with(const Matrix& o) const {
        return (view_.data ? view_.data : view_.tiles) ==
               (o.view_.data ? o.view_.data : o.view_.tiles);
    }

    // The layout every read uses now: the published deferred copy's, else this matrix's own.
    const kernels::WeightMatrix& view() const;
    int64_t rows() const { return view_.rows; }
    int64_t cols() const { return view_.cols; }
    int64_t bytes() const;
    // Row r as f32 (embedding lookup).
    void row_f32(int64_t r, float* out) const;
    // Raw packed bytes (tests compare round trips bit for bit); empty for a tile-only matrix, a
    // mapped matrix's rows only.
    std::span<const uint8_t> packed() const;
    // Whether reads go to the mapped file's bytes (mapped()), not a copy.
    bool is_mapped() const { return keep_ != nullptr && !reads_deferred_copy(); }

    // Optional higher-precision copy used for prefill rows (--prefill-weights); null if none.
    std::shared_ptr<const Matrix> prefill;
    // The matrix for rows of a prefill (multi-token) step or of a decode step.
    const kernels::WeightMatrix& view_for(bool prefill_rows) const {
        return prefill_rows && prefill ? prefill->view() : view();
    }

  private:
    // mapped_q4_rows / mapped_fp8_rows: `layout` as row-major codes and scales read in place.
    static Matrix mapped_row_major(const kernels::WeightMatrix& layout, const void* codes,
                                   const void* scales, int64_t scale_block_rows,
                                   std::shared_ptr<const void> keep);
    kernels::WeightMatrix view_;
    util::ArenaBuffer owned_;  // empty for an alias
    util::ArenaBuffer tiles_;  // the AMX-BF16 tile layout (add_bf16_tiles); empty when none
    std::shared_ptr<const void> keep_;    // mapped(): what keeps view_.data alive; else null
    std::shared_ptr<DeferredCopy> copy_;  // set_deferred_copy(); null when none
};

// A matrix's copy in a faster layout with the same arithmetic (every output bit-identical to the
// original's), filled after loading by a background thread (model/deferred_layouts.h), so that
// start-up does not wait for it: GGUF Q8_0 blocks, read in place at first, then as int8-g32
// panels. `matrix` is packed before `published` is set (release) and never written after.
struct DeferredCopy {
    Matrix matrix;
    std::atomic<bool> published{false};
};

inline bool Matrix::reads_deferred_copy() const {
    return copy_ && copy_->published.load(std::memory_order_acquire);
}
inline const kernels::WeightMatrix& Matrix::view() const {
    return reads_deferred_copy() ? copy_->matrix.view_ : view_;
}

// A mixture-of-experts FFN (model/moe.h). The router stays f32 whatever the runtime format so
// that expert selection matches the reference (transformers routes GLM/DeepSeek in f32 too).
struct MoeWeights {
    Matrix router;                       // [n_experts, d_model], f32
    std::vector<float> router_bias;      // [n_experts] e_score_correction_bias; empty when absent
    std::vector<Matrix> gate, up, down;  // per expert: [d_expert, d] x2, [d, d_expert]
    Matrix shared_gate, shared_up,
        shared_down;  // [n_shared*d_expert, d] x2, [d, ...]; empty when none
};

// Multi-head latent attention (model/mla.h). kv_b_proj is split per head at load time into the
// transposed key up-projection (absorbed into the query) and the value up-projection.
struct MlaWeights {
    Matrix wq;                     // [n_heads*(nope+rope), d] when q_lora_rank == 0
    Matrix wq_a;                   // [q_lora_rank, d]
    std::vector<float> q_a_norm;   // [q_lora_rank]
    Matrix wq_b;                   // [n_heads*(nope+rope), q_lora_rank]
    Matrix wkv_a;                  // [kv_lora_rank + rope, d]
    std::vector<float> kv_a_norm;  // [kv_lora_rank]
    std::vector<Matrix> wk_b_t;    // per head [kv_lora_rank, nope]
    std::vector<Matrix> wv_b;      // per head [v_dim, kv_lora_rank]
    Matrix wo;                     // [d, n_heads*v_dim]
};

struct LayerWeights {
    std::vector<float> attn_norm, ffn_norm;  // [d_model]
    std::vector<float> q_norm, k_norm;       // [head_dim] (qwen3)
    std::vector<float> bq, bk, bv;           // biases (qwen2); empty when absent
    Matrix wq, wk, wv, wo;                   // [n_heads*hd, d], [n_kv*hd, d] x2, [d, n_heads*hd]
    Matrix w_gate, w_up, w_down;             // [d_ff, d] x2, [d, d_ff]
    std::unique_ptr<MoeWeights> moe;         // set on MoE layers, which then have no w_gate/up/down
    std::unique_ptr<MlaWeights> mla;         // set on MLA models, which then have no wq/wk/wv/wo
};

// The input side of a multi-token-prediction (nextn) layer (model/mtp.h): a row's input is
// eh_proj([enorm(embed(token)), hnorm(hidden)]) instead of the token's embedding.
struct MtpInputWeights {
    std::vector<float> enorm, hnorm;  // [d_model]
    Matrix eh_proj;                   // [d_model, 2 * d_model]
};

struct ModelWeights {
    Matrix token_embd;               // [vocab, d_model]
    std::vector<float> output_norm;  // [d_model]
    Matrix output;                   // [vocab, d_model]; aliases token_embd when tied
    std::vector<LayerWeights> layers;
    std::unique_ptr<MtpInputWeights> mtp_in;  // set only on an MTP draft model (load_mtp_model)
};

}  // namespace warden::model
