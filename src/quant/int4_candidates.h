#pragma once
// The int4 (and int8) scale searches' inner loops (quant/quantizer.cpp), for a batch of candidate
// scales at once. Each candidate's result is the same float, bit for bit, whichever instruction set
// runs it: every element goes through the same operations in the same order (eight running sums per
// candidate, lane k taking elements k, k + 8, ...; no fused multiply-add), and the AVX2 and
// AVX-512 versions only arrange those chains differently in registers (a candidate's eight side by
// side, or one chain of eight or sixteen candidates side by side, the eight then added in order).
// So the written file does not depend on the machine or on kernels::active_isa().
#include <cstdint>

namespace warden::quant {

// nearbyint(clamp(v, lo, hi)) (round half to even) for integer lo, hi with |lo|, |hi| < 2^22:
// adding and subtracting 1.5 * 2^23 leaves exactly the rounded integer, without a libm call.
constexpr float kRoundMagic = 12582912.0f;

// The stored scales of v[0..n): h[i] = tensor::f32_to_f16(v[i]) (bf16: f32_to_bf16) and back[i]
// its value as f32, for finite v (F16C where the CPU has it: the same bits for finite input).
void int4_round_scales(const float* v, int n, bool bf16, uint16_t* h, float* back);

// err[c] = sum_i wt[i] * (x[i] - (r_i * d[c] + m[c]))^2 with r_i = nearbyint(clamp((x[i] - m[c]) *
// (1 / d[c]), lo, hi)), for c < nc (d[c] != 0). G: a multiple of 8.
void int4_group_errors(const float* x, const float* wt, int64_t G, const float* d, const float* m,
                       int nc, float lo, float hi, float* err);

// The index of the first value of x[0..n) that is infinite or NaN, or -1 when all are finite: one
// pass without branches (it vectorizes), and a second only to find a bad value, for the checks
// before a row is quantized.
int64_t first_non_finite(const float* x, int64_t n);

// The error weights of a group x[0..G) (G a multiple of 8): wt[i] = imp[i] * sqrt(sigma^2 +
// x_i^2) (imp[i] 1 when imp is null), sigma^2 = float(sum x^2 / G); returns sum wt x^2. Both sums
// in double in four running sums (lane k: elements k, k + 4, ...), added as (s0 + s1) + (s2 + s3).
double int4_error_weights(const float* x, const float* imp, int64_t G, float* wt);

// The largest magnitude of x[0..G) (G a multiple of 8, values finite), and in *first (unless
// null) the first value of that magnitude (0 when all are zero).
float int4_abs_max(const float* x, int64_t G, float* first);

// int8 codes q[i] = nearbyint(clamp(x[i] * id, -127, 127)) as int8 bits, for i < n.
void int8_round_codes(const float* x, int64_t n, float id, uint8_t* q);

// The symmetric search's scales of grid step s < n (quant/quantizer.cpp, quant4_sym):
// raw[1 + 2s] = 1 / iscale[s] and raw[2 + 2s] = sxl[s] / sll[s] (0 when sll[s] <= 0).
void int4_sym_scales(const float* iscale, const float* sxl, const float* sll, int n, float* raw);

// The symmetric search's error bounds (quant/quantizer.cpp, quant4_sym): for grid step s < nsteps
// and its two stored scales d2[2s], d2[2s + 1], bound[c] = sxx - 2 d sxl[s] + d^2 sll[s] in double
// with d = d2[c], or infinity where d2[c] is zero, not finite or has no finite inverse; bound
// padded with infinity to a multiple of 4 entries.
void int4_sym_bounds(const float* d2, const float* sxl, const float* sll, double sxx, int nsteps,
                     double* bound);

// The codes r_i of int4_group_errors for one candidate (as floats), into l[0..G).
void int4_group_codes(const float* x, int64_t G, float d, float m, float lo, float hi, float* l);

// The weighted least-squares sums of the codes r_i = nearbyint(clamp(x[i] * is[c], -8, 7)):
// sxl[c] = sum w x r, sll[c] = sum w r^2 (their ratio is the refit scale of those codes). G: a
// multiple of 8, at most 128.
void int4_refit_sums(const float* x, const float* wt, int64_t G, const float* is, int nc,
                     float* sxl, float* sll);

// The sums the asymmetric least-squares fit needs for r_i = nearbyint(clamp((x[i] - mn) * is[c],
// 0, 15)): s[3c] = sum w r, s[3c + 1] = sum w r^2, s[3c + 2] = sum w x r.
void int4_asym_sums(const float* x, const float* wt, int64_t G, float mn, const float* is, int nc,
                    double* s);

// The asymmetric search's least-squares fits (quant/quantizer.cpp, quant4_asym) of grid steps
// s < n from their int4_asym_sums s3[3s..3s + 2] and the group's sw = sum w, swx = sum w x: with
// det = sw s3[3s + 1] - s3[3s]^2 (double), d[s] = float((sw s3[3s + 2] - swx s3[3s]) / det) and
// m[s] = float((s3[3s + 1] swx - s3[3s] s3[3s + 2]) / det) where det > 0, else both 0.
void int4_asym_fits(const double* s3, int n, double sw, double swx, float* d, float* m);

// The indices of the k smallest of bound[0..n) (n a multiple of 4; infinite and NaN entries never
// chosen), the first of equal bounds first, into pick (ascending bound); returns how many. The
// entries of bound are left unspecified.
int smallest_bounds(double* bound, int n, int k, int* pick);

// int8 clip search: err[c] = sum_i imp_i * (double(x_i) - double(r_i * d[c]))^2 in double (imp_i 1
// when imp is null), r_i = nearbyint(clamp(x_i * (1 / d[c]), -127, 127)), for c < nc <= 8.
void int8_clip_errors(const float* x, const float* imp, int64_t n, const float* d, int nc,
                      double* err);

}  // namespace warden::quant
