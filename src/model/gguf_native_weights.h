#pragma once
// Which runtime weight format a GGUF file's matrices load in when --weights is not given. A
// file whose layer matrices are all Q4_0 (or all Q4_1) runs them as int4-g32 (-asym), and one
// whose layer matrices are all per-channel Q8_0 (as `warden quantize` writes int8) as int8: the
// import is bit-exact (quant/quantizer.h, import_ggml_row), so the file runs at the speed and
// memory of its own format, as it does in llama.cpp. Then the token embeddings and output head
// are decided one by one the same way; one that does not map gets int8 beside int4 layers, as
// `--weights int4` gives it. Anything else (K-quants, llama.cpp's Q8_0 with a scale per 32
// weights, mixed types) has no lossless runtime format and loads at --dtype, as before.
#include <optional>
#include <string>

#include "model/gguf_file.h"

namespace warden::model {

struct GgufNativeWeights {
    std::optional<std::string> layers;  // a --weights name, e.g. "int4-g32-asym"; unset: --dtype
    std::optional<std::string> embed;   // token_embd.weight, likewise
    std::optional<std::string> output;  // output.weight (absent when tied), likewise
    std::string note;                   // why, for the load report; empty for an all-float file
};

// `dtype_name` names the fallback in the note. Whether Q8_0 is per channel needs its data:
// `read_all` reads every row (a load, which reads them anyway); false reads each tensor's first
// row only (`warden info`, which must not page in a whole model).
GgufNativeWeights gguf_native_weights(const GGUFFile& g, const std::string& dtype_name,
                                      bool read_all = true);

// The runtime format one tensor imports into bit-exactly, if any (checks Q8_0's codes and scales).
std::optional<std::string> gguf_tensor_native_format(const GGUFTensor& t, bool read_all = true);

}  // namespace warden::model
