#include "convert/gguf_type_mix.h"

#include <algorithm>
#include <cctype>
#include <cstdio>

namespace warden::convert {

namespace {

using G = tensor::GgmlType;

bool has(const std::string& s, const char* part) {
    return s.find(part) != std::string::npos;
}

// llama-quantize's layers that get more bits: the first and last eighth, and every third between.
bool use_more_bits(int64_t i, int64_t n) {
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

// The layer of "blk.N.*", or -1.
int64_t layer_of(const std::string& name) {
    long long l = -1;
    if (std::sscanf(name.c_str(), "blk.%lld.", &l) != 1) return -1;
    return l;
}

G fallback(G t, int64_t cols) {
    if (cols % 256 == 0) return t;
    G f = t == G::Q4_K ? G::Q5_0 : (t == G::Q5_K ? G::Q5_1 : G::Q8_0);
    return cols % 32 == 0 ? f : G::F16;
}

}  // namespace

std::optional<GgufTypeMix> parse_gguf_type_mix(const std::string& s) {
    std::string u = s;
    std::transform(u.begin(), u.end(), u.begin(),
                   [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
    // llama_ftype values of llama.cpp's include/llama.h.
    if (u == "Q4_K_S") return GgufTypeMix{u, 14, G::Q4_K};
    if (u == "Q4_K_M") return GgufTypeMix{u, 15, G::Q4_K};
    if (u == "Q5_K_S") return GgufTypeMix{u, 16, G::Q5_K};
    if (u == "Q5_K_M") return GgufTypeMix{u, 17, G::Q5_K};
    if (u == "Q6_K") return GgufTypeMix{u, 18, G::Q6_K};
    return std::nullopt;
}

std::vector<tensor::GgmlType> choose_gguf_types(
    const GgufTypeMix& mix, const std::vector<const formats::GGUFTensor*>& quantized,
    int64_t n_layers, int64_t n_experts, bool has_output) {
    const bool q4_k_s = mix.name == "Q4_K_S", q4_k_m = mix.name == "Q4_K_M",
               q5_k_m = mix.name == "Q5_K_M";
    const bool moe8 = n_experts == 8;
    int64_t n_attention_wv = 0;
    for (const auto* t : quantized)
        if (has(t->name, "attn_v.weight") || has(t->name, "attn_qkv.weight")) ++n_attention_wv;
    int64_t i_attention_wv = 0, i_ffn_down = 0;
    std::vector<G> out;
    out.reserve(quantized.size());
    for (const auto* t : quantized) {
        const std::string& name = t->name;
        const int64_t cols = t->shape.empty() ? 0 : t->shape[0];
        G type = mix.base;
        if (name == "output.weight" || (!has_output && name == "token_embd.weight")) {
            out.push_back(cols % 256 == 0 ? G::Q6_K : (cols % 32 == 0 ? G::Q8_0 : G::F16));
            continue;
        }
        if (has(name, "attn_v.weight")) {
            if ((q4_k_m || q5_k_m) && use_more_bits(i_attention_wv, n_attention_wv))
                type = G::Q6_K;
            else if (q4_k_s && i_attention_wv < 4)
                type = G::Q5_K;
            if (moe8) type = G::Q8_0;
            ++i_attention_wv;
        } else if (has(name, "attn_k.weight")) {
            if (moe8) type = G::Q8_0;
        } else if (has(name, "ffn_down")) {
            const int64_t l = layer_of(name);
            const int64_t i_layer = l >= 0 ? l : i_ffn_down;
            if ((q4_k_m || q5_k_m) && use_more_bits(i_layer, n_layers))
                type = G::Q6_K;
            else if (q4_k_s && i_layer < n_layers / 8)
                type = G::Q5_K;
            ++i_ffn_down;
        } else if (has(name, "attn_output.weight")) {
            if (moe8 && (q4_k_s || q4_k_m)) type = G::Q5_K;
        } else if (has(name, "attn_qkv.weight")) {
            if (q4_k_m)
                type = G::Q5_K;
            else if (q5_k_m)
                type = G::Q6_K;
        }
        out.push_back(fallback(type, cols));
    }
    return out;
}

}  // namespace warden::convert
