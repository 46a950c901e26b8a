#include "model/gguf_native_weights.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/matmul_kquant.h"
#include "kernels/matmul_quant.h"
#include "quant/quantizer.h"
#include "tensor/ggml_types.h"
#include "tensor/weight_format.h"
#include "util/error.h"

namespace warden::model {

bool is_layer_matrix_name(const std::string& name, int64_t n_layers) {
    if (!name.starts_with("blk.")) return false;
    const size_t dot = name.find('.', 4);
    if (dot == std::string::npos) return false;
    const std::string idx = name.substr(4, dot - 4);
    if (idx.empty() || idx.size() > 9 || idx.find_first_not_of("0123456789") != std::string::npos)
        return false;
    if (std::stoll(idx) >= n_layers) return false;
    for (const char* never : {"ffn_gate_inp", "attn_kv_b", "attn_k_b", "attn_v_b"})
        if (name.find(never) != std::string::npos) return false;
    return true;
}

bool gguf_bf16_lookup_table(const formats::GGUFFile& g, const ModelConfig& c) {
    const formats::GGUFTensor* t = g.find_tensor("token_embd.weight");
    return t != nullptr && t->type == tensor::GgmlType::BF16 && !c.tied_embeddings &&
           g.find_tensor("output.weight") != nullptr;
}

bool is_layer_matrix(const formats::GGUFTensor& t, int64_t n_layers) {
    return t.shape.size() >= 2 && is_layer_matrix_name(t.name, n_layers);
}

namespace {

// Whether the first row of a [rows, cols] GGUF matrix that is not all zero bytes imports into
// `format` exactly (import_ggml_row checks the same for every row at load). An all-zero row, such
// as a padding token's embedding, fits every format and decides nothing; a file quantized per
// block, or with another group, shows it in its first real row. The parser checked that the data
// holds every row (formats/gguf_file.cpp).
bool first_row_imports(tensor::GgmlType type, const uint8_t* data, int64_t rows, int64_t cols,
                       const std::string& format) {
    if (data == nullptr) return false;
    const kernels::WeightMatrix layout =
        kernels::weight_layout(tensor::parse_weight_format(format), 1, cols);
    try {
        kernels::check_quant_shape(layout);  // a group that does not divide the row
        const int64_t row_bytes = tensor::ggml_row_bytes(type, cols);
        for (int64_t r = 0; r < rows; ++r) {
            const uint8_t* row = data + r * row_bytes;
            if (std::all_of(row, row + row_bytes, [](uint8_t v) { return v == 0; })) continue;
            return quant::import_ggml_row(type, row, layout).has_value();
        }
    } catch (const util::Error&) {
        return false;  // the load reports it (a corrupt scale, a bad shape)
    }
    return true;  // every row zero: any format holds it exactly
}

// The format `warden quantize` declared (kGgufDeclaredWeightsKey), when it is a quantized format
// whose GGUF block type is `layer_type`. Otherwise unset, and a key that is present but does not
// fit is named in `note` (appended) rather than failing the load: it is a hint; the blocks are
// the data.
std::optional<std::string> declared_format(const formats::GGUFFile& g, tensor::GgmlType layer_type,
                                           std::string& note) {
    const formats::GGUFValue* v = g.find(kGgufDeclaredWeightsKey);
    if (v == nullptr) return std::nullopt;
    std::string why;
    if (v->type != formats::GGUFValueType::STRING) {
        why = "not a string";
    } else {
        try {
            const tensor::WeightFormat f = tensor::parse_weight_format(v->s);
            if (!f.quantized() || f.type == tensor::WeightType::FP8 || f.bf16_scales || f.act_f32) {
                why = "'" + v->s + "' has no GGUF block type";
            } else if (quant::ggml_type_for(
                           kernels::weight_layout(f, 32, f.group ? f.group : 32)) != layer_type) {
                why = "'" + v->s + "' does not match the layer blocks";
            } else {
                return tensor::weight_format_name(f);
            }
        } catch (const util::Error& e) {
            why = e.what();
        }
    }
    note += std::string("; ") + kGgufDeclaredWeightsKey + " ignored: " + why;
    return std::nullopt;
}

bool first_row_imports(const formats::GGUFTensor& t, const std::string& format) {
    return t.shape.size() == 2 && first_row_imports(t.type, t.data, t.shape[1], t.shape[0], format);
}

}  // namespace

std::optional<std::string> gguf_mixed_native_format(tensor::GgmlType type) {
    switch (type) {
        case tensor::GgmlType::Q4_0:
            return "int4-g32";
        case tensor::GgmlType::Q4_1:
            return "int4-g32-asym";
        case tensor::GgmlType::Q8_0:
            return "int8-g32";
        default:
            break;
    }
    // The GGUF block types that run as stored (kernels/matmul_kquant.h): their format's name.
    if (auto k = tensor::kquant_from_ggml(type))
        return tensor::weight_format_name(tensor::WeightFormat{*k});
    return std::nullopt;
}

namespace {

// The runtime format a GGUF matrix of `rows` x `cols` (row-major blocks at `data`; only Q8_0
// reads them) imports into without loss, if any.
std::optional<std::string> ggml_native_format(tensor::GgmlType type, const uint8_t* data,
                                              int64_t rows, int64_t cols) {
    if (type == tensor::GgmlType::Q4_0) return "int4-g32";
    if (type == tensor::GgmlType::Q4_1) return "int4-g32-asym";
    if (type == tensor::GgmlType::Q8_0)
        return first_row_imports(type, data, rows, cols, "int8") ? "int8" : "int8-g32";
    // GGUF block types run as stored (kernels/matmul_kquant.h); the parser checked that every row
    // is whole blocks.
    return gguf_mixed_native_format(type);
}

// The runtime format one tensor's first row imports into bit-exactly, if any.
std::optional<std::string> gguf_tensor_native_format(const formats::GGUFTensor& t) {
    // Stacked (3-D) experts: only Q8_0 reads rows, and a stack is taken as per block.
    if (t.shape.size() != 2) return ggml_native_format(t.type, nullptr, 0, 0);
    return ggml_native_format(t.type, t.data, t.shape[1], t.shape[0]);
}

// The layer matrices of a file: how many of each GGUF type, and whether all are float.
struct LayerScan {
    std::map<std::string, int> types;  // type name -> layer matrices of it
    bool all_float = true;
    std::vector<const formats::GGUFTensor*> layer;
};

LayerScan scan_layers(const formats::GGUFFile& g, const ModelConfig& c) {
    LayerScan s;
    for (const auto& t : g.tensors()) {
        if (!is_layer_matrix(t, c.n_layers)) continue;
        s.types[tensor::ggml_type_name(t.type)] += 1;
        s.all_float = s.all_float && tensor::ggml_is_float(t.type);
        s.layer.push_back(&t);
    }
    return s;
}

// The embeddings' and head's lossless formats (the one rule for loads with and without
// --weights). `fallback` (only without --weights): the format a head without one gets, for the
// note; `note` gets "; token_embd Q8_0 as int8-g32 without loss" per head (per head that maps,
// with `only_exact`).
void decide_heads(const formats::GGUFFile& g, const ModelConfig& c, const LayerScan& s,
                  const std::optional<std::string>& declared,
                  const std::optional<tensor::WeightFormat>& fallback,
                  const std::string& dtype_name, bool only_exact, GgufNativeWeights& r) {
    auto head = [&](const char* name, std::optional<std::string>& out) {
        const formats::GGUFTensor* t = g.find_tensor(std::string(name) + ".weight");
        if (t == nullptr) return;
        // A Q4 head of the layers' block type in a declared file was usually written in the
        // declared format too (--quantize-embeddings), but `warden quantize --head-weights` may
        // have written it with another group (int4-g32 beside int4-g128 layers), so the
        // declaration holds for it only where its first row imports into it exactly; else its
        // blocks decide (int4-g32 holds any Q4_0). A Q8_0 head's blocks always decide between
        // int8 and int8-g32 (it may have been copied from either kind of source).
        out = declared && t->type == s.layer.front()->type && t->type != tensor::GgmlType::Q8_0 &&
                      first_row_imports(*t, *declared)
                  ? declared
                  : gguf_tensor_native_format(*t);
        if (!out && std::string_view(name) == "token_embd" && gguf_bf16_lookup_table(g, c))
            out = "bf16";
        const bool exact = out.has_value();
        if (!exact && only_exact) return;
        if (!out && fallback) out = tensor::weight_format_name(*fallback);
        r.note += std::string("; ") + name + " " + tensor::ggml_type_name(t->type) + " as " +
                  out.value_or(dtype_name) + (exact ? " without loss" : "");
    };
    head("token_embd", r.embed);
    if (!c.tied_embeddings) head("output", r.output);
}

// The declared format of a file whose layer matrices are all of one type, else unset.
std::optional<std::string> declared_layers(const formats::GGUFFile& g, const LayerScan& s,
                                           std::string& ignored) {
    if (s.types.empty() || s.all_float) return std::nullopt;
    return declared_format(g, s.types.size() == 1 ? s.layer.front()->type : tensor::GgmlType::F32,
                           ignored);
}

}  // namespace

GgufNativeWeights gguf_native_weights(const formats::GGUFFile& g, const ModelConfig& c,
                                      const std::string& dtype_name, bool head_chosen) {
    GgufNativeWeights r;
    const LayerScan s = scan_layers(g, c);
    if (s.types.empty() || s.all_float) return r;  // a float checkpoint: --dtype, nothing to report
    std::string ignored;  // a declared format that does not fit, for the note
    const auto declared = declared_layers(g, s, ignored);
    if (declared) {
        r.layers = declared;
    } else if (s.types.size() == 1) {  // one type: native when it has a lossless format
        r.layers = gguf_tensor_native_format(*s.layer.front());
        // Q8_0: per channel (int8) when every matrix is, else a scale per block (int8-g32), which
        // imports any Q8_0 block without loss.
        for (size_t i = 1; i < s.layer.size() && r.layers == "int8"; ++i)
            if (gguf_tensor_native_format(*s.layer[i]) != r.layers) r.layers = "int8-g32";
    }
    // Several block types (llama.cpp's mixes: Q4_K_M is Q4_K with some Q6_K): each matrix runs in
    // its own type's format when every type has one and every row is whole K-quant super-blocks.
    if (!declared && !r.layers && s.types.size() > 1) {
        bool all = true;
        std::set<std::string> kinds;
        for (const formats::GGUFTensor* t : s.layer) {
            const auto f = gguf_mixed_native_format(t->type);
            all = all && f;
            if (f) kinds.insert(*f);
        }
        if (all) {
            r.per_tensor = true;
            std::string list, names;
            for (const auto& [name, n] : s.types)
                list += (list.empty() ? "" : ", ") + name + " x" + std::to_string(n);
            for (const auto& f : kinds) names += (names.empty() ? "" : "+") + f;
            r.per_tensor_name = names;
            r.note = "auto: layer matrices " + list +
                     ", each imported without loss in its own type's format (" + names + ")" +
                     ignored;
            if (!head_chosen)
                decide_heads(g, c, s, std::nullopt, std::nullopt, dtype_name, false, r);
            r.note += "; --weights chooses";
            return r;
        }
    }
    if (!r.layers) {
        std::string list;
        for (const auto& [name, n] : s.types)
            list += (list.empty() ? "" : ", ") + name + " x" + std::to_string(n);
        r.note = "auto: layer matrices " + list + " have no lossless runtime format, so " +
                 dtype_name + " (--weights int4 or int8 quantizes them at load)" + ignored;
        return r;  // the embeddings and head stay at --dtype beside --dtype layers
    }
    r.note = "auto: layer matrices " + tensor::ggml_type_name(s.layer.front()->type) +
             (declared ? " written as " + *declared : std::string()) + ", imported without loss" +
             ignored;
    // The embeddings and head: their own format where it maps without loss, else the default
    // beside these layers, as `--weights` gives it (tensor::default_head_format: int8 beside
    // int4), else --dtype.
    if (!head_chosen)
        decide_heads(g, c, s, declared,
                     tensor::default_head_format(tensor::parse_weight_format(*r.layers)),
                     dtype_name, false, r);
    r.note += "; --weights chooses";
    return r;
}

GgufNativeWeights gguf_named_heads(const formats::GGUFFile& g, const ModelConfig& c) {
    GgufNativeWeights r;
    const LayerScan s = scan_layers(g, c);
    // A declaration that does not fit the layers is reported by a load without --weights.
    std::string ignored;
    decide_heads(g, c, s, declared_layers(g, s, ignored), std::nullopt, "", true, r);
    if (!r.note.empty()) r.note.erase(0, 2);  // no layer part to follow: drop the leading "; "
    return r;
}

}  // namespace warden::model
