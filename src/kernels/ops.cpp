// Dispatch for ops.h: one function-pointer table per ISA, chosen from active_isa() on every
// call (a relaxed atomic load; cheap next to any row-sized kernel).
#include "kernels/ops.h"

#include "kernels/kernels_internal.h"

namespace warden::kernels {
namespace {

const detail::OpsTable& table(Isa isa) {
    switch (isa) {
        case Isa::AMX:  // the tiles serve the GEMMs only; row ops are AVX-512's
        case Isa::AVX512:
            return detail::ops_avx512();
        case Isa::AVX2:
            return detail::ops_avx2();
        case Isa::Scalar:
            break;
    }
    return detail::ops_scalar();
}

// Explicit-ISA calls from tests must never run an ISA the CPU lacks (SIGILL); fall back.
const detail::OpsTable& checked(Isa isa) {
    return table(isa_supported(isa) ? isa : Isa::Scalar);
}

}  // namespace

const detail::OpsTable& detail::ops_table(Isa isa) {
    return checked(isa);
}

void rmsnorm(const float* x, const float* w, float* y, int64_t n, float eps) {
    table(active_isa()).rmsnorm(x, w, y, n, eps);
}
void silu_mul(const float* gate, const float* up, float* out, int64_t n) {
    table(active_isa()).silu_mul(gate, up, out, n);
}
void softmax(float* x, int64_t n) {
    table(active_isa()).softmax(x, n);
}
float dot_f32(const float* a, const float* b, int64_t n) {
    return table(active_isa()).dot_f32(a, b, n);
}
float dot_bf16(const float* a, const bf16_t* b, int64_t n) {
    return table(active_isa()).dot_bf16(a, b, n);
}
void axpy_f32(float a, const float* x, float* y, int64_t n) {
    table(active_isa()).axpy_f32(a, x, y, n);
}
void axpy_bf16(float a, const bf16_t* x, float* y, int64_t n) {
    table(active_isa()).axpy_bf16(a, x, y, n);
}
void f32_to_bf16_row(const float* x, bf16_t* y, int64_t n) {
    table(active_isa()).f32_to_bf16_row(x, y, n);
}
void bf16_to_f32_row(const bf16_t* x, float* y, int64_t n) {
    table(active_isa()).bf16_to_f32_row(x, y, n);
}

int64_t argmax(const float* x, int64_t n) {
    return table(active_isa()).argmax(x, n);
}

void rmsnorm_isa(Isa isa, const float* x, const float* w, float* y, int64_t n, float eps) {
    checked(isa).rmsnorm(x, w, y, n, eps);
}
void silu_mul_isa(Isa isa, const float* gate, const float* up, float* out, int64_t n) {
    checked(isa).silu_mul(gate, up, out, n);
}
void softmax_isa(Isa isa, float* x, int64_t n) {
    checked(isa).softmax(x, n);
}
int64_t argmax_isa(Isa isa, const float* x, int64_t n) {
    return checked(isa).argmax(x, n);
}
float dot_f32_isa(Isa isa, const float* a, const float* b, int64_t n) {
    return checked(isa).dot_f32(a, b, n);
}
float dot_bf16_isa(Isa isa, const float* a, const bf16_t* b, int64_t n) {
    return checked(isa).dot_bf16(a, b, n);
}
void axpy_f32_isa(Isa isa, float a, const float* x, float* y, int64_t n) {
    checked(isa).axpy_f32(a, x, y, n);
}
void axpy_bf16_isa(Isa isa, float a, const bf16_t* x, float* y, int64_t n) {
    checked(isa).axpy_bf16(a, x, y, n);
}
void f32_to_bf16_row_isa(Isa isa, const float* x, bf16_t* y, int64_t n) {
    checked(isa).f32_to_bf16_row(x, y, n);
}
void bf16_to_f32_row_isa(Isa isa, const bf16_t* x, float* y, int64_t n) {
    checked(isa).bf16_to_f32_row(x, y, n);
}

}  // namespace warden::kernels
