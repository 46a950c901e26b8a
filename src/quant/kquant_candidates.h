#pragma once
// The K-quant block searches' inner loops (quant/ggml_block_quantizer.cpp), for up to kLanes
// candidates at once: one candidate per SIMD lane, each lane running over the elements in order
// with the same operations as a one-candidate loop (no fused multiply-add), so every candidate's
// sums are the same floats, bit for bit, on every instruction set (AVX-512, AVX2, the x86-64
// baseline) and the written blocks do not depend on the machine.
#include <cstdint>

namespace warden::quant {

constexpr int kLanes = 16;     // candidates per call
constexpr int kSymLanes = 32;  // candidates per kq_sym_sums call (a whole fit_sym grid)

// Round to nearest (ties to even) for |v| < 2^22 (llama.cpp's nearest_int).
inline int round_int_magic(float v) {
    const float t = v + 12582912.f;
    int32_t i;
    __builtin_memcpy(&i, &t, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

// Symmetric grid (fit_sym): for lanes c < nc (nc <= kSymLanes; is, slx and sl2 hold kSymLanes, and
// lanes from nc on may be left unset), l_i = clamp(round(is[c] * x_i), -nmax, nmax - 1),
// slx[c] = sum w_i x_i l_i, sl2[c] = sum w_i l_i^2 (float, in element order). Asks |is[c] * x_i|
// < 2^22 (fit_sym's grid: |is[c]| <= (nmax + 1) / max |x_i|).
void kq_sym_sums(const float* x, const float* w, int n, const float* is, int nc, int nmax,
                 float* slx, float* sl2);

// The grid's best lane c < nc: the first of the largest gains double(slx[c])^2 / sl2[c] (over
// lanes with sl2[c] > 0), or -1 when there is none.
int kq_sym_best(const float* slx, const float* sl2, int nc);

// Q6_K's neighbour step (ggml_block_quantizer.cpp, sym_neighbours): the 16 sub-blocks of 16 values
// of a super-block given transposed, xt[16 * i + j] = x[16 * j + i] (wt likewise), and for each
// sub-block j and k = 0..2 the integer scale s = sc[j] - 1 + k, step = d * s, inv = 1 / step (0
// when step is 0), l_i = clamp(round(x_i * inv), -32, 31): err[3 * j + k] = sum_i w_i (step l_i -
// x_i)^2, a float sum in element order.
void kq_q6k_neighbour_errors(const float* xt, const float* wt, float d, const int* sc, float* err);

// Asymmetric grid (fit_asym): q_i = clamp(round(is[c] * (x_i - lo)), 0, nmax), sl[c] = sum w q,
// sl2[c] = sum w q^2, sxl[c] = sum w q x. codes: null, or n * kLanes floats that receive the codes
// (q_i of lane c at codes[kLanes * i + c]) for kq_asym_grid_errors.
void kq_asym_sums(const float* x, const float* w, int n, float lo, const float* is, int nmax,
                  float* sl, float* sl2, float* sxl, float* codes);

// fit_asym's least-squares fits of the grid's codes, lane c < kLanes being step first + c (steps
// below 0: the grid's own scale 1 / is[c] with min lo; steps from nsteps on: no candidate), from
// kq_asym_sums' sums and the span's sw = sum w, sx = sum w x. A fit solves the 2 x 2 normal
// equations in double (min_le_zero: a positive min becomes 0 and the scale sxl / sl2); it is no
// candidate where the determinant is <= 0 or the scale <= 0. scale[c], min[c]: the candidate (0
// where none); returns the mask of lanes that are candidates (bit c).
uint32_t kq_asym_fits(const float* is, const float* sl, const float* sl2, const float* sxl,
                      int first, int nsteps, double sw, double sx, float lo, bool min_le_zero,
                      float* scale, float* min);

// The weighted error of those codes under each lane's fitted (scale, min):
// err[c] = sum w_i (scale[c] q_i + min[c] - x_i)^2. codes: kq_asym_sums' codes for the same x, lo,
// is and nmax (read where that is cheaper than rounding again), or null.
void kq_asym_grid_errors(const float* x, const float* w, int n, float lo, const float* is, int nmax,
                         const float* scale, const float* min, const float* codes, float* err);

// Q4_K / Q5_K's neighbour step (ggml_block_quantizer.cpp, asym_neighbours): the 8 sub-blocks of
// 32 values of a super-block given transposed, xt[8 * i + j] = x[32 * j + i] (wt likewise), and
// for each sub-block j and k = 0..8 the integer scale and min (sc[j] + k / 3 - 1, mn[j] + k % 3 -
// 1), s = d * scale, m = dmin * min, q_i = clamp(round((x_i + m) * inv), 0, nmax) with inv = 1 / s
// (0 when s <= 0): err[9 * j + k] = sum_i w_i (s q_i - m - x_i)^2, a float sum in element order.
void kq_q4k_neighbour_errors(const float* xt, const float* wt, float d, float dmin, const int* sc,
                             const int* mn, int nmax, float* err);

}  // namespace warden::quant
