#pragma once
// llama.cpp importance matrices (`llama-imatrix -o imatrix.dat`, the legacy binary format, or the
// GGUF format of later versions; `llama-quantize --imatrix` reads both): per weight matrix, the
// mean squared input activation of each input column over calibration text. `warden quantize
// --imatrix FILE` passes an entry to the quantizer as `importance` (quant/quantizer.h) for the
// matrix of that GGUF name, which is how llama.cpp's Q4_0 / Q4_1 / Q8_0 quantizers use it: columns
// that see large activations weigh more in the scale search. Compressed-tensors output (Hugging
// Face names) finds its entries through the GGUF name of each tensor (formats/gguf_names.h),
// experts included.
//
// Legacy layout (little-endian, llama.cpp examples/imatrix/imatrix.cpp save_imatrix):
//   int32 n_entries; n_entries x { int32 len; char name[len]; int32 ncall; int32 nval;
//   float values[nval] }; then optionally int32 last_call; int32 len; char dataset[len].
// values are sums over ncall chunks; the importance is values / ncall (as llama-quantize divides).
// The file is untrusted input: every count is checked against the bytes left, names must be
// unique and printable, values finite and non-negative.
//
// The GGUF imatrix of later llama.cpp versions (llama-imatrix's default output since mid-2025) is
// read too: per matrix NAME, F32 tensors NAME.in_sum2 [cols, n_mat] and NAME.counts [n_mat], plus
// imatrix.datasets / imatrix.chunk_count / imatrix.chunk_size metadata; the importance is
// in_sum2 / count (1 where a matrix saw no token), as llama-quantize's load_imatrix computes it.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace warden::quant {

struct Imatrix {
    std::map<std::string, std::vector<float>> entries;  // GGUF tensor name -> importance per column
    int32_t chunks = 0;                                 // last_call, 0 when absent
    std::string dataset;  // calibration file(s) named by the tool, if any
    // The entry for `tensor` with `cols` values; nullptr when there is none. An entry of another
    // length is an error naming the tensor (the file is for another model). "name[e]" (expert e of
    // a stacked MoE tensor, formats/gguf_names.h) is the e-th run of `cols` values of the entry
    // "name", which llama-imatrix collects for all experts at once.
    const float* find(const std::string& tensor, int64_t cols) const;
};

// The importance llama-quantize derives from a GGUF imatrix's sum of squared inputs over `count`
// tokens: their mean, or 1 (equal weights) for a matrix no calibration token reached.
inline float mean_square_importance(float sum, float count) {
    return count > 0.0f ? sum / count : 1.0f;
}

// Throws util::Error naming the path and what is wrong.
Imatrix read_imatrix(const std::string& path);
// The same from bytes in memory (tests, fuzzing); `name` is used in messages.
Imatrix parse_imatrix(const uint8_t* data, size_t size, const std::string& name);

}  // namespace warden::quant
