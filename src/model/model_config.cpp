#include "model/model_config.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "formats/gguf_file.h"
#include "util/error.h"

namespace warden::model {

using util::Error;

namespace {

Arch arch_from_name(const std::string& name, const std::string& where) {
    if (name == "llama") return Arch::Llama;
    if (name == "qwen2") return Arch::Qwen2;
    if (name == "qwen3") return Arch::Qwen3;
    if (name == "qwen3_moe") return Arch::Qwen3Moe;
    if (name == "glm4_moe") return Arch::Glm4Moe;
    if (name == "deepseek_v3" || name == "kimi_k2") return Arch::DeepseekV3;
    // llama.cpp's GGUF architecture names (general.architecture)
    if (name == "qwen3moe") return Arch::Qwen3Moe;
    if (name == "glm4moe") return Arch::Glm4Moe;
    if (name == "deepseek2") return Arch::DeepseekV3;
    throw Error(where + ": unsupported architecture '" + name +
                "' (supported: llama, qwen2, qwen3, qwen3_moe / qwen3moe, glm4_moe / glm4moe, "
                "deepseek_v3 / "
                "kimi_k2 / deepseek2)");
}

}  // namespace

std::vector<float> rope_inv_freq(int64_t rope_dim, float theta) {
    std::vector<float> f(static_cast<size_t>(rope_dim / 2));
    for (int64_t i = 0; i < rope_dim / 2; ++i)
        f[static_cast<size_t>(i)] = static_cast<float>(
            1.0 / std::pow(static_cast<double>(theta),
                           static_cast<double>(2 * i) / static_cast<double>(rope_dim)));
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

double yarn_mscale(double scale, double mscale) {
    if (scale <= 1.0) return 1.0;
    return 0.1 * mscale * std::log(scale) + 1.0;
}

void apply_yarn_rope_scaling(std::vector<float>& inv_freq, int64_t rope_dim, double theta,
                             const YarnParams& p) {
    if (!(p.factor > 0.0) || !(p.original_max_pos > 0.0) || !(p.beta_fast > 0.0) ||
        !(p.beta_slow > 0.0) || !(theta > 1.0))
        throw Error(
            "yarn rope scaling: factor, original context, beta_fast, beta_slow must be positive");
    const double dim = static_cast<double>(rope_dim);
    // Dimension index at which a frequency makes num_rot rotations over the original context.
    auto correction_dim = [&](double num_rot) {
        return dim * std::log(p.original_max_pos / (num_rot * 2.0 * M_PI)) /
               (2.0 * std::log(theta));
    };
    double low = correction_dim(p.beta_fast), high = correction_dim(p.beta_slow);
    if (p.truncate) {
        low = std::floor(low);
        high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, dim - 1.0);
    if (low == high) high += 0.001;  // transformers: prevent the singularity
    for (size_t i = 0; i < inv_freq.size(); ++i) {
        const double extrap = std::pow(theta, -static_cast<double>(2 * i) / dim);
        const double interp = extrap / p.factor;
        const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
        const double keep = 1.0 - ramp;  // share of the original (extrapolated) frequency
        inv_freq[i] = static_cast<float>(interp * (1.0 - keep) + extrap * keep);
    }
}

void ModelConfig::validate() const {
    auto pos = [&](int64_t v, const char* what) {
        if (v <= 0 || v > (int64_t{1} << 24))
            throw Error("model config: " + std::string(what) + " = " + std::to_string(v) +
                        " is out of range");
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
        throw Error("model config: rope dimension " + std::to_string(rope_dim) +
                    " is invalid for head_dim " + std::to_string(head_dim));
    if (static_cast<int64_t>(rope_inv_freq.size()) != rope_dim / 2)
        throw Error("model config: rope frequency table has the wrong size");
    if (!(rms_eps > 0.0f) || !(rope_theta > 0.0f) || !(rope_linear_factor > 0.0f))
        throw Error("model config: rms eps, rope theta and rope scale must be positive");
    if (!(rope_attn_factor > 0.0f) || !std::isfinite(rope_attn_factor) ||
        !(attn_scale_factor > 0.0f) || !std::isfinite(attn_scale_factor))
        throw Error(
            "model config: rope attention factor and attention scale must be positive and finite");
    for (float f : rope_inv_freq)
        if (!(f > 0.0f) || !std::isfinite(f))
            throw Error("model config: rope frequency table has a non-positive entry");
    if (moe.n_experts > 0) {
        const auto bad = [](const std::string& what) { throw Error("model config: MoE " + what); };
        if (moe.n_experts > 4096)
            bad("n_experts = " + std::to_string(moe.n_experts) + " is out of range");
        if (moe.top_k <= 0 || moe.top_k > moe.n_experts)
            bad("top_k = " + std::to_string(moe.top_k) +
                " must be in [1, n_experts = " + std::to_string(moe.n_experts) + "]");
        pos(moe.d_expert, "MoE expert feed-forward size");
        if (moe.n_shared < 0 || moe.n_shared > 64)
            bad("n_shared_experts = " + std::to_string(moe.n_shared) + " is out of range");
        if (moe.n_group <= 0 || moe.n_experts % moe.n_group != 0)
            bad("n_group = " + std::to_string(moe.n_group) +
                " does not divide n_experts = " + std::to_string(moe.n_experts));
        if (moe.topk_group <= 0 || moe.topk_group > moe.n_group)
            bad("topk_group = " + std::to_string(moe.topk_group) + " must be in [1, n_group]");
        if (moe.n_group > 1 && moe.n_experts / moe.n_group < 2)
            bad("grouped top-k needs at least 2 experts per group");
        if (moe.top_k > moe.topk_group * (moe.n_experts / moe.n_group))
            bad("top_k exceeds the experts of the selected groups");
        if (!(moe.routed_scaling > 0.0f)) bad("routed_scaling_factor must be positive");
        if (static_cast<int64_t>(moe.sparse.size()) != n_layers)
            bad("per-layer sparse table has the wrong size");
    }
    if (mla.enabled()) {
        pos(mla.kv_lora_rank, "kv_lora_rank");
        pos(mla.nope_dim, "qk_nope_head_dim");
        pos(mla.v_dim, "v_head_dim");
        if (mla.q_lora_rank < 0 || mla.q_lora_rank > (int64_t{1} << 24))
            throw Error("model config: q_lora_rank is out of range");
        if (head_dim != mla.nope_dim + rope_dim)
            throw Error("model config: MLA head_dim must be qk_nope_head_dim + qk_rope_head_dim");
    }
}

namespace {

// MoE / MLA hyper-parameters from llama.cpp's GGUF keys (qwen3moe, glm4moe, deepseek2).
void moe_mla_from_gguf(ModelConfig& c, const formats::GGUFFile& g) {
    const std::string a = c.arch_name + ".";
    const std::string where = "GGUF '" + g.path() + "'";
    auto layer_has = [&](int64_t l, const std::string& t) {
        return g.find_tensor("blk." + std::to_string(l) + "." + t) != nullptr;
    };
    MoeConfig& m = c.moe;
    m.n_experts = g.get_int(a + "expert_count");
    m.top_k = g.get_int(a + "expert_used_count");
    m.d_expert = g.get_int(a + "expert_feed_forward_length");
    m.n_shared = g.get_int_opt(a + "expert_shared_count").value_or(0);
    m.n_group = g.get_int_opt(a + "expert_group_count").value_or(1);
    m.topk_group = g.get_int_opt(a + "expert_group_used_count").value_or(1);
    m.routed_scaling =
        static_cast<float>(g.get_float_opt(a + "expert_weights_scale").value_or(1.0));
    // llama.cpp: qwen3moe always renormalizes the top-k weights; deepseek2 / glm4moe say so.
    m.norm_topk_prob = g.get_bool_opt(a + "expert_weights_norm").value_or(c.arch == Arch::Qwen3Moe);
    // expert_gating_func: 1 softmax, 2 sigmoid. llama.cpp's default is softmax (DeepSeek-V2).
    const int64_t gating = g.get_int_opt(a + "expert_gating_func").value_or(1);
    if (gating != 1 && gating != 2)
        throw Error(where + ": unsupported " + a + "expert_gating_func = " +
                    std::to_string(gating) + " (supported: 1 softmax, 2 sigmoid)");
    m.scoring = gating == 2 ? RouterScoring::Sigmoid : RouterScoring::Softmax;
    if (c.arch != Arch::Qwen3Moe && m.scoring != RouterScoring::Sigmoid)
        throw Error(
            where + ": " + c.arch_name + " with softmax routing (" + a +
            "expert_gating_func missing or 1; DeepSeek-V2 style) is not supported; only sigmoid "
            "noaux_tc routing (expert_gating_func = 2)");
    if (m.scoring == RouterScoring::Softmax &&
        (m.n_shared != 0 || m.n_group != 1 || m.routed_scaling != 1.0f))
        throw Error(
            where +
            ": softmax routing with shared experts, expert groups or expert_weights_scale is not "
            "supported");
    m.score_bias = m.scoring == RouterScoring::Sigmoid;
    if (c.n_layers <= 0 || c.n_layers > (int64_t{1} << 24)) return;  // validate() reports it
    m.sparse.assign(static_cast<size_t>(c.n_layers), 1);
    const int64_t lead = g.get_int_opt(a + "leading_dense_block_count").value_or(0);
    // The first nextn block (index n_layers) is MoE when it has a router.
    c.nextn.sparse = c.nextn.n_layers > 0 && layer_has(c.n_layers, "ffn_gate_inp.weight");
    for (int64_t l = 0; l < c.n_layers; ++l) {
        if (l < lead) m.sparse[static_cast<size_t>(l)] = 0;
        // qwen3moe: a layer without a router is dense (mlp_only_layers / decoder_sparse_step
        // checkpoints; llama.cpp itself expects every qwen3moe layer to be sparse).
        if (c.arch == Arch::Qwen3Moe && !layer_has(l, "ffn_gate_inp.weight"))
            m.sparse[static_cast<size_t>(l)] = 0;
    }
    if (c.arch == Arch::Glm4Moe) {
        c.qk_norm = layer_has(0, "attn_q_norm.weight");
        c.qkv_bias = layer_has(0, "attn_q.bias");
    }
    if (c.arch == Arch::DeepseekV3) {
        MlaConfig& mla = c.mla;
        mla.q_lora_rank = g.get_int_opt(a + "attention.q_lora_rank").value_or(0);
        mla.kv_lora_rank = g.get_int(a + "attention.kv_lora_rank");
        c.rope_dim = g.get_int(a + "rope.dimension_count");
        // Newer converters: key_length / value_length describe the MQA view of the latent
        // (kv_lora_rank + rope, kv_lora_rank) and the per-head sizes are the *_mla keys;
        // older ones wrote the per-head sizes into key_length / value_length.
        if (auto k = g.get_int_opt(a + "attention.key_length_mla")) {
            c.head_dim = *k;
            mla.v_dim = g.get_int(a + "attention.value_length_mla");
        } else {
            c.head_dim = g.get_int(a + "attention.key_length");
            mla.v_dim = g.get_int(a + "attention.value_length");
        }
        mla.nope_dim = c.head_dim - c.rope_dim;
        if (mla.kv_lora_rank <= 0 || mla.nope_dim <= 0)
            throw Error(where + ": invalid MLA shape (kv_lora_rank " +
                        std::to_string(mla.kv_lora_rank) + ", key length " +
                        std::to_string(c.head_dim) + ", rope " + std::to_string(c.rope_dim) + ")");
        // GGUF stores MLA as MQA (head_count_kv 1); warden's MLA has per-head latent keys.
        c.n_kv_heads = c.n_heads;
        // llama.cpp's deepseek2 rotates adjacent pairs (its converter does not permute, the
        // checkpoints' rope dims are interleaved, transformers' rope_interleave).
        c.rope_style = RopeStyle::Interleaved;
    }
}

}  // namespace

ModelConfig config_from_gguf(const formats::GGUFFile& g) {
    ModelConfig c;
    c.arch_name = g.get_string("general.architecture");
    c.arch = arch_from_name(c.arch_name, "GGUF '" + g.path() + "'");
    const std::string a = c.arch_name + ".";
    c.n_layers = g.get_int(a + "block_count");
    // glm4moe / deepseek2: multi-token-prediction blocks are appended after the decoder layers.
    if (auto nextn = g.get_int_opt(a + "nextn_predict_layers")) {
        if (*nextn < 0 || *nextn >= c.n_layers)
            throw Error("GGUF '" + g.path() + "': " + a +
                        "nextn_predict_layers = " + std::to_string(*nextn) + " is out of range");
        c.n_layers -= *nextn;
        c.nextn.n_layers = *nextn;
    }
    c.d_model = g.get_int(a + "embedding_length");
    c.d_ff = g.get_int(a + "feed_forward_length");
    c.n_heads = g.get_int(a + "attention.head_count");
    c.n_kv_heads = g.get_int_opt(a + "attention.head_count_kv").value_or(c.n_heads);
    c.max_ctx = g.get_int_opt(a + "context_length").value_or(2048);
    c.head_dim = g.get_int_opt(a + "attention.key_length")
                     .value_or(c.n_heads > 0 ? c.d_model / c.n_heads : 0);
    c.rope_dim = g.get_int_opt(a + "rope.dimension_count").value_or(c.head_dim);
    c.rms_eps =
        static_cast<float>(g.get_float_opt(a + "attention.layer_norm_rms_epsilon").value_or(1e-5));
    c.rope_theta = static_cast<float>(g.get_float_opt(a + "rope.freq_base").value_or(10000.0));
    if (auto v = g.get_int_opt(a + "vocab_size")) {
        c.vocab_size = *v;
    } else if (g.has("tokenizer.ggml.tokens")) {
        c.vocab_size = static_cast<int64_t>(g.get("tokenizer.ggml.tokens").arr.size());
    }
    // llama.cpp's llama converter permutes Q/K for interleaved rotation; qwen2/qwen3 stay NeoX.
    c.rope_style = c.arch == Arch::Llama ? RopeStyle::Interleaved : RopeStyle::NeoX;
    c.qkv_bias = c.arch == Arch::Qwen2;
    c.qk_norm = c.arch == Arch::Qwen3 || c.arch == Arch::Qwen3Moe;
    c.tied_embeddings = g.find_tensor("output.weight") == nullptr;
    if (c.arch == Arch::Qwen3Moe || c.arch == Arch::Glm4Moe || c.arch == Arch::DeepseekV3)
        moe_mla_from_gguf(c, g);
    if (c.rope_dim > 0 && c.rope_dim <= (int64_t{1} << 24))
        c.rope_inv_freq = rope_inv_freq(c.rope_dim, c.rope_theta);
    if (const formats::GGUFValue* st = g.find(a + "rope.scaling.type")) {
        const std::string type = st->as_string(a + "rope.scaling.type");
        const double factor = g.get_float_opt(a + "rope.scaling.factor").value_or(1.0);
        if (type == "linear") {
            c.rope_linear_factor = static_cast<float>(factor);
        } else if (type == "yarn") {
            YarnParams y;
            y.factor = factor;
            const std::string orig_key = a + "rope.scaling.original_context_length";
            if (!g.has(orig_key))
                throw Error("GGUF '" + g.path() + "': yarn rope scaling without " + orig_key);
            y.original_max_pos = static_cast<double>(g.get_int(orig_key));
            y.beta_fast = g.get_float_opt(a + "rope.scaling.yarn_beta_fast").value_or(32.0);
            y.beta_slow = g.get_float_opt(a + "rope.scaling.yarn_beta_slow").value_or(1.0);
            try {
                apply_yarn_rope_scaling(c.rope_inv_freq, c.rope_dim, c.rope_theta, y);
            } catch (const Error& e) {
                throw Error("GGUF '" + g.path() + "': " + e.what());
            }
            // llama.cpp: yarn_log_multiplier is 0.1 * mscale_all_dim (its loader divides by 0.1).
            // With it, cos/sin keep get_mscale(f, mscale) / get_mscale(f, mscale_all_dim), where
            // deepseek2 assumes mscale == mscale_all_dim (1), others mscale = 1; DeepSeek's softmax
            // scale gains get_mscale(f, mscale_all_dim)^2. Without it: get_mscale(f, 1), or the
            // converter's yarn_attn_factor (transformers' attention_factor).
            const double log_mul =
                g.get_float_opt(a + "rope.scaling.yarn_log_multiplier").value_or(0.0);
            if (log_mul != 0.0) {
                const double all_dim = log_mul / 0.1;
                const double ms = c.arch == Arch::DeepseekV3 ? all_dim : 1.0;
                c.rope_attn_factor =
                    static_cast<float>(yarn_mscale(factor, ms) / yarn_mscale(factor, all_dim));
                if (c.arch == Arch::DeepseekV3) {
                    const double s = yarn_mscale(factor, all_dim);
                    c.attn_scale_factor = static_cast<float>(s * s);
                }
            } else if (auto af = g.get_float_opt(a + "rope.scaling.yarn_attn_factor")) {
                c.rope_attn_factor = static_cast<float>(*af);
            } else {
                c.rope_attn_factor = static_cast<float>(yarn_mscale(factor, 1.0));
            }
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

// A value a config may hold under either of two names (transformers 4 and 5 layouts). Missing
// from both is an error; both present with different values too.
template <typename T>
T json_get_either(const nlohmann::json& j, const char* key4, const char* key5,
                  const std::string& path) {
    const bool has4 = j.contains(key4) && !j.at(key4).is_null(),
               has5 = j.contains(key5) && !j.at(key5).is_null();
    if (!has4 && !has5)
        throw Error(path + ": config.json has neither '" + key4 + "' nor '" + key5 + "'");
    if (has4 && has5 && j.at(key4) != j.at(key5))
        throw Error(path + ": config.json has '" + key4 + "' and '" + key5 +
                    "' with different values");
    return json_get<T>(j, has5 ? key5 : key4, path);
}

// RoPE settings in either layout. transformers 4: top-level rope_theta, rope_scaling
// ({rope_type|type, factor, ...} or null) and, for GLM-4, partial_rotary_factor. transformers 5:
// one rope_parameters object holding rope_theta, rope_type, the scaling fields and
// partial_rotary_factor. `scaling` is the object with the scaling fields, or null for none.
struct RopeJson {
    double theta = 0.0;
    nlohmann::json scaling;  // null: no scaling
    nlohmann::json partial;  // partial_rotary_factor, null when absent
};

RopeJson rope_from_hf_json(const nlohmann::json& j, const std::string& path) {
    RopeJson r;
    const bool has_params = j.contains("rope_parameters") && !j.at("rope_parameters").is_null();
    if (!has_params) {
        // A config without rope_theta is not read with a guessed theta: the checkpoint's value
        // differs between models of one architecture (10000, 500000, 1000000, ...).
        r.theta = json_get<double>(j, "rope_theta", path);
        if (j.contains("rope_scaling") && !j.at("rope_scaling").is_null()) {
            r.scaling = j.at("rope_scaling");
            if (!r.scaling.is_object()) throw Error(path + ": rope_scaling is not an object");
        }
        if (j.contains("partial_rotary_factor")) r.partial = j.at("partial_rotary_factor");
        return r;
    }
    const auto& rp = j.at("rope_parameters");
    if (!rp.is_object()) throw Error(path + ": rope_parameters is not an object");
    if (!rp.contains("rope_theta") && !rp.contains("rope_type")) {
        // transformers 5 keys rope_parameters by layer type for models with several attention
        // kinds ({"full_attention": {...}, "sliding_attention": {...}}).
        throw Error(path +
                    ": rope_parameters without rope_theta/rope_type (per-layer-type RoPE is not "
                    "supported)");
    }
    r.theta = json_get<double>(rp, "rope_theta", path);
    // A 4.x key beside rope_parameters must agree with it, or the file is ambiguous.
    if (j.contains("rope_theta") && !j.at("rope_theta").is_null() &&
        j.at("rope_theta") != rp.at("rope_theta"))
        throw Error(path + ": rope_theta and rope_parameters.rope_theta differ");
    if (j.contains("rope_scaling") && !j.at("rope_scaling").is_null()) {
        const auto& rs = j.at("rope_scaling");
        if (!rs.is_object()) throw Error(path + ": rope_scaling is not an object");
        for (auto it = rs.begin(); it != rs.end(); ++it) {
            const std::string key = it.key() == "type" ? "rope_type" : it.key();
            if (!rp.contains(key) || rp.at(key) != it.value())
                throw Error(path + ": rope_scaling." + it.key() +
                            " disagrees with rope_parameters");
        }
    }
    const std::string type = json_get_or<std::string>(rp, "rope_type", "default", path);
    if (type != "default") r.scaling = rp;
    if (rp.contains("partial_rotary_factor")) r.partial = rp.at("partial_rotary_factor");
    if (j.contains("partial_rotary_factor") && !j.at("partial_rotary_factor").is_null()) {
        if (!r.partial.is_null() && r.partial != j.at("partial_rotary_factor"))
            throw Error(path +
                        ": partial_rotary_factor and rope_parameters.partial_rotary_factor differ");
        r.partial = j.at("partial_rotary_factor");
    }
    return r;
}

// Qwen3-MoE: softmax router; layer l is sparse unless listed in mlp_only_layers, and only
// every decoder_sparse_step-th layer ((l + 1) % step == 0). GLM-4 MoE: sigmoid "noaux_tc"
// router with correction bias and grouped top-k, shared experts, layers < first_k_dense_replace
// dense.
void moe_from_hf_json(ModelConfig& c, const nlohmann::json& j, const std::string& path) {
    MoeConfig& m = c.moe;
    if (c.arch != Arch::Qwen3Moe && c.arch != Arch::Glm4Moe && c.arch != Arch::DeepseekV3) return;
    m.top_k = json_get<int64_t>(j, "num_experts_per_tok", path);
    m.d_expert = json_get<int64_t>(j, "moe_intermediate_size", path);
    if (c.n_layers <= 0 || c.n_layers > (int64_t{1} << 24)) return;  // validate() reports it
    m.sparse.assign(static_cast<size_t>(c.n_layers), 1);
    if (c.arch == Arch::Qwen3Moe) {
        // transformers 5 writes num_local_experts, 4.x num_experts.
        m.n_experts = json_get_either<int64_t>(j, "num_experts", "num_local_experts", path);
        m.scoring = RouterScoring::Softmax;
        m.norm_topk_prob = json_get_or<bool>(j, "norm_topk_prob", false, path);
        const int64_t step = json_get_or<int64_t>(j, "decoder_sparse_step", 1, path);
        if (step <= 0) throw Error(path + ": decoder_sparse_step must be positive");
        const auto only = json_get_or<std::vector<int64_t>>(j, "mlp_only_layers", {}, path);
        for (int64_t l = 0; l < c.n_layers; ++l)
            m.sparse[static_cast<size_t>(l)] = (l + 1) % step == 0;
        for (int64_t l : only)
            if (l >= 0 && l < c.n_layers) m.sparse[static_cast<size_t>(l)] = 0;
        if (m.n_experts == 0) m.sparse.assign(static_cast<size_t>(c.n_layers), 0);
    } else {
        m.n_experts = json_get<int64_t>(j, "n_routed_experts", path);
        m.scoring = RouterScoring::Sigmoid;
        m.score_bias = true;
        m.norm_topk_prob = json_get_or<bool>(j, "norm_topk_prob", true, path);
        m.n_shared = json_get_or<int64_t>(j, "n_shared_experts", 0, path);
        m.n_group = json_get_or<int64_t>(j, "n_group", 1, path);
        m.topk_group = json_get_or<int64_t>(j, "topk_group", 1, path);
        m.routed_scaling =
            static_cast<float>(json_get_or<double>(j, "routed_scaling_factor", 1.0, path));
        if (c.arch == Arch::DeepseekV3) {
            const auto method = json_get_or<std::string>(j, "topk_method", "noaux_tc", path);
            const auto sf = json_get_or<std::string>(j, "scoring_func", "sigmoid", path);
            if (method != "noaux_tc" || sf != "sigmoid")
                throw Error(path + ": unsupported MoE routing topk_method '" + method +
                            "' / scoring_func '" + sf + "' (supported: noaux_tc with sigmoid)");
            m.norm_topk_prob = json_get_or<bool>(j, "norm_topk_prob", true, path);
        }
        const int64_t first_dense = json_get_or<int64_t>(j, "first_k_dense_replace", 0, path);
        for (int64_t l = 0; l < c.n_layers && l < first_dense; ++l)
            m.sparse[static_cast<size_t>(l)] = 0;
        // MTP layers (glm4_moe / deepseek_v3) follow the decoder layers, indexed from n_layers.
        c.nextn.n_layers = json_get_or<int64_t>(j, "num_nextn_predict_layers", 0, path);
        if (c.nextn.n_layers < 0 || c.nextn.n_layers > 64)
            throw Error(path + ": num_nextn_predict_layers is out of range");
        c.nextn.sparse = m.n_experts > 0 && c.n_layers >= first_dense;
    }
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
    c.head_dim =
        json_get_or<int64_t>(j, "head_dim", c.n_heads > 0 ? c.d_model / c.n_heads : 0, path);
    c.vocab_size = json_get<int64_t>(j, "vocab_size", path);
    c.max_ctx = json_get_or<int64_t>(j, "max_position_embeddings", 2048, path);
    c.rms_eps = static_cast<float>(json_get_or<double>(j, "rms_norm_eps", 1e-6, path));
    const RopeJson rope = rope_from_hf_json(j, path);
    c.rope_theta = static_cast<float>(rope.theta);
    const bool tied_default = c.arch == Arch::Qwen2 || c.arch == Arch::Qwen3;
    c.tied_embeddings = json_get_or<bool>(j, "tie_word_embeddings", tied_default, path);
    c.rope_style = RopeStyle::NeoX;
    c.qkv_bias = c.arch == Arch::Qwen2 || json_get_or<bool>(j, "attention_bias", false, path);
    c.qk_norm = c.arch == Arch::Qwen3 || c.arch == Arch::Qwen3Moe ||
                (c.arch == Arch::Glm4Moe && json_get_or<bool>(j, "use_qk_norm", false, path));
    c.rope_dim = c.head_dim;
    if (c.arch == Arch::Glm4Moe) {
        // transformers: rotary dim = int(head_dim * partial_rotary_factor), rotate_half on it.
        // Required: no guessed default (transformers' class default is 0.5, but a checkpoint
        // that rotates another fraction would be read wrong without a word).
        if (rope.partial.is_null())
            throw Error(path + ": glm4_moe config.json has no partial_rotary_factor");
        if (!rope.partial.is_number())
            throw Error(path + ": partial_rotary_factor is not a number");
        const double f = rope.partial.get<double>();
        if (!(f > 0.0 && f <= 1.0)) throw Error(path + ": partial_rotary_factor must be in (0, 1]");
        c.rope_dim = static_cast<int64_t>(static_cast<double>(c.head_dim) * f);
    }
    if (c.arch == Arch::DeepseekV3) {
        // MLA: q/k heads are nope + rope wide; the rope part is rotated on adjacent pairs when
        // rope_interleave (transformers' default for DeepSeek-V3), on halves otherwise.
        c.mla.q_lora_rank = json_get_or<int64_t>(j, "q_lora_rank", 0, path);
        c.mla.kv_lora_rank = json_get<int64_t>(j, "kv_lora_rank", path);
        c.mla.nope_dim = json_get<int64_t>(j, "qk_nope_head_dim", path);
        c.mla.v_dim = json_get<int64_t>(j, "v_head_dim", path);
        if (c.mla.kv_lora_rank <= 0) throw Error(path + ": kv_lora_rank must be positive");
        c.rope_dim = json_get<int64_t>(j, "qk_rope_head_dim", path);
        c.head_dim = c.mla.nope_dim + c.rope_dim;
        c.rope_style = json_get_or<bool>(j, "rope_interleave", true, path) ? RopeStyle::Interleaved
                                                                           : RopeStyle::NeoX;
        if (json_get_or<bool>(j, "attention_bias", false, path))
            throw Error(path + ": deepseek_v3 with attention_bias is not supported");
        c.qkv_bias = false;
    }
    moe_from_hf_json(c, j, path);
    if (c.rope_dim > 0) c.rope_inv_freq = rope_inv_freq(c.rope_dim, c.rope_theta);
    if (!rope.scaling.is_null()) {
        const auto& rs = rope.scaling;
        std::string type = json_get_or<std::string>(rs, "rope_type", "", path);
        if (type.empty()) type = json_get_or<std::string>(rs, "type", "default", path);
        const double factor = json_get_or<double>(rs, "factor", 1.0, path);
        if (type == "llama3") {
            apply_llama3_rope_scaling(
                c.rope_inv_freq, static_cast<float>(factor),
                static_cast<float>(json_get_or<double>(rs, "low_freq_factor", 1.0, path)),
                static_cast<float>(json_get_or<double>(rs, "high_freq_factor", 4.0, path)),
                static_cast<float>(
                    json_get_or<double>(rs, "original_max_position_embeddings", 8192.0, path)));
        } else if (type == "linear") {
            c.rope_linear_factor = static_cast<float>(factor);
        } else if (type == "yarn") {
            // transformers' _compute_yarn_parameters; rope_dim is its int(head_dim *
            // partial_rotary_factor) (DeepSeek: qk_rope_head_dim).
            if (!rs.contains("factor")) throw Error(path + ": yarn rope_scaling without 'factor'");
            YarnParams y;
            y.factor = factor;
            const double orig =
                json_get_or<double>(rs, "original_max_position_embeddings", 0.0, path);
            y.original_max_pos = orig > 0.0 ? orig : static_cast<double>(c.max_ctx);
            // `get("beta_fast") or 32`: absent, null and 0 all mean the default
            const double bf = json_get_or<double>(rs, "beta_fast", 0.0, path);
            const double bs = json_get_or<double>(rs, "beta_slow", 0.0, path);
            y.beta_fast = bf != 0.0 ? bf : 32.0;
            y.beta_slow = bs != 0.0 ? bs : 1.0;
            y.truncate = json_get_or<bool>(rs, "truncate", true, path);
            try {
                apply_yarn_rope_scaling(c.rope_inv_freq, c.rope_dim, c.rope_theta, y);
            } catch (const Error& e) {
                throw Error(path + ": " + e.what());
            }
            const double mscale = json_get_or<double>(rs, "mscale", 0.0, path);
            const double all_dim = json_get_or<double>(rs, "mscale_all_dim", 0.0, path);
            double af = 0.0;
            if (rs.contains("attention_factor") && !rs.at("attention_factor").is_null()) {
                af = json_get<double>(rs, "attention_factor", path);
            } else if (mscale != 0.0 && all_dim != 0.0) {
                af = yarn_mscale(factor, mscale) / yarn_mscale(factor, all_dim);
            } else {
                af = yarn_mscale(factor, 1.0);
            }
            c.rope_attn_factor = static_cast<float>(af);
        } else if (type != "default") {
            throw Error(path + ": unsupported rope_scaling type '" + type +
                        "' (supported: default, linear, llama3, yarn)");
        }
        // DeepseekV3Attention: softmax scale *= yarn_get_mscale(factor, mscale_all_dim)^2 whenever
        // rope_scaling has a non-zero mscale_all_dim.
        if (c.arch == Arch::DeepseekV3) {
            const double all_dim = json_get_or<double>(rs, "mscale_all_dim", 0.0, path);
            if (all_dim != 0.0) {
                const double s = yarn_mscale(factor, all_dim);
                c.attn_scale_factor = static_cast<float>(s * s);
            }
        }
    }
    return c;
}

}  // namespace warden::model
