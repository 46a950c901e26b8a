// `warden quantize -m IN -o OUT --weights FORMAT`: writes a compressed checkpoint.
//   OUT ending in .gguf: GGUF with Q4_0 / Q4_1 / Q8_0 linear layers (input must be GGUF), or
//   with --weights q4_k_s|q4_k_m|q5_k_s|q5_k_m|q6_k llama.cpp's K-quant mix of that name.
//   OUT ending in .safetensors, or a directory (existing, or a path without extension):
//   compressed-tensors pack-quantized safetensors (int4-g32 / int4-g128 / int8 / int8-g32,
//   symmetric; input must be a Hugging Face directory; a directory gets shards of --max-shard-size
//   with an index when the weights are larger; convert/quantize_ct.h).
#include <cstdio>
#include <filesystem>
#include <optional>

#include "cli/commands.h"
#include "convert/quantize_ct.h"
#include "convert/quantize_model.h"
#include "launch/common.h"
#include "launch/engine_options.h"
#include "quant/imatrix.h"
#include "util/error.h"

namespace warden::cli {

namespace {

struct QuantizeOptions {
    launch::CommonOptions common;
    std::string out;
    std::string head_weights;    // --head-weights FORMAT|keep (GGUF output)
    std::string max_shard_size;  // --max-shard-size (compressed-tensors directory output)
    std::string imatrix;         // --imatrix FILE (GGUF or legacy .dat; either output)
};

bool ends_with(const std::string& s, const std::string& suf) {
    return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}

// --weights q4_k_m and the other K-quant file types: GGUF in and out, every block type chosen per
// tensor (convert/gguf_type_mix.h).
int quantize_mix(const QuantizeOptions& o, const convert::GgufTypeMix& mix) {
    if (!ends_with(o.out, ".gguf") || !ends_with(o.common.model_path, ".gguf"))
        throw util::Error("quantize: --weights " + o.common.weights +
                          " (a llama.cpp K-quant file type) needs a .gguf input and output");
    if (!o.head_weights.empty() || o.common.quantize_embeddings)
        throw util::Error("quantize: --weights " + o.common.weights +
                          " chooses the head's block type itself (as llama-quantize does); "
                          "--head-weights / --quantize-embeddings are for int4/int8 formats");
    if (!o.max_shard_size.empty())
        throw util::Error("quantize: --max-shard-size is for compressed-tensors output");
    std::optional<quant::Imatrix> imatrix;
    if (!o.imatrix.empty()) imatrix = quant::read_imatrix(o.imatrix);
    util::ThreadPool pool(o.common.threads);
    const auto st = convert::quantize_gguf_mix(o.common.model_path, o.out, mix, pool,
                                               imatrix ? &*imatrix : nullptr);
    std::printf(
        "wrote %s: %lld tensors quantized as %s (%s), %lld copied; tensor data %.1f MiB "
        "-> %.1f MiB\n",
        o.out.c_str(), static_cast<long long>(st.tensors_quantized), mix.name.c_str(),
        st.types.c_str(), static_cast<long long>(st.tensors_copied),
        static_cast<double>(st.bytes_in) / 1048576.0,
        static_cast<double>(st.bytes_out) / 1048576.0);
    if (imatrix)
        std::printf("imatrix %s: %lld of %lld quantized tensors weighted by it\n",
                    o.imatrix.c_str(), static_cast<long long>(st.imatrix_weighted),
                    static_cast<long long>(st.tensors_quantized));
    return 0;
}

int quantize(const QuantizeOptions& o) {
    if (o.common.weights.empty()) throw util::Error("quantize: --weights FORMAT is required");
    if (const auto mix = convert::parse_gguf_type_mix(o.common.weights))
        return quantize_mix(o, *mix);
    const tensor::WeightFormat f = tensor::parse_weight_format(o.common.weights);
    util::ThreadPool pool(o.common.threads);
    std::error_code ec;
    // .safetensors, an existing directory, or a path without extension (a directory to create).
    const bool ct_out =
        ends_with(o.out, ".safetensors") || std::filesystem::is_directory(o.out, ec) ||
        (!o.out.empty() && o.out.back() == '/') || std::filesystem::path(o.out).extension().empty();
    if (!ct_out && !ends_with(o.out, ".gguf"))
        throw util::Error(
            "quantize: output '" + o.out +
            "' must end in .gguf (GGUF) or .safetensors, or be a directory (compressed-tensors)");
    if (!ct_out && !ends_with(o.common.model_path, ".gguf"))
        throw util::Error("quantize: GGUF output needs a GGUF input, got '" + o.common.model_path +
                          "'");
    if (!o.head_weights.empty() && o.common.quantize_embeddings)
        throw util::Error(
            "quantize: --head-weights and --quantize-embeddings both set the head's format; use "
            "one");
    if (!o.head_weights.empty() && ct_out)
        throw util::Error(
            "quantize: --head-weights is for GGUF output (compressed-tensors keeps the head "
            "unquantized; "
            "--quantize-embeddings quantizes it with the layers)");
    if (!o.max_shard_size.empty() && !ct_out)
        throw util::Error(
            "quantize: --max-shard-size is for compressed-tensors output into a directory (GGUF is "
            "one file)");
    std::optional<quant::Imatrix> imatrix;
    if (!o.imatrix.empty()) imatrix = quant::read_imatrix(o.imatrix);
    std::optional<int64_t> max_shard;
    if (!o.max_shard_size.empty())
        max_shard = launch::parse_bytes(o.max_shard_size, "--max-shard-size");
    convert::HeadOptions
        head;  // GGUF: a float head becomes the default beside the layers (int8 beside int4)
    if (o.common.quantize_embeddings)
        head = convert::HeadOptions::as(f);
    else if (o.head_weights == "keep")
        head = convert::HeadOptions::keep();
    else if (!o.head_weights.empty())
        head = convert::HeadOptions::as(tensor::parse_weight_format(o.head_weights));
    const auto st = ct_out ? convert::quantize_hf_compressed_tensors(
                                 o.common.model_path, o.out, f, o.common.quantize_embeddings, pool,
                                 max_shard, imatrix ? &*imatrix : nullptr)
                           : convert::quantize_gguf(o.common.model_path, o.out, f, head, pool,
                                                    imatrix ? &*imatrix : nullptr);
    std::printf(
        "wrote %s: %lld tensors quantized (%s%s%s), %lld copied; tensor data %.1f MiB -> %.1f "
        "MiB\n",
        o.out.c_str(), static_cast<long long>(st.tensors_quantized),
        tensor::weight_format_name(f).c_str(), st.heads.empty() ? "" : "; ", st.heads.c_str(),
        static_cast<long long>(st.tensors_copied), static_cast<double>(st.bytes_in) / 1048576.0,
        static_cast<double>(st.bytes_out) / 1048576.0);
    if (imatrix)
        std::printf(
            "imatrix %s: %lld of %lld quantized tensors weighted by it (%zu entries, %d "
            "chunks%s%s)\n",
            o.imatrix.c_str(), static_cast<long long>(st.imatrix_weighted),
            static_cast<long long>(st.tensors_quantized), imatrix->entries.size(), imatrix->chunks,
            imatrix->dataset.empty() ? "" : " of ", imatrix->dataset.c_str());
    return 0;
}

}  // namespace

void register_quantize(CLI::App& app, int& rc) {
    auto o = std::make_shared<QuantizeOptions>();
    auto* sub = app.add_subcommand("quantize",
                                   "write a quantized copy of a model (GGUF Q4_0/Q4_1/Q8_0 or "
                                   "llama.cpp K-quant mixes, or compressed-tensors safetensors)");
    launch::add_model_option(*sub, o->common);
    launch::add_threads_option(*sub, o->common);
    sub->add_option("-o,--output", o->out,
                    "output file (.gguf), .safetensors file or directory (compressed-tensors "
                    "pack-quantized)")
        ->required();
    sub->add_option("--weights", o->common.weights,
                    "int4|int4-g32|int4-g128[-asym]|int8|int8-g32, or a llama.cpp K-quant "
                    "file type for GGUF output: q4_k_s|q4_k_m|q5_k_s|q5_k_m|q6_k")
        ->required();
    sub->add_flag("--quantize-embeddings", o->common.quantize_embeddings,
                  "quantize token_embd/output in the --weights format too");
    sub->add_option(
        "--head-weights", o->head_weights,
        "GGUF output: format of token_embd/output (int4*/int8*), or keep to copy them unchanged "
        "(default: a float one as int8 beside int4 layers, as loading with --weights runs it, "
        "except a bf16 token_embd that is not the head; else copied)");
    sub->add_option(
        "--imatrix", o->imatrix,
        "llama.cpp importance matrix (llama-imatrix's output: GGUF, or the legacy imatrix.dat) "
        "weighting each quantized tensor's "
        "scale search by its input columns' mean squared activation (entries by GGUF tensor name; "
        "a Hugging Face source's tensors are matched by theirs)");
    sub->add_option(
        "--max-shard-size", o->max_shard_size,
        "compressed-tensors output into a directory: largest safetensors shard, e.g. 500M or 2G "
        "(default 5G); larger models are written as model-0000i-of-0000N.safetensors with an "
        "index");
    sub->callback([o, &rc] { rc = quantize(*o); });
}

}  // namespace warden::cli
