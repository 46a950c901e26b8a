#include "tensor/weight_format.h"

#include <vector>

#include "util/error.h"

namespace warden::tensor {

namespace {
const char* kAccepted =
    "bf16, f32, fp8, fp8-b128 (fp8-bN: a scale per N columns, N a multiple of 4 up to 256), "
    "int8, int8-g32 (int8 suffix: -bf16s), int4, int4-g32, int4-g128 (int4 "
    "suffixes: -asym, -bf16s, "
    "-a16), q4_k, q5_k, q6_k, q2_k, q3_k, q4_0, q4_1, q5_0, q5_1, q8_0, iq4_nl, iq4_xs (GGUF "
    "tensors of "
    "that type only)";

// The GGUF-block formats by name (kernels/matmul_kquant.h).
struct BlockFormat {
    const char* name;
    WeightType type;
};
constexpr BlockFormat kBlockFormats[] = {
    {"q4_k", WeightType::Q4K},     {"q5_k", WeightType::Q5K},  {"q6_k", WeightType::Q6K},
    {"q2_k", WeightType::Q2K},     {"q3_k", WeightType::Q3K},  {"q5_0", WeightType::Q5_0},
    {"q5_1", WeightType::Q5_1},    {"q8_0", WeightType::Q8_0}, {"iq4_nl", WeightType::IQ4NL},
    {"iq4_xs", WeightType::IQ4XS}, {"q4_0", WeightType::Q4_0}, {"q4_1", WeightType::Q4_1},
};

std::vector<std::string> split_dash(const std::string& s) {
    std::vector<std::string> out(1);
    for (char c : s) {
        if (c == '-') {
            out.emplace_back();
        } else {
            out.back() += c;
        }
    }
    return out;
}
// The number after a suffix's letter ("g128" -> 128), or -1 when the rest is not all digits.
int64_t suffix_number(const std::string& p) {
    int64_t n = 0;
    for (size_t j = 1; j < p.size(); ++j) {
        if (p[j] < '0' || p[j] > '9' || n > 100000) return -1;
        n = n * 10 + (p[j] - '0');
    }
    return p.size() < 2 ? -1 : n;
}
}  // namespace

WeightFormat parse_weight_format(const std::string& s) {
    const auto parts = split_dash(s);
    WeightFormat f;
    auto bad = [&](const std::string& why) {
        return util::Error("unknown weight format '" + s + "'" +
                           (why.empty() ? "" : " (" + why + ")") + "; accepted: " + kAccepted);
    };
    const std::string& base = parts[0];
    if (base == "fp8" && parts.size() == 2) {  // fp8-bN: block-scaled (FP8 checkpoints' layout)
        const std::string& p = parts[1];
        const int64_t g = suffix_number(p);
        if (p[0] == 'b' && p.size() > 1 && g < 0) throw bad("bad block '" + p + "'");
        if (p[0] != 'b' || !fp8_block_valid(g))
            throw bad("fp8 takes only -bN, N a multiple of 4 from 4 to 256 (columns per scale)");
        f.type = WeightType::FP8;
        f.group = static_cast<int32_t>(g);
        return f;
    }
    if (base == "bf16" || base == "f32" || base == "fp8") {
        if (parts.size() != 1) throw bad("no suffixes for " + base);
        f.type =
            base == "bf16" ? WeightType::BF16 : (base == "f32" ? WeightType::F32 : WeightType::FP8);
        return f;
    }
    for (const auto& b : kBlockFormats)
        if (base == b.name) {
            if (parts.size() != 1) throw bad("no suffixes for " + base);
            f.type = b.type;
            return f;
        }
    if (base == "int8") {
        f.type = WeightType::Q8;
        for (size_t i = 1; i < parts.size(); ++i) {
            if (parts[i] == "bf16s") {
                f.bf16_scales = true;
            } else if (parts[i] == "g32") {
                f.group = 32;
            } else if (parts[i].size() > 1 && parts[i][0] == 'g') {
                throw bad(
                    "int8 group size must be 32 (a scale per 32 weights, as GGUF Q8_0), got " +
                    parts[i].substr(1));
            } else {
                throw bad("int8 takes only -g32 and -bf16s");
            }
        }
        return f;
    }
    if (base != "int4") throw bad("");
    f.type = WeightType::Q4;
    f.group = 32;
    for (size_t i = 1; i < parts.size(); ++i) {
        const std::string& p = parts[i];
        if (p.size() > 1 && p[0] == 'g') {
            const int64_t g = suffix_number(p);
            if (g < 0) throw bad("bad group '" + p + "'");
            if (g != 32 && g != 128)
                throw bad("int4 group size must be 32 or 128, got " + std::to_string(g));
            f.group = static_cast<int32_t>(g);
        } else if (p == "asym") {
            f.asym = true;
        } else if (p == "bf16s") {
            f.bf16_scales = true;
        } else if (p == "a16") {
            f.act_f32 = true;
        } else if (p == "a8") {
            f.act_f32 = false;
        } else {
            throw bad("unknown int4 suffix '" + p + "'");
        }
    }
    return f;
}

std::optional<WeightFormat> default_head_format(const WeightFormat& layers) {
    if (layers.type != WeightType::Q4) return std::nullopt;
    return parse_weight_format("int8");
}

std::string weight_format_name(const WeightFormat& f) {
    switch (f.type) {
        case WeightType::BF16:
            return "bf16";
        case WeightType::F32:
            return "f32";
        case WeightType::FP8:
            return f.group ? "fp8-b" + std::to_string(f.group) : "fp8";
        case WeightType::Q8:
            return std::string("int8") + (f.group ? "-g" + std::to_string(f.group) : "") +
                   (f.bf16_scales ? "-bf16s" : "");
        case WeightType::Q4:
            break;
        default:
            for (const auto& b : kBlockFormats)
                if (b.type == f.type) return b.name;
            break;
    }
    std::string s = "int4-g" + std::to_string(f.group);
    if (f.asym) s += "-asym";
    if (f.bf16_scales) s += "-bf16s";
    if (f.act_f32) s += "-a16";
    return s;
}

namespace {
struct BlockType {
    WeightType type;
    const char* name;
    GgmlType ggml;
    int64_t elems, bytes;
};
constexpr BlockType kBlockTypes[] = {
    {WeightType::Q4K, "Q4_K", GgmlType::Q4_K, 256, 144},
    {WeightType::Q5K, "Q5_K", GgmlType::Q5_K, 256, 176},
    {WeightType::Q6K, "Q6_K", GgmlType::Q6_K, 256, 210},
    {WeightType::Q5_0, "Q5_0", GgmlType::Q5_0, 32, 22},
    {WeightType::Q5_1, "Q5_1", GgmlType::Q5_1, 32, 24},
    {WeightType::Q2K, "Q2_K", GgmlType::Q2_K, 256, 84},
    {WeightType::Q3K, "Q3_K", GgmlType::Q3_K, 256, 110},
    {WeightType::IQ4NL, "IQ4_NL", GgmlType::IQ4_NL, 32, 18},
    {WeightType::IQ4XS, "IQ4_XS", GgmlType::IQ4_XS, 256, 136},
    {WeightType::Q8_0, "Q8_0", GgmlType::Q8_0, 32, 34},
    {WeightType::Q4_0, "Q4_0", GgmlType::Q4_0, 32, 18},
    {WeightType::Q4_1, "Q4_1", GgmlType::Q4_1, 32, 20},
};
const BlockType& block_type(WeightType t) {
    for (const auto& e : kBlockTypes)
        if (e.type == t) return e;
    throw util::Error("not a GGUF block weight type");
}
}  // namespace

int64_t kquant_block_elems(WeightType t) {
    return block_type(t).elems;
}

int64_t kquant_block_bytes(WeightType t) {
    return block_type(t).bytes;
}

const char* kquant_type_name(WeightType t) {
    return block_type(t).name;
}

GgmlType kquant_ggml_type(WeightType t) {
    return block_type(t).ggml;
}

std::optional<WeightType> kquant_from_ggml(GgmlType t) {
    for (const auto& e : kBlockTypes)
        if (e.ggml == t) return e.type;
    return std::nullopt;
}

}  // namespace warden::tensor
