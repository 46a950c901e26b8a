#include "quant/weight_format.h"

#include <vector>

#include "kernels/matmul_quant.h"
#include "util/error.h"

namespace warden::quant {

namespace {
const char* kAccepted =
    "bf16, f32, fp8, int8, int8-g32 (int8 suffix: -bf16s), int4, int4-g32, int4-g128 (int4 "
    "suffixes: -asym, -bf16s, "
    "-a16), q4_k, q5_k, q6_k, q2_k, q3_k, q5_0, q5_1, iq4_nl, iq4_xs (GGUF tensors of that type "
    "only)";

// The GGUF-block formats by name (kernels/matmul_kquant.h).
struct BlockFormat {
    const char* name;
    kernels::WeightType type;
};
constexpr BlockFormat kBlockFormats[] = {
    {"q4_k", kernels::WeightType::Q4K},     {"q5_k", kernels::WeightType::Q5K},
    {"q6_k", kernels::WeightType::Q6K},     {"q2_k", kernels::WeightType::Q2K},
    {"q3_k", kernels::WeightType::Q3K},     {"q5_0", kernels::WeightType::Q5_0},
    {"q5_1", kernels::WeightType::Q5_1},    {"iq4_nl", kernels::WeightType::IQ4NL},
    {"iq4_xs", kernels::WeightType::IQ4XS},
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
}  // namespace

kernels::WeightMatrix WeightFormat::layout(int64_t rows, int64_t cols) const {
    kernels::WeightMatrix w;
    w.type = type;
    w.rows = rows;
    w.cols = cols;
    w.group = group;
    w.asym = asym;
    w.bf16_scales = bf16_scales;
    w.act_f32 = act_f32;
    return w;
}

WeightFormat parse_weight_format(const std::string& s) {
    const auto parts = split_dash(s);
    WeightFormat f;
    auto bad = [&](const std::string& why) {
        return util::Error("unknown weight format '" + s + "'" +
                           (why.empty() ? "" : " (" + why + ")") + "; accepted: " + kAccepted);
    };
    const std::string& base = parts[0];
    if (base == "bf16" || base == "f32" || base == "fp8") {
        if (parts.size() != 1) throw bad("no suffixes for " + base);
        f.type = base == "bf16"
                     ? kernels::WeightType::BF16
                     : (base == "f32" ? kernels::WeightType::F32 : kernels::WeightType::FP8);
        return f;
    }
    for (const auto& b : kBlockFormats)
        if (base == b.name) {
            if (parts.size() != 1) throw bad("no suffixes for " + base);
            f.type = b.type;
            return f;
        }
    if (base == "int8") {
        f.type = kernels::WeightType::Q8;
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
    f.type = kernels::WeightType::Q4;
    f.group = 32;
    for (size_t i = 1; i < parts.size(); ++i) {
        const std::string& p = parts[i];
        if (p.size() > 1 && p[0] == 'g') {
            int64_t g = 0;
            for (size_t j = 1; j < p.size(); ++j) {
                if (p[j] < '0' || p[j] > '9' || g > 100000) throw bad("bad group '" + p + "'");
                g = g * 10 + (p[j] - '0');
            }
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
    if (layers.type != kernels::WeightType::Q4) return std::nullopt;
    return parse_weight_format("int8");
}

std::string weight_format_name(const WeightFormat& f) {
    switch (f.type) {
        case kernels::WeightType::BF16:
            return "bf16";
        case kernels::WeightType::F32:
            return "f32";
        case kernels::WeightType::FP8:
            return "fp8";
        case kernels::WeightType::Q8:
            return std::string("int8") + (f.group ? "-g" + std::to_string(f.group) : "") +
                   (f.bf16_scales ? "-bf16s" : "");
        case kernels::WeightType::Q4:
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

int64_t weight_bytes(const WeightFormat& f, int64_t rows, int64_t cols) {
    if (!f.quantized())
        return kernels::packed_weight_elems(rows, cols) *
               (f.type == kernels::WeightType::BF16 ? 2 : 4);
    return kernels::quant_packed_bytes(f.layout(rows, cols));
}

}  // namespace warden::quant
