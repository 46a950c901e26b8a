#include "tensor/ggml_types.h"

#include <cstring>

#include "tensor/float_convert.h"
#include "util/error.h"

namespace warden::tensor {

namespace {

constexpr int64_t QK_K = 256;

struct TypeEntry {
    uint32_t id;
    GgmlTypeInfo info;
};

constexpr TypeEntry kTypes[] = {
    {0, {"F32", 1, 4, true}},
    {1, {"F16", 1, 2, true}},
    {2, {"Q4_0", 32, 18, true}},
    {3, {"Q4_1", 32, 20, true}},
    {6, {"Q5_0", 32, 22, true}},
    {7, {"Q5_1", 32, 24, true}},
    {8, {"Q8_0", 32, 34, true}},
    {9, {"Q8_1", 32, 36, false}},
    {10, {"Q2_K", 256, 84, true}},
    {11, {"Q3_K", 256, 110, true}},
    {12, {"Q4_K", 256, 144, true}},
    {13, {"Q5_K", 256, 176, true}},
    {14, {"Q6_K", 256, 210, true}},
    {15, {"Q8_K", 256, 292, false}},
    {20, {"IQ4_NL", 32, 18, true}},
    {23, {"IQ4_XS", 256, 136, true}},
    {30, {"BF16", 1, 2, true}},
    // Known so that a file using them is refused by name (ggml_type_supported), not as an
    // unknown id: the lattice-codebook IQ types and the ternary ones.
    {16, {"IQ2_XXS", 256, 66, false}},
    {17, {"IQ2_XS", 256, 74, false}},
    {18, {"IQ3_XXS", 256, 98, false}},
    {19, {"IQ1_S", 256, 50, false}},
    {21, {"IQ3_S", 256, 110, false}},
    {22, {"IQ2_S", 256, 82, false}},
    {29, {"IQ1_M", 256, 56, false}},
    {34, {"TQ1_0", 256, 54, false}},
    {35, {"TQ2_0", 256, 66, false}},
};

// IQ4_NL / IQ4_XS: the non-linear 4-bit code book (ggml-common.h kvalues_iq4nl).
constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                     1,    13,   25,  38,  53,  69,  89,  113};

inline float load_f16(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return f16_to_f32(h);
}

// Unpacks the 6-bit scale and min of sub-block j from the 12-byte K-quant scale array.
inline void scale_min_k4(int j, const uint8_t* q, uint8_t& d, uint8_t& m) {
    if (j < 4) {
        d = q[j] & 63;
        m = q[j + 4] & 63;
    } else {
        d = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4));
    }
}

void dequant_q4_0(const uint8_t* b, float* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, b += 18, y += 32) {
        const float d = load_f16(b);
        const uint8_t* qs = b + 2;
        for (int j = 0; j < 16; ++j) {
            y[j] = static_cast<float>((qs[j] & 0x0F) - 8) * d;
            y[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
        }
    }
}

void dequant_q4_1(const uint8_t* b, float* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, b += 20, y += 32) {
        const float d = load_f16(b), m = load_f16(b + 2);
        const uint8_t* qs = b + 4;
        // The nibbles as ints first: the loops below then vectorize (the same products and sums).
        int32_t q[32];
        for (int j = 0; j < 16; ++j) {
            q[j] = qs[j] & 0x0F;
            q[j + 16] = qs[j] >> 4;
        }
        for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(q[j]) * d + m;
    }
}

void dequant_q5(const uint8_t* b, float* y, int64_t nb, bool has_min) {
    const int64_t bytes = has_min ? 24 : 22;
    for (int64_t i = 0; i < nb; ++i, b += bytes, y += 32) {
        const float d = load_f16(b);
        const float m = has_min ? load_f16(b + 2) : 0.0f;
        const uint8_t* p = b + (has_min ? 4 : 2);
        uint32_t qh;
        std::memcpy(&qh, p, 4);
        const uint8_t* qs = p + 4;
        for (int j = 0; j < 16; ++j) {
            const int xh0 = static_cast<int>(((qh >> j) << 4) & 0x10);
            const int xh1 = static_cast<int>((qh >> (j + 12)) & 0x10);
            const int x0 = (qs[j] & 0x0F) | xh0;
            const int x1 = (qs[j] >> 4) | xh1;
            if (has_min) {
                y[j] = static_cast<float>(x0) * d + m;
                y[j + 16] = static_cast<float>(x1) * d + m;
            } else {
                // No "+ 0.0f" here: it would turn -0 (negative code times a zero scale) into +0.
                y[j] = static_cast<float>(x0 - 16) * d;
                y[j + 16] = static_cast<float>(x1 - 16) * d;
            }
        }
    }
}

void dequant_q8_0(const uint8_t* b, float* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, b += 34, y += 32) {
        const float d = load_f16(b);
        const auto* qs = reinterpret_cast<const int8_t*>(b + 2);
        for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(qs[j]) * d;
    }
}

void dequant_q4_k(const uint8_t* b, float* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, b += 144) {
        const float d = load_f16(b), dmin = load_f16(b + 2);
        const uint8_t* scales = b + 4;
        const uint8_t* q = b + 16;
        int is = 0;
        for (int j = 0; j < QK_K; j += 64) {
            uint8_t sc, m;
            scale_min_k4(is + 0, scales, sc, m);
            const float d1 = d * sc, m1 = dmin * m;
            scale_min_k4(is + 1, scales, sc, m);
            const float d2 = d * sc, m2 = dmin * m;
            for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xF) - m1;
            for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
            q += 32;
            is += 2;
        }
    }
}

void dequant_q5_k(const uint8_t* b, float* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, b += 176) {
        const float d = load_f16(b), dmin = load_f16(b + 2);
        const uint8_t* scales = b + 4;
        const uint8_t* qh = b + 16;
        const uint8_t* ql = b + 48;
        int is = 0;
        uint8_t u1 = 1, u2 = 2;
        for (int j = 0; j < QK_K; j += 64) {
            uint8_t sc, m;
            scale_min_k4(is + 0, scales, sc, m);
            const float d1 = d * sc, m1 = dmin * m;
            scale_min_k4(is + 1, scales, sc, m);
            const float d2 = d * sc, m2 = dmin * m;
            for (int l = 0; l < 32; ++l)
                *y++ = d1 * static_cast<float>((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; ++l)
                *y++ = d2 * static_cast<float>((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
            ql += 32;
            is += 2;
            u1 = static_cast<uint8_t>(u1 << 2);
            u2 = static_cast<uint8_t>(u2 << 2);
        }
    }
}

void dequant_q6_k(const uint8_t* b, float* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, b += 210) {
        const uint8_t* ql = b;
        const uint8_t* qh = b + 128;
        const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
        const float d = load_f16(b + 208);
        for (int n = 0; n < QK_K; n += 128) {
            for (int l = 0; l < 32; ++l) {
                const int is = l / 16;
                const int q1 = ((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q3 = ((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l + 0] = d * sc[is + 0] * static_cast<float>(q1);
                y[l + 32] = d * sc[is + 2] * static_cast<float>(q2);
                y[l + 64] = d * sc[is + 4] * static_cast<float>(q3);
                y[l + 96] = d * sc[is + 6] * static_cast<float>(q4);
            }
            y += 128;
            ql += 64;
            qh += 32;
            sc += 8;
        }
    }
}

// Why an IQ1/IQ2/IQ3 or ternary tensor is refused, and what to do instead.
constexpr const char* kUnsupportedHint =
    " (warden runs F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K..Q6_K, IQ4_NL and IQ4_XS; "
    "re-quantize the model to one of them, e.g. llama-quantize ... Q4_K_M)";

void dequant_q2_k(const uint8_t* b, float* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, b += 84) {
        const uint8_t* sc = b;
        const uint8_t* q = b + 16;
        const float d = load_f16(b + 80), dmin = load_f16(b + 82);
        int is = 0;
        for (int n = 0; n < QK_K; n += 128, q += 32)
            for (int shift = 0; shift < 8; shift += 2)
                for (int half = 0; half < 2; ++half, ++is) {
                    const float dl = d * static_cast<float>(sc[is] & 0xF);
                    const float ml = dmin * static_cast<float>(sc[is] >> 4);
                    for (int l = 0; l < 16; ++l)
                        *y++ = dl * static_cast<float>((q[l + 16 * half] >> shift) & 3) - ml;
                }
    }
}

void dequant_q3_k(const uint8_t* b, float* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, b += 110) {
        const uint8_t* hm = b;
        const uint8_t* q = b + 32;
        const float d_all = load_f16(b + 108);
        int8_t scales[16];
        q3k_scales(b + 96, scales);
        int is = 0;
        uint8_t m = 1;
        for (int n = 0; n < QK_K; n += 128, q += 32)
            for (int shift = 0; shift < 8; shift += 2, m = static_cast<uint8_t>(m << 1))
                for (int half = 0; half < 2; ++half, ++is) {
                    const float dl = d_all * static_cast<float>(scales[is] - 32);
                    for (int l = 0; l < 16; ++l) {
                        const int l2 = l + 16 * half;
                        *y++ = dl *
                               static_cast<float>(((q[l2] >> shift) & 3) - ((hm[l2] & m) ? 0 : 4));
                    }
                }
    }
}

void dequant_iq4_nl(const uint8_t* b, float* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, b += 18, y += 32) {
        const float d = load_f16(b);
        for (int j = 0; j < 16; ++j) {
            y[j] = d * static_cast<float>(kIq4nlValues[b[2 + j] & 0xF]);
            y[j + 16] = d * static_cast<float>(kIq4nlValues[b[2 + j] >> 4]);
        }
    }
}

void dequant_iq4_xs(const uint8_t* b, float* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, b += 136) {
        const float d = load_f16(b);
        const auto scales_h = static_cast<uint16_t>(b[2] | (b[3] << 8));
        const uint8_t* qs = b + 8;
        for (int ib = 0; ib < 8; ++ib, qs += 16, y += 32) {
            const int ls =
                ((b[4 + ib / 2] >> 4 * (ib % 2)) & 0xF) | (((scales_h >> 2 * ib) & 3) << 4);
            const float dl = d * static_cast<float>(ls - 32);
            for (int j = 0; j < 16; ++j) {
                y[j] = dl * static_cast<float>(kIq4nlValues[qs[j] & 0xF]);
                y[j + 16] = dl * static_cast<float>(kIq4nlValues[qs[j] >> 4]);
            }
        }
    }
}

}  // namespace

void q3k_scales(const uint8_t* packed, int8_t* out) {
    uint32_t aux[4];
    std::memcpy(aux, packed, 12);
    constexpr uint32_t kmask1 = 0x03030303u, kmask2 = 0x0f0f0f0fu;
    const uint32_t tmp = aux[2];
    aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
    aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
    aux[0] = (aux[0] & kmask2) | (((tmp >> 0) & kmask1) << 4);
    aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
    std::memcpy(out, aux, 16);
}

int8_t iq4nl_value(int code) {
    return kIq4nlValues[code & 0xF];
}

const GgmlTypeInfo* ggml_type_info(uint32_t raw_type) {
    for (const auto& e : kTypes)
        if (e.id == raw_type) return &e.info;
    return nullptr;
}

const GgmlTypeInfo& ggml_type_info(GgmlType t) {
    const GgmlTypeInfo* info = ggml_type_info(static_cast<uint32_t>(t));
    if (!info)
        throw util::Error("unknown ggml type id " + std::to_string(static_cast<uint32_t>(t)));
    return *info;
}

std::string ggml_type_name(GgmlType t) {
    const GgmlTypeInfo* info = ggml_type_info(static_cast<uint32_t>(t));
    return info ? info->name : "type#" + std::to_string(static_cast<uint32_t>(t));
}

void check_ggml_type_supported(GgmlType t, const std::string& what) {
    const GgmlTypeInfo& info = ggml_type_info(t);
    if (!info.supported)
        throw util::Error(what + " has type " + info.name + ", which warden does not run" +
                          kUnsupportedHint);
}

void dequantize_row(GgmlType t, const void* src, float* dst, int64_t n) {
    const auto* b = static_cast<const uint8_t*>(src);
    const auto& info = ggml_type_info(t);
    util::check(n % info.block_elems == 0, std::string("row of ") + std::to_string(n) +
                                               " elements is not a whole number of " + info.name +
                                               " blocks");
    const int64_t nb = n / info.block_elems;
    switch (t) {
        case GgmlType::F32:
            std::memcpy(dst, b, static_cast<size_t>(n) * 4);
            return;
        case GgmlType::F16:
            for (int64_t i = 0; i < n; ++i) dst[i] = load_f16(b + 2 * i);
            return;
        case GgmlType::BF16:
            for (int64_t i = 0; i < n; ++i) {
                uint16_t h;
                std::memcpy(&h, b + 2 * i, 2);
                dst[i] = bf16_to_f32(h);
            }
            return;
        case GgmlType::Q4_0:
            dequant_q4_0(b, dst, nb);
            return;
        case GgmlType::Q4_1:
            dequant_q4_1(b, dst, nb);
            return;
        case GgmlType::Q5_0:
            dequant_q5(b, dst, nb, false);
            return;
        case GgmlType::Q5_1:
            dequant_q5(b, dst, nb, true);
            return;
        case GgmlType::Q8_0:
            dequant_q8_0(b, dst, nb);
            return;
        case GgmlType::Q4_K:
            dequant_q4_k(b, dst, nb);
            return;
        case GgmlType::Q5_K:
            dequant_q5_k(b, dst, nb);
            return;
        case GgmlType::Q6_K:
            dequant_q6_k(b, dst, nb);
            return;
        case GgmlType::Q2_K:
            dequant_q2_k(b, dst, nb);
            return;
        case GgmlType::Q3_K:
            dequant_q3_k(b, dst, nb);
            return;
        case GgmlType::IQ4_NL:
            dequant_iq4_nl(b, dst, nb);
            return;
        case GgmlType::IQ4_XS:
            dequant_iq4_xs(b, dst, nb);
            return;
        default:
            break;
    }
    throw util::Error(std::string("tensor type ") + info.name + " is not supported" +
                      kUnsupportedHint);
}

}  // namespace warden::tensor
