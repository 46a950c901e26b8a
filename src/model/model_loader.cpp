#include <cstring>
#include <optional>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "model/gguf_file.h"
#include "model/model.h"
#include "model/safetensors_file.h"
#include "model/tensor_source.h"
#include "tensor/float_convert.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace warden::model {

using util::Error;

Model::Model() = default;
Model::~Model() = default;

namespace {

// Maps a role ("attn_q", layer 3) to the checkpoint's tensor name.
struct TensorNames {
    std::function<std::string(const std::string& role, int layer)> name;
};

std::string gguf_name(const std::string& role, int layer) {
    static const std::map<std::string, std::string> global = {
        {"embed", "token_embd.weight"}, {"output_norm", "output_norm.weight"},
        {"output", "output.weight"},    {"rope_freqs", "rope_freqs.weight"}};
    static const std::map<std::string, std::string> per_layer = {
        {"attn_norm", "attn_norm.weight"}, {"ffn_norm", "ffn_norm.weight"},
        {"wq", "attn_q.weight"},           {"wk", "attn_k.weight"},
        {"wv", "attn_v.weight"},           {"wo", "attn_output.weight"},
        {"bq", "attn_q.bias"},             {"bk", "attn_k.bias"},
        {"bv", "attn_v.bias"},             {"q_norm", "attn_q_norm.weight"},
        {"k_norm", "attn_k_norm.weight"},  {"w_gate", "ffn_gate.weight"},
        {"w_up", "ffn_up.weight"},         {"w_down", "ffn_down.weight"}};
    if (layer < 0) return global.at(role);
    return "blk." + std::to_string(layer) + "." + per_layer.at(role);
}

std::string hf_name(const std::string& role, int layer) {
    static const std::map<std::string, std::string> global = {
        {"embed", "model.embed_tokens.weight"}, {"output_norm", "model.norm.weight"},
        {"output", "lm_head.weight"},           {"rope_freqs", ""}};
    static const std::map<std::string, std::string> per_layer = {
        {"attn_norm", "input_layernorm.weight"},
        {"ffn_norm", "post_attention_layernorm.weight"},
        {"wq", "self_attn.q_proj.weight"},
        {"wk", "self_attn.k_proj.weight"},
        {"wv", "self_attn.v_proj.weight"},
        {"wo", "self_attn.o_proj.weight"},
        {"bq", "self_attn.q_proj.bias"},
        {"bk", "self_attn.k_proj.bias"},
        {"bv", "self_attn.v_proj.bias"},
        {"q_norm", "self_attn.q_norm.weight"},
        {"k_norm", "self_attn.k_norm.weight"},
        {"w_gate", "mlp.gate_proj.weight"},
        {"w_up", "mlp.up_proj.weight"},
        {"w_down", "mlp.down_proj.weight"}};
    if (layer < 0) return global.at(role);
    return "model.layers." + std::to_string(layer) + "." + per_layer.at(role);
}

class Loader {
public:
    Loader(Model& m, const LoadOptions& o, util::ThreadPool& pool,
           std::function<std::optional<SourceTensor>(const std::string&)> find,
           std::function<std::string(const std::string&, int)> name)
        : m_(m), opts_(o), pool_(pool), find_(std::move(find)), name_(std::move(name)) {}

    std::optional<SourceTensor> get_opt(const std::string& role, int layer) const {
        const std::string n = name_(role, layer);
        if (n.empty()) return std::nullopt;
        return find_(n);
    }

    SourceTensor get(const std::string& role, int layer) const {
        auto t = get_opt(role, layer);
        if (!t) throw Error("model '" + m_.path + "': missing tensor '" + name_(role, layer) + "'");
        return *t;
    }

    static std::string shape_str(const std::vector<int64_t>& d) {
        std::string s = "[";
        for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
        return s + "]";
    }

    void expect_shape(const SourceTensor& t, std::vector<int64_t> want) const {
        if (t.dims != want)
            throw Error("model '" + m_.path + "': tensor '" + t.name + "' has shape " + shape_str(t.dims) +
                        ", expected " + shape_str(want));
    }

    Matrix matrix(const std::string& role, int layer, int64_t rows, int64_t cols) const {
        const SourceTensor t = get(role, layer);
        expect_shape(t, {rows, cols});
        const auto wt = opts_.dtype == RuntimeDType::BF16 ? kernels::WeightType::BF16 : kernels::WeightType::F32;
        Matrix m = Matrix::owned(wt, rows, cols);
        pool_.parallel_for(rows, kernels::kPanelRows, [&](int64_t r0, int64_t r1) {
            std::vector<float> row(static_cast<size_t>(cols));
            for (int64_t r = r0; r < r1; ++r) {
                t.row_to_f32(r, row.data());
                m.pack_row(r, row.data());
            }
        });
        return m;
    }

    std::vector<float> vec(const SourceTensor& t, int64_t n) const {
        expect_shape(t, {n});
        std::vector<float> v(static_cast<size_t>(n));
        t.row_to_f32(0, v.data());
        return v;
    }
    std::vector<float> vec(const std::string& role, int layer, int64_t n) const { return vec(get(role, layer), n); }
    std::vector<float> vec_opt(const std::string& role, int layer, int64_t n) const {
        auto t = get_opt(role, layer);
        return t ? vec(*t, n) : std::vector<float>{};
    }

    void load_all() {
        const ModelConfig& c = m_.config;
        const int64_t d = c.d_model, hd = c.head_dim, q_dim = c.n_heads * hd, kv_dim = c.n_kv_heads * hd;
        ModelWeights& w = m_.weights;
        w.token_embd = matrix("embed", -1, c.vocab_size, d);
        w.output_norm = vec("output_norm", -1, d);
        if (c.tied_embeddings || !get_opt("output", -1)) {
            w.output = w.token_embd.alias();
        } else {
            w.output = matrix("output", -1, c.vocab_size, d);
        }
        w.layers.resize(static_cast<size_t>(c.n_layers));
        for (int l = 0; l < static_cast<int>(c.n_layers); ++l) {
            LayerWeights& L = w.layers[static_cast<size_t>(l)];
            L.attn_norm = vec("attn_norm", l, d);
            L.ffn_norm = vec("ffn_norm", l, d);
            L.wq = matrix("wq", l, q_dim, d);
            L.wk = matrix("wk", l, kv_dim, d);
            L.wv = matrix("wv", l, kv_dim, d);
            L.wo = matrix("wo", l, d, q_dim);
            L.w_gate = matrix("w_gate", l, c.d_ff, d);
            L.w_up = matrix("w_up", l, c.d_ff, d);
            L.w_down = matrix("w_down", l, d, c.d_ff);
            if (c.qkv_bias) {
                L.bq = vec("bq", l, q_dim);
                L.bk = vec("bk", l, kv_dim);
                L.bv = vec("bv", l, kv_dim);
            } else {
                L.bq = vec_opt("bq", l, q_dim);
                L.bk = vec_opt("bk", l, kv_dim);
                L.bv = vec_opt("bv", l, kv_dim);
            }
            if (c.qk_norm) {
                L.q_norm = vec("q_norm", l, hd);
                L.k_norm = vec("k_norm", l, hd);
            }
        }
    }

private:
    Model& m_;
    const LoadOptions& opts_;
    util::ThreadPool& pool_;
    std::function<std::optional<SourceTensor>(const std::string&)> find_;
    std::function<std::string(const std::string&, int)> name_;
};

void count_params(Model& m, const std::vector<SourceTensor>& all) {
    for (const auto& t : all) {
        m.n_params += t.n_elements();
        m.source_tensor_types[t.type_name()] += 1;
    }
}

std::unique_ptr<Model> load_gguf(const std::string& path, const LoadOptions& opts, util::ThreadPool& pool) {
    auto m = std::make_unique<Model>();
    m->path = path;
    m->format = "gguf";
    m->dtype = opts.dtype;
    m->gguf = std::make_shared<GGUFFile>(path);
    const GGUFFile& g = *m->gguf;
    m->config = config_from_gguf(g);
    std::vector<SourceTensor> all;
    for (const auto& t : g.tensors()) all.push_back(SourceTensor::from(t));
    count_params(*m, all);
    auto find = [&g](const std::string& n) -> std::optional<SourceTensor> {
        const GGUFTensor* t = g.find_tensor(n);
        if (!t) return std::nullopt;
        return SourceTensor::from(*t);
    };
    Loader loader(*m, opts, pool, find, gguf_name);
    // Llama 3 rope scaling: per-dimension frequency divisors stored as a tensor.
    if (auto rf = loader.get_opt("rope_freqs", -1)) {
        const auto factors = loader.vec(*rf, m->config.rope_dim / 2);
        for (size_t i = 0; i < factors.size(); ++i) {
            if (!(factors[i] > 0.0f)) throw Error("GGUF '" + path + "': rope_freqs has a non-positive factor");
            m->config.rope_inv_freq[i] /= factors[i];
        }
    }
    m->config.validate();
    if (g.has("tokenizer.chat_template")) m->chat_template = g.get_string("tokenizer.chat_template");
    if (opts.load_tokenizer) m->tokenizer = tokenizer::Tokenizer::from_gguf(g);
    if (opts.load_weights) loader.load_all();
    return m;
}

nlohmann::json read_json_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw Error("cannot open '" + path + "'");
    try {
        return nlohmann::json::parse(f);
    } catch (const nlohmann::json::exception& e) {
        throw Error("'" + path + "' is not valid JSON: " + std::string(e.what()));
    }
}

std::unique_ptr<Model> load_hf_dir(const std::string& dir, const LoadOptions& opts, util::ThreadPool& pool) {
    auto m = std::make_unique<Model>();
    m->path = dir;
    m->format = "safetensors";
    m->dtype = opts.dtype;
    m->config = config_from_hf_json(read_json_file(dir + "/config.json"), dir + "/config.json");
    m->config.validate();
    m->safetensors = std::make_shared<SafetensorsModel>(SafetensorsModel::open_dir(dir));
    const SafetensorsModel& st = *m->safetensors;
    std::vector<SourceTensor> all;
    for (const auto& t : st.tensors()) {
        // Count every tensor, even of dtypes the loader cannot convert.
        SourceTensor s;
        s.name = t.name;
        s.dims = t.shape.empty() ? std::vector<int64_t>{1} : t.shape;
        s.is_ggml = false;
        s.st_dtype = t.dtype;
        all.push_back(s);
    }
    count_params(*m, all);
    auto find = [&st](const std::string& n) -> std::optional<SourceTensor> {
        const SafetensorsTensor* t = st.find(n);
        if (!t) return std::nullopt;
        return SourceTensor::from(*t);
    };
    if (opts.load_tokenizer && std::filesystem::exists(dir + "/tokenizer.json"))
        m->tokenizer = tokenizer::Tokenizer::from_hf_dir(dir);
    const std::string tc = dir + "/tokenizer_config.json";
    if (std::filesystem::exists(tc)) {
        const auto j = read_json_file(tc);
        if (j.is_object() && j.contains("chat_template") && j["chat_template"].is_string())
            m->chat_template = j["chat_template"].get<std::string>();
    }
    Loader loader(*m, opts, pool, find, hf_name);
    if (opts.load_weights) loader.load_all();
    return m;
}

}  // namespace

std::unique_ptr<Model> load_model(const std::string& path, const LoadOptions& options, util::ThreadPool& pool) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) {
        if (!std::filesystem::exists(path + "/config.json"))
            throw Error("'" + path + "' is a directory without config.json (not a Hugging Face model directory)");
        return load_hf_dir(path, options, pool);
    }
    if (!std::filesystem::exists(path, ec)) throw Error("model '" + path + "' does not exist");
    return load_gguf(path, options, pool);
}

}  // namespace warden::model
