#pragma once
// The int4 scale searches (quant/quantizer.cpp, quant4_sym and quant4_asym) for sixteen consecutive
// groups at once, one group per AVX-512 lane. Per group a search is a chain of small steps (its
// statistics, a grid of candidate scales and their least-squares refits, their error bounds, the
// three smallest, a few exact errors, the codes), each too short to fill a register with one
// group's work, so the per-group path spends most of its time in horizontal sums and set-up.
// Side by side, every step is whole registers of work.
//
// The results are the per-group searches', bit for bit: each lane performs the per-group path's
// operations in its order (quant/int4_candidates.h: eight running sums per candidate, no fused
// multiply-add), so the written file does not depend on which path ran.
#include <cstdint>

namespace warden::quant {

inline constexpr int kInt4BatchGroups = 16;
inline constexpr int kSymSteps = 19;   // the symmetric search's grid of inverse scales
inline constexpr int kAsymClips = 7;   // the asymmetric search's clip ratios
inline constexpr int kAsymSteps = 37;  // and its grid

// Whether the batched searches run on this machine (AVX-512F, kernels::active_isa()).
bool int4_batch_available();

// quant4_sym for groups 0..15 of G columns each (G a multiple of 8, at most 128) of x[0 .. 16 G)
// and their importance imp (the same columns; null: none): writes each group's stored scale bits
// (f16, or bf16 where bf16_scales) to d[0..16) and its codes (0..15) to q[0 .. 16 G).
// neg_step[s] = -(8 + 0.1 (s - 9)) as quant4_sym computes it, for s < kSymSteps. Throws
// util::Error where quant4_sym does (no scale of the dtype fits a group).
void int4_sym_search_batch(const float* x, const float* imp, int64_t G, bool bf16_scales,
                           const float* neg_step, uint16_t* d, uint8_t* q);

// quant4_asym likewise: scales to d, offsets to m, codes (0..15) to q. clip_shrink[c] = (1 -
// clip ratio c) / 2 for c < kAsymClips and step[s] = 15 - 0.9 + 0.05 s for s < kAsymSteps, as
// quant4_asym computes them.
void int4_asym_search_batch(const float* x, const float* imp, int64_t G, bool bf16_scales,
                            const float* clip_shrink, const float* step, uint16_t* d, uint16_t* m,
                            uint8_t* q);

}  // namespace warden::quant
