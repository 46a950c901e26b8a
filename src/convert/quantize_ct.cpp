#include "convert/quantize_ct.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "formats/compressed_tensors.h"
#include "formats/fp8_block.h"
#include "formats/gguf_names.h"
#include "formats/safetensors_file.h"
#include "formats/safetensors_writer.h"
#include "formats/tensor_source.h"
#include "model/gguf_native_weights.h"
#include "quant/quantizer.h"
#include "util/error.h"
#include "util/json_file.h"

namespace warden::convert {

namespace fs = std::filesystem;
using util::Error;

namespace {

void write_text(const std::string& path, const std::string& text) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    if (!f) throw Error("cannot create '" + path + "'");
    f << text;
    if (!f) throw Error("write to '" + path + "' failed");
}

// A linear layer quantized by default: one the loader quantizes with --weights, by the rule for
// GGUF names (model::is_layer_matrix_name on its GGUF name): attention, dense MLP, routed and
// shared experts, MLA's q / q_a / q_b / kv_a / o of the layers the model runs. Routers and MLA's
// kv_b (split per head at load and kept in the runtime dtype) stay dense, and so does anything
// with no GGUF name or past num_hidden_layers (MTP blocks), so loading the output matches
// quantizing the source at load.
bool is_layer_linear(const std::string& n, int64_t n_layers) {
    const std::string g = formats::gguf_tensor_name(n);
    return !g.empty() && model::is_layer_matrix_name(g, n_layers);
}

std::vector<uint8_t> f32_bytes(const formats::SourceTensor& t) {
    const int64_t rows = t.n_rows(), cols = t.row_len();
    std::vector<uint8_t> out(static_cast<size_t>(rows * cols * 4));
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
        t.row_to_f32(r, row.data());
        std::memcpy(out.data() + r * cols * 4, row.data(), static_cast<size_t>(cols) * 4);
    }
    return out;
}

}  // namespace

QuantizeStats quantize_hf_compressed_tensors(const std::string& in_dir, const std::string& out,
                                             const tensor::WeightFormat& f, bool embeddings,
                                             util::ThreadPool& pool,
                                             std::optional<int64_t> max_shard_bytes,
                                             const quant::Imatrix* imatrix) {
    std::error_code ec;
    if (!fs::is_directory(in_dir, ec) || !fs::exists(in_dir + "/config.json"))
        throw Error(
            "quantize: compressed-tensors output needs a Hugging Face model directory (config.json "
            "+ "
            "safetensors) as input, got '" +
            in_dir + "'");
    if (f.type == tensor::WeightType::Q4 && f.asym)
        throw Error(
            "quantize: compressed-tensors output supports symmetric int4 only: warden's '" +
            tensor::weight_format_name(f) +
            "' stores a free offset per group, which has no exact pack-quantized zero point");
    if (f.type != tensor::WeightType::Q4 && f.type != tensor::WeightType::Q8)
        throw Error(
            "quantize: compressed-tensors pack-quantized output needs an int4 or int8 format, got "
            "'" +
            tensor::weight_format_name(f) + "'");
    const int num_bits = f.type == tensor::WeightType::Q4 ? 4 : 8;
    const std::string scale_dtype = f.bf16_scales ? "BF16" : "F16";

    // Output paths.
    std::string out_file, out_dir;
    const bool single_file_out = out.ends_with(".safetensors");
    if (single_file_out && max_shard_bytes)
        throw Error(
            "quantize: --max-shard-size needs a directory output (shards and their index go into "
            "it), got "
            "the file '" +
            out + "'");
    if (max_shard_bytes && *max_shard_bytes <= 0)
        throw Error("quantize: the shard size must be positive, got " +
                    std::to_string(*max_shard_bytes));
    // A named file holds everything; a directory gets shards of at most this many bytes.
    const int64_t shard_limit = single_file_out ? std::numeric_limits<int64_t>::max()
                                                : max_shard_bytes.value_or(kDefaultMaxShardBytes);
    if (single_file_out) {
        out_file = out;
        out_dir = fs::path(out).parent_path().string();
        if (out_dir.empty()) out_dir = ".";
        fs::create_directories(out_dir, ec);
        if (ec) throw Error("quantize: cannot create directory '" + out_dir + "': " + ec.message());
    } else {
        out_dir = out;
        fs::create_directories(out_dir, ec);
        if (ec) throw Error("quantize: cannot create directory '" + out_dir + "': " + ec.message());
        out_file = out_dir + "/model.safetensors";
    }
    if (fs::exists(out_dir + "/config.json") && fs::equivalent(out_dir, in_dir, ec))
        throw Error("quantize: output '" + out +
                    "' is inside the source directory (its config.json would be "
                    "overwritten); write to another directory");

    // Source, with the loader's resolvers (pack-quantized and FP8 sources are re-quantized).
    auto config = util::read_ordered_json_file(in_dir + "/config.json");
    const nlohmann::json cfg_plain = nlohmann::json::parse(config.dump());
    // The layers the model runs: matrices of blocks past them (MTP) are not packed
    // (is_layer_linear).
    const auto layers_it = cfg_plain.find("num_hidden_layers");
    if (layers_it == cfg_plain.end() || !layers_it->is_number_integer() ||
        layers_it->get<int64_t>() < 0)
        throw Error("'" + in_dir +
                    "/config.json': num_hidden_layers is missing or not a non-negative integer");
    const int64_t n_layers = layers_it->get<int64_t>();
    std::optional<formats::CtConfig> ct;
    std::optional<formats::Fp8BlockConfig> fp8;
    if (formats::is_compressed_tensors_config(cfg_plain)) {
        ct = formats::ct_config_from_hf_json(cfg_plain, in_dir + "/config.json");
    } else {
        fp8 = formats::fp8_block_config_from_hf_json(cfg_plain, in_dir + "/config.json");
    }
    const formats::SafetensorsModel st = formats::SafetensorsModel::open_dir(in_dir);
    formats::Fp8BlockResolver fp8_res(st, fp8);
    auto find = [&](const std::string& n) -> std::optional<formats::SourceTensor> {
        if (ct)
            if (auto t = formats::ct_find(st, *ct, n)) return t;
        return fp8_res.find(n);
    };
    // Logical tensor names: auxiliary tensors of packed / FP8 weights fold into their weight.
    std::vector<std::string> names;
    std::set<std::string> seen;
    for (const auto& t : st.tensors()) {
        std::string n = t.name;
        if (ct) {
            const auto logical = formats::ct_logical_name(st, n);
            if (!logical) continue;
            n = *logical;
        }
        if (n.ends_with("_scale_inv")) {  // (a packed weight's logical name ends in ".weight")
            const auto* w = st.find(n.substr(0, n.size() - 10));
            if (w && w->dtype == "F8_E4M3") continue;
        }
        if (seen.insert(n).second) names.push_back(n);
    }

    // Plan: what each logical tensor becomes and its bytes in the output, so every shape error is
    // raised before anything is written and the shards can be cut before any is filled.
    struct Planned {
        std::string name;  // logical (source) name
        // Unset for an FP8 block-scaled weight: the resolver dequantizes it to f32 when found, so
        // that happens in emit, one tensor at a time, not for the whole model here.
        std::optional<formats::SourceTensor> src;
        std::vector<int64_t> dims;
        bool quantize = false;
        const formats::SafetensorsTensor* raw =
            nullptr;                    // copied as stored (else dequantized to f32)
        int64_t words = 0, groups = 0;  // quantized: int32 words and scales per row
        int64_t bytes = 0;              // in the output (packed + scales + shape when quantized)
        const float* importance = nullptr;  // the imatrix entry of its GGUF name, if any
    };
    std::vector<Planned> plan;
    QuantizeStats stats;
    for (const auto& t : st.tensors()) stats.bytes_in += static_cast<int64_t>(t.n_bytes);
    std::vector<std::string> ignore;
    bool embed_quantized = false;
    for (const auto& n : names) {
        Planned p;
        p.name = n;
        const auto* raw = st.find(n);
        if (fp8 && raw && raw->dtype == "F8_E4M3" && raw->shape.size() == 2) {
            p.dims = raw->shape;
        } else {
            p.src = find(n);
            if (!p.src)
                throw Error("'" + in_dir + "': tensor '" + n + "' vanished");  // not reached
            p.dims = p.src->dims;
            if (raw && !p.src->ct && !p.src->fp8 && raw->dtype == p.src->st_dtype) p.raw = raw;
        }
        const bool emb = n == "lm_head.weight" || n == "model.embed_tokens.weight";
        p.quantize = p.dims.size() == 2 && (is_layer_linear(n, n_layers) || (embeddings && emb));
        if (p.quantize) {
            const int64_t rows = p.dims[0], cols = p.dims[1];
            try {
                kernels::check_quant_shape(kernels::weight_layout(f, rows, cols));
            } catch (const Error& e) {
                throw Error("'" + in_dir + "': tensor '" + n + "' as " +
                            tensor::weight_format_name(f) + ": " + e.what());
            }
            p.words = (cols * num_bits + 31) / 32;
            p.groups =
                f.group != 0 ? cols / f.group : 1;  // int4 groups, int8-g32 blocks, or per row
            p.bytes = rows * p.words * 4 + rows * p.groups * 2 + 16;
            if (imatrix)
                if (const std::string gname = formats::gguf_tensor_name(n); !gname.empty())
                    if ((p.importance = imatrix->find(gname, cols))) ++stats.imatrix_weighted;
            if (n == "model.embed_tokens.weight") embed_quantized = true;
        } else {
            if (p.dims.size() == 2 && n.ends_with(".weight") && n != "model.embed_tokens.weight")
                ignore.push_back(n.substr(0, n.size() - 7));
            int64_t elems = 1;
            for (int64_t d : p.dims) elems *= d;
            p.bytes = p.raw ? static_cast<int64_t>(p.raw->n_bytes) : elems * 4;
        }
        plan.push_back(std::move(p));
    }

    // Shards: consecutive tensors up to max_shard_bytes each (one larger tensor alone), as
    // transformers' save_pretrained cuts them; a quantized weight's three tensors stay together.
    std::vector<std::vector<size_t>> shards;
    int64_t filled = 0;
    for (size_t i = 0; i < plan.size(); ++i) {
        if (shards.empty() || (filled > 0 && filled + plan[i].bytes > shard_limit)) {
            shards.emplace_back();
            filled = 0;
        }
        shards.back().push_back(i);
        filled += plan[i].bytes;
    }
    if (shards.empty()) shards.emplace_back();  // no tensors: one empty file, as before

    // Writes plan[i] into w; returns the names of the tensors it added. An FP8 weight is
    // dequantized here (released by the caller once written).
    const auto emit = [&](const Planned& p,
                          formats::SafetensorsWriter& w) -> std::vector<std::string> {
        const formats::SourceTensor t = p.src ? *p.src : *fp8_res.find(p.name);
        const std::string& n = p.name;
        if (!p.quantize) {
            if (p.raw) {
                w.add_tensor(n, p.raw->dtype, p.raw->shape,
                             std::vector<uint8_t>(p.raw->data, p.raw->data + p.raw->n_bytes));
            } else {  // dequantized source (FP8 / packed): f32
                w.add_tensor(n, "F32", t.dims, f32_bytes(t));
            }
            ++stats.tensors_copied;
            return {n};
        }
        const int64_t rows = t.dims[0], cols = t.dims[1];
        const kernels::WeightMatrix layout = kernels::weight_layout(f, rows, cols);
        const int64_t words = p.words, ng = p.groups;
        std::vector<uint8_t> packed(static_cast<size_t>(rows * words * 4));
        std::vector<uint8_t> scales(static_cast<size_t>(rows * ng * 2));
        try {
            pool.parallel_for(rows, 16, [&](int64_t r0, int64_t r1) {
                std::vector<float> row(static_cast<size_t>(cols));
                std::vector<uint8_t> codes(static_cast<size_t>(cols));
                for (int64_t r = r0; r < r1; ++r) {
                    std::optional<kernels::QuantRow> qr;
                    if (t.ct) qr = formats::ct_import_row(*t.ct, r, layout);
                    if (!qr) {
                        t.row_to_f32(r, row.data());
                        qr = quant::default_quantizer().quantize_row(layout, row.data(),
                                                                     p.importance);
                    }
                    for (int64_t c = 0; c < cols; ++c) {
                        const uint8_t q = qr->q[static_cast<size_t>(c)];
                        // int4: warden's code is already q + 8; int8: int8 bits -> q + 128.
                        codes[static_cast<size_t>(c)] =
                            num_bits == 4 ? q : static_cast<uint8_t>(q ^ 0x80u);
                    }
                    const auto wv = formats::ct_pack_codes(codes.data(), cols, num_bits);
                    std::memcpy(packed.data() + r * words * 4, wv.data(),
                                static_cast<size_t>(words) * 4);
                    std::memcpy(scales.data() + r * ng * 2, qr->d.data(),
                                static_cast<size_t>(ng) * 2);
                }
            });
        } catch (const Error& e) {
            throw Error("'" + in_dir + "': tensor '" + n + "' as " + tensor::weight_format_name(f) +
                        ": " + e.what());
        }
        const std::string m = n.substr(0, n.size() - 7);
        w.add_tensor(m + ".weight_packed", "I32", {rows, words}, std::move(packed));
        w.add_tensor(m + ".weight_scale", scale_dtype, {rows, ng}, std::move(scales));
        std::vector<uint8_t> shape(16);
        std::memcpy(shape.data(), &rows, 8);
        std::memcpy(shape.data() + 8, &cols, 8);
        w.add_tensor(m + ".weight_shape", "I64", {2}, std::move(shape));
        ++stats.tensors_quantized;
        return {m + ".weight_packed", m + ".weight_scale", m + ".weight_shape"};
    };

    // One shard at a time, so memory holds one shard's data rather than the whole model's. Each
    // goes to "<name>.partial" first, and only when every shard is written are they renamed into
    // place: a failure part way (a corrupt source tensor) removes the partial files and leaves an
    // earlier run's output in the directory as it was.
    std::set<std::string> written;  // file names in out_dir
    std::vector<std::string> finals;
    nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
    try {
        for (size_t s = 0; s < shards.size(); ++s) {
            char shard_name[64];
            std::snprintf(shard_name, sizeof shard_name, "model-%05zu-of-%05zu.safetensors", s + 1,
                          shards.size());
            finals.push_back(shards.size() == 1 ? out_file : out_dir + "/" + shard_name);
            formats::SafetensorsWriter w;
            for (size_t i : shards[s]) {
                for (const auto& tn : emit(plan[i], w)) weight_map[tn] = shard_name;
                fp8_res.release();  // w holds its own bytes now
            }
            stats.bytes_out += w.data_bytes();
            w.set_metadata("format", "pt");
            w.write(finals.back() + ".partial");
        }
    } catch (...) {
        for (const auto& fpath : finals) fs::remove(fpath + ".partial", ec);
        throw;
    }
    for (const auto& fpath : finals) {
        fs::rename(fpath + ".partial", fpath, ec);
        if (ec)
            throw Error("quantize: cannot rename '" + fpath + ".partial' to '" + fpath +
                        "': " + ec.message());
        written.insert(fs::path(fpath).filename().string());
    }
    if (shards.size() > 1) {
        const nlohmann::ordered_json index = {{"metadata", {{"total_size", stats.bytes_out}}},
                                              {"weight_map", weight_map}};
        write_text(out_dir + "/model.safetensors.index.json", index.dump(2) + "\n");
        written.insert("model.safetensors.index.json");
    }
    // Weights of an earlier run into this directory that this one did not write (a single file
    // after shards, shards after a single file, shards of another count): the loader would read a
    // stale model.safetensors before the index, so they go, as save_pretrained removes them. Only
    // the names this writer gives its files; nothing else in the directory is touched.
    if (!single_file_out)
        for (const auto& e : fs::directory_iterator(out_dir, ec)) {
            const std::string fn = e.path().filename().string();
            const bool ours = fn == "model.safetensors" || fn == "model.safetensors.index.json" ||
                              (fn.starts_with("model-") && fn.ends_with(".safetensors") &&
                               fn.find("-of-") != std::string::npos);
            if (ours && !written.contains(fn)) fs::remove(e.path(), ec);
        }

    // config.json: the source's, with the compressed-tensors quantization_config.
    nlohmann::ordered_json wargs = {{"num_bits", num_bits},
                                    {"type", "int"},
                                    {"symmetric", true},
                                    {"strategy", f.group != 0 ? "group" : "channel"},
                                    {"group_size", f.group != 0 ? nlohmann::ordered_json(f.group)
                                                                : nlohmann::ordered_json(nullptr)},
                                    {"dynamic", false},
                                    {"actorder", nullptr},
                                    {"block_structure", nullptr},
                                    {"observer", "minmax"},
                                    {"observer_kwargs", nlohmann::ordered_json::object()}};
    nlohmann::ordered_json targets = {"Linear"};
    if (embed_quantized) targets.push_back("Embedding");
    nlohmann::ordered_json q = {{"quant_method", "compressed-tensors"},
                                {"format", "pack-quantized"},
                                {"quantization_status", "compressed"},
                                {"config_groups",
                                 {{"group_0",
                                   {{"targets", targets},
                                    {"weights", wargs},
                                    {"input_activations", nullptr},
                                    {"output_activations", nullptr},
                                    {"format", "pack-quantized"}}}}},
                                {"ignore", ignore},
                                {"kv_cache_scheme", nullptr},
                                {"global_compression_ratio", nullptr}};
    config["quantization_config"] = q;
    const bool write_config = !fs::equivalent(out_dir, in_dir, ec);
    if (write_config) {
        write_text(out_dir + "/config.json", config.dump(2) + "\n");
        for (const char* aux :
             {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
              "generation_config.json", "chat_template.jinja", "vocab.json", "merges.txt",
              "tokenizer.model"}) {
            const std::string s = in_dir + "/" + aux;
            if (fs::exists(s)) {
                fs::copy_file(s, out_dir + "/" + aux, fs::copy_options::overwrite_existing, ec);
                if (ec) throw Error("quantize: cannot copy '" + s + "': " + ec.message());
            }
        }
    }
    return stats;
}

}  // namespace warden::convert
