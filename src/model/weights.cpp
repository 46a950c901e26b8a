#include "model/weights.h"

#include <algorithm>

#include "kernels/matmul_bf16_tiles.h"
#include "kernels/matmul_kquant.h"
#include "util/error.h"

namespace warden::model {

const char* runtime_dtype_name(RuntimeDType t) {
    return t == RuntimeDType::BF16 ? "bf16" : "f32";
}

namespace {
int64_t elem_bytes(tensor::WeightType t) {
    return t == tensor::WeightType::BF16 ? 2 : 4;
}

util::ArenaBuffer weight_bytes(int64_t n, util::HugePageArena* arena) {
    return arena ? arena->allocate(static_cast<size_t>(n))
                 : util::ArenaBuffer(static_cast<size_t>(n));
}
}  // namespace

Matrix Matrix::owned(tensor::WeightType t, int64_t rows, int64_t cols, util::HugePageArena* arena) {
    Matrix m;
    m.owned_ = weight_bytes(kernels::packed_weight_elems(rows, cols) * elem_bytes(t), arena);
    m.view_ = {t, rows, cols, m.owned_.data()};
    return m;
}

Matrix Matrix::quantized(const kernels::WeightMatrix& layout, util::HugePageArena* arena) {
    kernels::check_quant_shape(layout);
    Matrix m;
    m.owned_ = weight_bytes(kernels::quant_packed_bytes(layout), arena);
    m.view_ = layout;
    m.view_.data = m.owned_.data();
    return m;
}

Matrix Matrix::mapped(const kernels::WeightMatrix& layout, const void* data,
                      std::shared_ptr<const void> keep) {
    util::check(tensor::is_kquant(layout.type) && data != nullptr && keep != nullptr,
                "Matrix::mapped: only GGUF blocks that run as stored, with their owner");
    kernels::check_quant_shape(layout);
    Matrix m;
    m.view_ = layout;
    m.view_.data = data;
    m.keep_ = std::move(keep);
    return m;
}

Matrix Matrix::mapped_row_major(const kernels::WeightMatrix& layout, const void* codes,
                                const void* scales, int64_t scale_block_rows,
                                std::shared_ptr<const void> keep) {
    Matrix m;
    m.view_ = layout;
    m.view_.row_major = true;
    m.view_.data = codes;
    m.view_.scales = scales;
    m.view_.scale_block_rows = scale_block_rows;
    kernels::check_quant_shape(m.view_);
    m.keep_ = std::move(keep);
    return m;
}

Matrix Matrix::mapped_q4_rows(const kernels::WeightMatrix& layout, const void* codes,
                              const void* scales, std::shared_ptr<const void> keep) {
    util::check(layout.type == tensor::WeightType::Q4 && codes != nullptr && scales != nullptr &&
                    keep != nullptr,
                "Matrix::mapped_q4_rows: int4 codes and scales, with their owner");
    return mapped_row_major(layout, codes, scales, 0, std::move(keep));
}

Matrix Matrix::mapped_fp8_rows(const kernels::WeightMatrix& layout, const void* codes,
                               const float* grid, int64_t scale_block_rows,
                               std::shared_ptr<const void> keep) {
    util::check(layout.type == tensor::WeightType::FP8 && codes != nullptr && grid != nullptr &&
                    scale_block_rows > 0 && keep != nullptr,
                "Matrix::mapped_fp8_rows: FP8 codes and a scale grid, with their owner");
    return mapped_row_major(layout, codes, grid, scale_block_rows, std::move(keep));
}

Matrix Matrix::mapped_rows(tensor::WeightType t, int64_t rows, int64_t cols, const void* data,
                           std::shared_ptr<const void> keep) {
    util::check((t == tensor::WeightType::F32 || t == tensor::WeightType::BF16) && rows >= 0 &&
                    cols >= 0 && data != nullptr && keep != nullptr,
                "Matrix::mapped_rows: f32 or bf16 rows, with their owner");
    Matrix m;
    m.view_.type = t;
    m.view_.rows = rows;
    m.view_.cols = cols;
    m.view_.data = data;
    m.view_.row_major = true;
    m.keep_ = std::move(keep);
    return m;
}

void Matrix::set_deferred_copy(std::shared_ptr<DeferredCopy> copy) {
    util::check(
        copy != nullptr && copy->matrix.rows() == view_.rows && copy->matrix.cols() == view_.cols,
        "Matrix::set_deferred_copy: a copy of another shape");
    copy_ = std::move(copy);
}

std::span<const uint8_t> Matrix::packed() const {
    if (reads_deferred_copy()) return copy_->matrix.packed();
    if (!keep_) return owned_.bytes();
    if (view_.row_major && view_.type == tensor::WeightType::Q4)  // the codes
        return {static_cast<const uint8_t*>(view_.data),
                static_cast<size_t>(view_.rows * (view_.cols / 2))};
    if (view_.row_major && view_.type == tensor::WeightType::FP8)
        return {static_cast<const uint8_t*>(view_.data),
                static_cast<size_t>(view_.rows * view_.cols)};
    if (view_.row_major)
        return {static_cast<const uint8_t*>(view_.data), static_cast<size_t>(bytes())};
    return {static_cast<const uint8_t*>(view_.data),
            static_cast<size_t>(view_.rows * kernels::kquant_row_bytes(view_))};
}

bool Matrix::is_quantized() const {
    return view_.type != tensor::WeightType::F32 && view_.type != tensor::WeightType::BF16;
}

void Matrix::pack_quant_row(int64_t r, const kernels::QuantRow& row) {
    kernels::pack_quant_row(view_, r, row, owned_.data());
}

Matrix Matrix::alias() const {
    Matrix m;
    m.view_ = view_;
    m.prefill = prefill;
    m.keep_ = keep_;
    m.copy_ = copy_;
    return m;
}

void Matrix::pack_row(int64_t r, const float* row) {
    kernels::pack_weight_row(view_.type, view_.cols, r, row, owned_.data());
}

void Matrix::pack_bf16_rows(int64_t r0, int64_t r1, const uint8_t* src) {
    kernels::pack_bf16_rows(view_.cols, r0, r1, src, owned_.data());
}

void Matrix::pack_fp8_codes(int64_t r0, int64_t r1, const uint8_t* src) {
    kernels::pack_fp8_codes(view_, r0, r1, src, owned_.data());
}

void Matrix::pack_fp8_scales(int64_t r, const float* s) {
    kernels::pack_fp8_scales(view_, r, s, owned_.data());
}

void Matrix::pack_q4_codes(int64_t r0, int64_t r1, const kernels::Q4CodeRows& src) {
    kernels::pack_q4_codes(view_, r0, r1, src, owned_.data());
}

void Matrix::pack_q4_scales(int64_t r, const uint16_t* d, const uint16_t* m) {
    kernels::pack_q4_scales(view_, r, d, m, owned_.data());
}

void Matrix::pack_block_panel(int64_t p, const uint8_t* src, int64_t row_bytes) {
    const bool q8 = view_.type == tensor::WeightType::Q8, q4 = view_.type == tensor::WeightType::Q4;
    util::check((q8 || (q4 && !view_.act_f32)) && view_.group == 32 && !view_.bf16_scales &&
                    p >= 0 && p * kernels::kPanelRows < view_.rows,
                "pack_block_panel: not an int8-g32 / int4-g32 matrix with f16 scales, or panel out "
                "of range");
    const int64_t n = std::min<int64_t>(kernels::kPanelRows, view_.rows - p * kernels::kPanelRows);
    uint8_t* panel = owned_.data() + p * kernels::quant_panel_bytes(view_);
    if (q8)
        kernels::pack_q8_0_panel(src, row_bytes, n, view_.cols, panel);
    else
        kernels::pack_q4_block_panel(src, row_bytes, n, view_.cols, view_.asym, panel);
}

void Matrix::pack_q4_rows_panel(int64_t p, const kernels::WeightMatrix& rows) {
    util::check(view_.type == tensor::WeightType::Q4 && !view_.row_major && rows.row_major &&
                    rows.rows == view_.rows && rows.cols == view_.cols &&
                    rows.group == view_.group && rows.bf16_scales == view_.bf16_scales &&
                    !view_.asym && p >= 0 && p * kernels::kPanelRows < view_.rows,
                "pack_q4_rows_panel: not the int4 panels of those rows, or panel out of range");
    kernels::pack_q4_rows_panel(rows, p, owned_.data() + p * kernels::quant_panel_bytes(view_));
}

void Matrix::pack_fp8_rows_panel(int64_t p, const kernels::WeightMatrix& rows) {
    util::check(view_.type == tensor::WeightType::FP8 && !view_.row_major && rows.row_major &&
                    rows.type == view_.type && rows.rows == view_.rows && rows.cols == view_.cols &&
                    rows.group == view_.group && p >= 0 && p * kernels::kPanelRows < view_.rows,
                "pack_fp8_rows_panel: not the fp8 panels of those rows, or panel out of range");
    kernels::pack_fp8_rows_panel(rows, p, owned_.data() + p * kernels::quant_panel_bytes(view_));
}

int64_t Matrix::add_bf16_tiles(util::HugePageArena* arena) {
    if (view_.type != tensor::WeightType::BF16 || !owned_.data()) return 0;
    const int64_t panels = bytes();
    tiles_ = weight_bytes(kernels::bf16_tile_bytes(view_.rows, view_.cols), arena);
    kernels::pack_bf16_tiles(view_, tiles_.data());
    view_.tiles = tiles_.data();
    view_.data = nullptr;
    owned_ = util::ArenaBuffer();
    return bytes() - panels;
}

int64_t Matrix::bytes() const {
    if (reads_deferred_copy()) return copy_->matrix.bytes();
    if (is_quantized())
        return view_.row_major ? kernels::rows_bytes(view_) : kernels::quant_packed_bytes(view_);
    if (view_.row_major) return view_.rows * view_.cols * elem_bytes(view_.type);
    if (view_.data == nullptr && view_.tiles != nullptr)
        return kernels::bf16_tile_bytes(view_.rows, view_.cols);
    return kernels::packed_weight_elems(view_.rows, view_.cols) * elem_bytes(view_.type);
}

void Matrix::row_f32(int64_t r, float* out) const {
    kernels::unpack_weight_row(view(), r, out);
}

}  // namespace warden::model
