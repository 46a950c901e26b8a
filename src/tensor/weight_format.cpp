#include "tensor/weight_format.h"

#include <vector>

#include "util/error.h"

namespace warden::tensor {

namespace {
const char* kAccepted =
    "bf16, f32, fp8, int8, int8-g32 (int8 suffix: -bf16s), int4, int4-g32, int4-g128 (int4 "
    "suffixes: -asym, -bf16s, "
    "-a16), q4_k, q5_k, q6_k (GGUF tensors of that type only)";

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
        f.type =
            base == "bf16" ? WeightType::BF16 : (base == "f32" ? WeightType::F32 : WeightType::FP8);
        return f;
    }
    if (base == "q4_k" || base == "q5_k" || base == "q6_k") {
        if (parts.size() != 1) throw bad("no suffixes for " + base);
        f.type =
            base == "q4_k" ? WeightType::Q4K : (base == "q5_k" ? WeightType::Q5K : WeightType::Q6K);
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
            return "fp8";
        case WeightType::Q8:
            return std::string("int8") + (f.group ? "-g" + std::to_string(f.group) : "") +
                   (f.bf16_scales ? "-bf16s" : "");
        case WeightType::Q4K:
            return "q4_k";
        case WeightType::Q5K:
            return "q5_k";
        case WeightType::Q6K:
            return "q6_k";
        case WeightType::Q4:
            break;
    }
    std::string s = "int4-g" + std::to_string(f.group);
    if (f.asym) s += "-asym";
    if (f.bf16_scales) s += "-bf16s";
    if (f.act_f32) s += "-a16";
    return s;
}

int64_t kquant_block_bytes(WeightType t) {
    switch (t) {
        case WeightType::Q4K:
            return 144;
        case WeightType::Q5K:
            return 176;
        case WeightType::Q6K:
            return 210;
        default:
            throw util::Error("kquant_block_bytes: not a K-quant type");
    }
}

const char* kquant_type_name(WeightType t) {
    return t == WeightType::Q4K ? "Q4_K" : (t == WeightType::Q5K ? "Q5_K" : "Q6_K");
}

}  // namespace warden::tensor
