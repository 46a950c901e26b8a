#pragma once
// The ggml tensor types warden reads from GGUF files, with their block geometry, and the
// scalar dequantizers that turn one row of any of them into f32. Block layouts follow
// ggml-common.h; the dequantizers are tested against the `gguf` Python package's numpy ones.
#include <cstddef>
#include <cstdint>
#include <string>

namespace warden::tensor {

enum class GgmlType : uint32_t {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q8_1 = 9,
    Q2_K = 10,
    Q3_K = 11,
    Q4_K = 12,
    Q5_K = 13,
    Q6_K = 14,
    Q8_K = 15,
    IQ4_NL = 20,
    IQ4_XS = 23,
    BF16 = 30,
};

struct GgmlTypeInfo {
    const char* name;
    int64_t block_elems;  // elements per block
    int64_t block_bytes;  // bytes per block
    bool supported;       // can warden dequantize it
};

// Info for a raw type id from a file; returns nullptr for ids warden does not know.
const GgmlTypeInfo* ggml_type_info(uint32_t raw_type);
const GgmlTypeInfo& ggml_type_info(GgmlType t);
std::string ggml_type_name(GgmlType t);

inline bool ggml_is_float(GgmlType t) {
    return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16;
}

// Bytes of a row of n elements; n must be a multiple of the block size (checked by callers).
inline int64_t ggml_row_bytes(GgmlType t, int64_t n) {
    const auto& info = ggml_type_info(t);
    return n / info.block_elems * info.block_bytes;
}

// The 16 signed 6-bit scales (value + 32 as stored; subtract 32) of a Q3_K block from its 12
// packed bytes (llama.cpp's dequantize_row_q3_K unpacking).
void q3k_scales(const uint8_t* packed, int8_t* out);
// IQ4_NL / IQ4_XS: the int8 value of 4-bit code (0..15) from the non-linear code book.
int8_t iq4nl_value(int code);

// Throws util::Error naming `what` (e.g. "tensor 'blk.0.ffn_up.weight'"), the type, and the
// types warden runs, when t is one warden cannot read (IQ1_*, IQ2_*, IQ3_*, TQ*, Q8_K, Q8_1).
void check_ggml_type_supported(GgmlType t, const std::string& what);

// Dequantizes n elements (a multiple of the block size) starting at src into dst.
void dequantize_row(GgmlType t, const void* src, float* dst, int64_t n);

}  // namespace warden::tensor
