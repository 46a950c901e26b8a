#include "model/model_config.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "model/gguf_file.h"
#include "util/error.h"

namespace warden::model {

using util::Error;

namespace {

Arch arch_from_name(const std::string& name, const std::string& where) {
    if (name == "llama") return Arch::Llama;
    if (name == "qwen2") return Arch::Qwen2;
    if (name == "qwen3") return Arch::Qwen3;
    throw Error(where + ": unsupported architecture '" + name +
                "' (supported: llama, qwen2, qwen3)");
}

}  // namespace

std::vector<float> rope_inv_freq(int64_t rope_dim, float theta) {
    std::vector<float> f(static_cast<size_t>(rope_dim / 2));
    for (int64_t i = 0; i < rope_dim / 2; ++i)
        f[static_cast<size_t>(i)] = static_cast<float>(
            1.0 / std::pow(static_cast<double>(theta), static_cast<double>(2 * i) / static_cast<double>(rope_dim)));
    return f;
}

// Llama 3.1: long wavelengths are divided by `factor`, short ones kept, and the band between
// interpolated smoothly (transformers' _compute_llama3_parameters).
void apply_llama3_rope_scaling(std::vector<float>& inv_freq, float factor, float low_freq_factor,
                               float high_freq_factor, float original_max_pos) {
    const double low_freq_wavelen = original_max_pos / low_freq_factor;
    const double high_freq_wavelen = original_max_pos / high_freq_factor;
    for (auto& f : inv_freq) {
        const double wavelen = 2.0 * M_PI / f;
        if (wavelen > low_freq_wavelen) {
            f = static_cast<float>(f / factor);
        } else if (wavelen >= high_freq_wavelen) {
            const double smooth = (original_max_pos / wavelen - low_freq_factor) /
                                  (high_freq_factor - low_freq_factor);
            f = static_cast<float>((1.0 - smooth) * f / factor + smooth * f);
        }
    }
}

void ModelConfig::validate() const {
    auto pos = [&](int64_t v, const char* what) {
        if (v <= 0 || v > (int64_t{1} << 24))
            throw Error("model config: " + std::string(what) + " = " + std::to_string(v) + " is out of range");
    };
    pos(n_layers, "n_layers");
    pos(d_model, "hidden size");
    pos(n_heads, "n_heads");
    pos(n_kv_heads, "n_kv_heads");
    pos(head_dim, "head_dim");
    pos(d_ff, "feed-forward size");
    pos(vocab_size, "vocab size");
    pos(max_ctx, "context length");
    if (n_heads % n_kv_heads != 0)
        throw Error("model config: n_heads (" + std::to_string(n_heads) +
                    ") is not a multiple of n_kv_heads (" + std::to_string(n_kv_heads) + ")");
    if (rope_dim <= 0 || rope_dim > head_dim || rope_dim % 2 != 0)
        throw Error("model config: rope dimension " + std::to_string(rope_dim) + " is invalid for head_dim " +
                    std::to_string(head_dim));
    if (static_cast<int64_t>(rope_inv_freq.size()) != rope_dim / 2)
        throw Error("model config: rope frequency table has the wrong size");
    if (!(rms_eps > 0.0f) || !(rope_theta > 0.0f) || !(rope_linear_factor > 0.0f))
        throw Error("model config: rms eps, rope theta and rope scale must be positive");
}

ModelConfig config_from_gguf(const GGUFFile& g) {
    ModelConfig c;
    c.arch_name = g.get_string("general.architecture");
    c.arch = arch_from_name(c.arch_name, "GGUF '" + g.path() + "'");
    const std::string a = c.arch_name + ".";
    c.n_layers = g.get_int(a + "block_count");
    c.d_model = g.get_int(a + "embedding_length");
    c.d_ff = g.get_int(a + "feed_forward_length");
    c.n_heads = g.get_int(a + "attention.head_count");
    c.n_kv_heads = g.get_int_opt(a + "attention.head_count_kv").value_or(c.n_heads);
    c.max_ctx = g.get_int_opt(a + "context_length").value_or(2048);
    c.head_dim = g.get_int_opt(a + "attention.key_length")
                     .value_or(c.n_heads > 0 ? c.d_model / c.n_heads : 0);
    c.rope_dim = g.get_int_opt(a + "rope.dimension_count").value_or(c.head_dim);
    c.rms_eps = static_cast<float>(g.get_float_opt(a + "attention.layer_norm_rms_epsilon").value_or(1e-5));
    c.rope_theta = static_cast<float>(g.get_float_opt(a + "rope.freq_base").value_or(10000.0));
    if (auto v = g.get_int_opt(a + "vocab_size")) {
        c.vocab_size = *v;
    } else if (g.has("tokenizer.ggml.tokens")) {
        c.vocab_size = static_cast<int64_t>(g.get("tokenizer.ggml.tokens").arr.size());
    }
    // llama.cpp's llama converter permutes Q/K for interleaved rotation; qwen2/qwen3 stay NeoX.
    c.rope_style = c.arch == Arch::Llama ? RopeStyle::Interleaved : RopeStyle::NeoX;
    c.qkv_bias = c.arch == Arch::Qwen2;
    c.qk_norm = c.arch == Arch::Qwen3;
    c.tied_embeddings = g.find_tensor("output.weight") == nullptr;
    if (c.rope_dim > 0) c.rope_inv_freq = rope_inv_freq(c.rope_dim, c.rope_theta);
    if (const GGUFValue* st = g.find(a + "rope.scaling.type")) {
        const std::string type = st->as_string(a + "rope.scaling.type");
        const double factor = g.get_float_opt(a + "rope.scaling.factor").value_or(1.0);
        if (type == "linear") {
            c.rope_linear_factor = static_cast<float>(factor);
        } else if (type != "none" && type != "llama3") {
            throw Error("GGUF '" + g.path() + "': unsupported rope scaling '" + type + "'");
        }
    }
    // Llama 3 frequency scaling arrives as a per-dimension divisor tensor (rope_freqs.weight);
    // the loader applies it because it is tensor data, not metadata.
    return c;
}

namespace {

template <typename T>
T json_get(const nlohmann::json& j, const char* key, const std::string& path) {
    if (!j.contains(key)) throw Error(path + ": config.json is missing '" + key + "'");
    try {
        return j.at(key).get<T>();
    } catch (const nlohmann::json::exception&) {
        throw Error(path + ": config.json field '" + key + "' has the wrong type");
    }
}

template <typename T>
T json_get_or(const nlohmann::json& j, const char* key, T fallback, const std::string& path) {
    if (!j.contains(key) || j.at(key).is_null()) return fallback;
    return json_get<T>(j, key, path);
}

}  // namespace

ModelConfig config_from_hf_json(const nlohmann::json& j, const std::string& path) {
    if (!j.is_object()) throw Error(path + ": config.json is not a JSON object");
    ModelConfig c;
    c.arch_name = json_get<std::string>(j, "model_type", path);
    c.arch = arch_from_name(c.arch_name, path);
    c.n_layers = json_get<int64_t>(j, "num_hidden_layers", path);
    c.d_model = json_get<int64_t>(j, "hidden_size", path);
    c.d_ff = json_get<int64_t>(j, "intermediate_size", path);
    c.n_heads = json_get<int64_t>(j, "num_attention_heads", path);
    c.n_kv_heads = json_get_or<int64_t>(j, "num_key_value_heads", c.n_heads, path);
    c.head_dim = json_get_or<int64_t>(j, "head_dim", c.n_heads > 0 ? c.d_model / c.n_heads : 0, path);
    c.vocab_size = json_get<int64_t>(j, "vocab_size", path);
    c.max_ctx = json_get_or<int64_t>(j, "max_position_embeddings", 2048, path);
    c.rms_eps = static_cast<float>(json_get_or<double>(j, "rms_norm_eps", 1e-6, path));
    c.rope_theta = static_cast<float>(json_get_or<double>(j, "rope_theta", 10000.0, path));
    c.tied_embeddings = json_get_or<bool>(j, "tie_word_embeddings", c.arch != Arch::Llama, path);
    c.rope_style = RopeStyle::NeoX;
    c.qkv_bias = c.arch == Arch::Qwen2 || json_get_or<bool>(j, "attention_bias", false, path);
    c.qk_norm = c.arch == Arch::Qwen3;
    c.rope_dim = c.head_dim;
    if (c.rope_dim > 0) c.rope_inv_freq = rope_inv_freq(c.rope_dim, c.rope_theta);
    if (j.contains("rope_scaling") && !j.at("rope_scaling").is_null()) {
        const auto& rs = j.at("rope_scaling");
        if (!rs.is_object()) throw Error(path + ": rope_scaling is not an object");
        std::string type = json_get_or<std::string>(rs, "rope_type", "", path);
        if (type.empty()) type = json_get_or<std::string>(rs, "type", "default", path);
        const double factor = json_get_or<double>(rs, "factor", 1.0, path);
        if (type == "llama3") {
            apply_llama3_rope_scaling(
                c.rope_inv_freq, static_cast<float>(factor),
                static_cast<float>(json_get_or<double>(rs, "low_freq_factor", 1.0, path)),
                static_cast<float>(json_get_or<double>(rs, "high_freq_factor", 4.0, path)),
                static_cast<float>(json_get_or<double>(rs, "original_max_position_embeddings", 8192.0, path)));
        } else if (type == "linear") {
            c.rope_linear_factor = static_cast<float>(factor);
        } else if (type != "default") {
            throw Error(path + ": unsupported rope_scaling type '" + type + "'");
        }
    }
    return c;
}

}  // namespace warden::model
