#pragma once
// KV cache storage formats (--kv-dtype): the one descriptor the kernels, the KV cache and the
// commands share. F32/BF16/F16 store values as they are (F16 saturates at +-65504); the 8-bit
// formats store one code per element plus a scale per (token, kv head) (or one fixed per-tensor
// scale), value = code * scale. See docs/KV_QUANT.md.
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string_view>

namespace warden::tensor {

enum class KvType { F32, BF16, F16, FP8_E4M3, FP8_E5M2, INT8 };

inline const char* kv_type_name(KvType t) {
    switch (t) {
        case KvType::F32:
            return "f32";
        case KvType::BF16:
            return "bf16";
        case KvType::F16:
            return "f16";
        case KvType::FP8_E4M3:
            return "fp8_e4m3";
        case KvType::FP8_E5M2:
            return "fp8_e5m2";
        case KvType::INT8:
            return "int8";
    }
    return "?";
}
inline std::optional<KvType> parse_kv_type(std::string_view s) {
    for (KvType t :
         {KvType::F32, KvType::BF16, KvType::F16, KvType::FP8_E4M3, KvType::FP8_E5M2, KvType::INT8})
        if (s == kv_type_name(t)) return t;
    return std::nullopt;
}
// Bytes of one stored element (the code, for the scaled formats).
inline int64_t kv_elem_bytes(KvType t) {
    return t == KvType::F32 ? 4 : (t == KvType::BF16 || t == KvType::F16) ? 2 : 1;
}
// Formats that carry scales (8-bit codes).
inline bool kv_type_scaled(KvType t) {
    return t == KvType::FP8_E4M3 || t == KvType::FP8_E5M2 || t == KvType::INT8;
}
// Largest code magnitude of a scaled format: a (token, head) row is scaled so its largest
// |value| maps to this.
inline float kv_type_qmax(KvType t) {
    return t == KvType::FP8_E4M3 ? 448.0f : t == KvType::FP8_E5M2 ? 57344.0f : 127.0f;
}

}  // namespace warden::tensor
