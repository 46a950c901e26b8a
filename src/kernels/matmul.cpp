// Dispatch + threading for matmul.h, and the packed-layout helpers. Output rows are split over
// the pool in whole 16-row panels (kPanelRows; each panel is one contiguous weight stream).
// Since every ISA computes each output
// as the same sequential fma chain, the split and the ISA never change a result bit.
#include "kernels/matmul.h"

#include <algorithm>
#include <vector>

#include "kernels/kernels_internal.h"
#include "kernels/matmul_quant.h"
#include "tensor/float_convert.h"
#include "util/error.h"

namespace warden::kernels {
namespace {

const detail::MatmulTable& table(Isa isa) {
    if (!isa_supported(isa)) isa = Isa::Scalar;  // never run instructions the CPU lacks
    switch (isa) {
        // AVX-512 deliberately reuses the AVX2 kernels: no AVX-512 machine is available to
        // test a dedicated variant, AVX2+FMA instructions run on every AVX-512 CPU, and by the
        // bit-exactness contract (one fma chain per output) the results would be identical.
        case Isa::AVX512:
        case Isa::AVX2: return detail::matmul_avx2();
        case Isa::Scalar: break;
    }
    return detail::matmul_scalar();
}

bool is_quant(const WeightMatrix& w) {
    return w.type == WeightType::Q4 || w.type == WeightType::Q8 || w.type == WeightType::FP8;
}

// Per-call arguments of a quantized matmul; for W4A8/W8A8 the token rows are quantized to int8
// once here (scalar, shared by every ISA) into per-thread scratch that is reused, so decode
// does no heap allocation after the first call.
detail::QuantArgs quant_args(const WeightMatrix& w, const float* x, int64_t n, float* y) {
    check_quant_shape(w);
    detail::QuantArgs a{};
    a.kind = w.type == WeightType::Q4 ? 0 : (w.type == WeightType::Q8 ? 1 : 2);
    a.rows = w.rows;
    a.cols = w.cols;
    a.data = static_cast<const uint8_t*>(w.data);
    a.group = w.group;
    a.asym = w.asym;
    a.bf16_scales = w.bf16_scales;
    a.act_f32 = w.act_f32;
    a.x = x;
    a.n = n;
    a.y = y;
    a.ldy = w.rows;
    const bool int_acts = w.type == WeightType::Q8 || (w.type == WeightType::Q4 && !w.act_f32);
    if (int_acts) {
        thread_local std::vector<int8_t> xq;
        thread_local std::vector<float> xd;
        thread_local std::vector<int32_t> xs;
        const auto nq = static_cast<size_t>(n * w.cols), nb = static_cast<size_t>(n * w.cols / kActBlock);
        if (xq.size() < nq) xq.resize(nq);
        if (xd.size() < nb) {
            xd.resize(nb);
            xs.resize(nb);
        }
        quantize_acts(x, n, w.cols, xq.data(), xd.data(), xs.data());
        a.xq = xq.data();
        a.xd = xd.data();
        a.xs = xs.data();
    }
    return a;
}

void run_rows(const detail::MatmulTable& t, const WeightMatrix& w, const float* x, int64_t n,
              float* y, int64_t r0, int64_t r1) {
    if (is_quant(w)) {
        const detail::QuantArgs a = quant_args(w, x, n, y);
        t.quant(a, r0, r1);
    } else if (w.type == WeightType::BF16) {
        t.bf16(static_cast<const detail::bf16*>(w.data), w.cols, x, n, y, w.rows, r0, r1);
    } else {
        t.f32(static_cast<const float*>(w.data), w.cols, x, n, y, w.rows, r0, r1);
    }
}

}  // namespace

void pack_weight_row(WeightType t, int64_t cols, int64_t r, const float* row, void* packed) {
    const int64_t base = (r / kPanelRows) * cols * kPanelRows + r % kPanelRows;
    if (t == WeightType::BF16) {
        auto* p = static_cast<uint16_t*>(packed) + base;
        for (int64_t k = 0; k < cols; ++k) p[k * kPanelRows] = tensor::f32_to_bf16(row[k]);
    } else {
        auto* p = static_cast<float*>(packed) + base;
        for (int64_t k = 0; k < cols; ++k) p[k * kPanelRows] = row[k];
    }
}

void unpack_weight_row(const WeightMatrix& w, int64_t r, float* out) {
    util::check(r >= 0 && r < w.rows, "unpack_weight_row: row out of bounds");
    if (is_quant(w)) {
        dequant_row(w, r, out);
        return;
    }
    const int64_t base = (r / kPanelRows) * w.cols * kPanelRows + r % kPanelRows;
    if (w.type == WeightType::BF16) {
        const auto* p = static_cast<const uint16_t*>(w.data) + base;
        for (int64_t k = 0; k < w.cols; ++k) out[k] = tensor::bf16_to_f32(p[k * kPanelRows]);
    } else {
        const auto* p = static_cast<const float*>(w.data) + base;
        for (int64_t k = 0; k < w.cols; ++k) out[k] = p[k * kPanelRows];
    }
}

void matmul_rows(Isa isa, const WeightMatrix& w, const float* x, int64_t n, float* y,
                 int64_t row_begin, int64_t row_end) {
    util::check(row_begin >= 0 && row_begin <= row_end && row_end <= w.rows,
                "matmul_rows: row range out of bounds");
    if (n <= 0 || row_begin == row_end) return;
    run_rows(table(isa), w, x, n, y, row_begin, row_end);
}

void matmul(const WeightMatrix& w, const float* x, int64_t n, float* y, util::ThreadPool& pool) {
    util::check(w.rows >= 0 && w.cols >= 0, "matmul: negative weight shape");
    if (n <= 0 || w.rows == 0) return;
    struct Job {
        const detail::MatmulTable* t;
        const WeightMatrix* w;
        const float* x;
        int64_t n;
        float* y;
    };
    if (is_quant(w)) {  // quantize the activations once, then split panels over the pool
        const detail::MatmulTable* qt = &table(active_isa());
        const detail::QuantArgs a = quant_args(w, x, n, y);
        const int64_t n_panels = (w.rows + kPanelRows - 1) / kPanelRows;
        if (pool.size() == 1 || n_panels == 1) {
            qt->quant(a, 0, w.rows);
            return;
        }
        struct QJob {
            const detail::MatmulTable* t;
            const detail::QuantArgs* a;
        };
        const QJob qj{qt, &a};
        const QJob* qp = &qj;
        pool.run([qp](int tid, int nt) {
            const int64_t rows = qp->a->rows;
            const int64_t np = (rows + kPanelRows - 1) / kPanelRows;
            const int64_t per = (np + nt - 1) / nt;
            const int64_t b = std::min(rows, tid * per * kPanelRows), e = std::min(rows, b + per * kPanelRows);
            if (b < e) qp->t->quant(*qp->a, b, e);
        });
        return;
    }
    const Job job{&table(active_isa()), &w, x, n, y};
    const int64_t tile = job.t->row_tile;  // kPanelRows for every ISA: whole panels
    const int64_t n_tiles = (w.rows + tile - 1) / tile;
    if (pool.size() == 1 || n_tiles == 1) {
        run_rows(*job.t, w, x, n, y, 0, w.rows);
        return;
    }
    // pool.run directly (not parallel_for) with a lambda capturing one pointer: it fits in
    // std::function's small buffer, so a decode matmul does no heap allocation. The split is
    // the same as parallel_for's: whole panels, one contiguous chunk per thread.
    const Job* jp = &job;
    pool.run([jp](int tid, int nt) {
        const int64_t rows = jp->w->rows, tl = jp->t->row_tile;
        const int64_t nt_tiles = (rows + tl - 1) / tl;
        const int64_t per = (nt_tiles + nt - 1) / nt;
        const int64_t b = std::min(rows, tid * per * tl), e = std::min(rows, b + per * tl);
        if (b < e) run_rows(*jp->t, *jp->w, jp->x, jp->n, jp->y, b, e);
    });
}

}  // namespace warden::kernels
