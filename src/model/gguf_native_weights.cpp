#include "model/gguf_native_weights.h"

#include <cstring>
#include <map>
#include <vector>

namespace warden::model {

namespace {

// The per-layer matrices that --weights applies to: "blk.N.*" tensors of two or more
// dimensions (stacked experts have three), except MoE routers, which always load in f32.
bool is_layer_matrix(const GGUFTensor& t) {
    return t.name.starts_with("blk.") && t.shape.size() >= 2 &&
           t.name.find(".ffn_gate_inp.") == std::string::npos;
}

bool is_float(tensor::GgmlType t) {
    return t == tensor::GgmlType::F32 || t == tensor::GgmlType::F16 || t == tensor::GgmlType::BF16;
}

// Q8_0 is int8 per channel when every block of a row has the row's scale and no code is -128
// (outside int8's symmetric range); import_ggml_row checks the same per row. Checks the first
// `max_rows` rows (all when negative).
bool q8_0_is_per_channel(const GGUFTensor& t, int64_t max_rows) {
    if (t.shape.size() != 2 || t.shape[0] % 32 != 0) return false;
    const int64_t blocks = t.shape[0] / 32, rows = t.shape[1];
    if (t.data == nullptr || t.n_bytes < static_cast<uint64_t>(rows * blocks * 34)) return false;
    for (int64_t r = 0; r < rows && (max_rows < 0 || r < max_rows); ++r) {
        const uint8_t* row = t.data + r * blocks * 34;
        for (int64_t b = 0; b < blocks; ++b) {
            const uint8_t* blk = row + b * 34;
            if (std::memcmp(blk, row, 2) != 0) return false;
            if (std::memchr(blk + 2, 0x80, 32) != nullptr) return false;
        }
    }
    return true;
}

}  // namespace

std::optional<std::string> gguf_tensor_native_format(const GGUFTensor& t, bool read_all) {
    if (t.type == tensor::GgmlType::Q4_0) return "int4-g32";
    if (t.type == tensor::GgmlType::Q4_1) return "int4-g32-asym";
    if (t.type == tensor::GgmlType::Q8_0 && q8_0_is_per_channel(t, read_all ? -1 : 1))
        return "int8";
    return std::nullopt;
}

GgufNativeWeights gguf_native_weights(const GGUFFile& g, const std::string& dtype_name,
                                      bool read_all) {
    GgufNativeWeights r;
    std::map<std::string, int> types;  // type name -> layer matrices of it
    bool all_float = true;
    std::vector<const GGUFTensor*> layer;
    for (const auto& t : g.tensors()) {
        if (!is_layer_matrix(t)) continue;
        types[tensor::ggml_type_name(t.type)] += 1;
        all_float = all_float && is_float(t.type);
        layer.push_back(&t);
    }
    if (types.empty() || all_float) return r;  // a float checkpoint: --dtype, nothing to report
    if (types.size() == 1) {  // one type: native when every matrix imports (Q8_0: per channel)
        r.layers = gguf_tensor_native_format(*layer.front(), read_all);
        for (size_t i = 1; i < layer.size() && r.layers; ++i)
            if (gguf_tensor_native_format(*layer[i], read_all) != r.layers) r.layers.reset();
    }
    if (r.layers) {
        r.note = "auto: layer matrices " + tensor::ggml_type_name(layer.front()->type) +
                 ", imported without loss";
    } else {
        std::string list;
        for (const auto& [name, n] : types)
            list += (list.empty() ? "" : ", ") + name + " x" + std::to_string(n);
        r.note = "auto: layer matrices " + list + " have no lossless runtime format, so " +
                 dtype_name + " (--weights int4 or int8 quantizes them at load)";
        return r;  // the embeddings and head stay at --dtype beside --dtype layers
    }
    // The embeddings and head: their own format where it maps without loss; else, beside int4
    // layers, int8, as `--weights int4` gives them (cli/common.cpp: ~19% of a 1B model's bytes
    // per token in bf16, no measurable quality cost in int8); else --dtype.
    auto head = [&](const char* name, std::optional<std::string>& out) {
        const GGUFTensor* t = g.find_tensor(std::string(name) + ".weight");
        if (t == nullptr) return;
        out = gguf_tensor_native_format(*t, read_all);
        const bool exact = out.has_value();
        if (!out && r.layers->starts_with("int4")) out = "int8";
        r.note += std::string("; ") + name + " " + tensor::ggml_type_name(t->type) + " as " +
                  out.value_or(dtype_name) + (exact ? " without loss" : "");
    };
    head("token_embd", r.embed);
    head("output", r.output);
    r.note += "; --weights chooses";
    return r;
}

}  // namespace warden::model
