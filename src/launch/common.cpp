#include "launch/common.h"

#include <cstdio>
#include <fstream>
#include <future>
#include <sstream>

#include "tensor/weight_format.h"
#include "util/error.h"
#include "util/phase_timer.h"

namespace warden::launch {

std::string read_text_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    util::check(in.good(), "cannot open '" + path + "'");
    std::ostringstream ss;
    ss << in.rdbuf();
    util::check(!in.bad(), "cannot read '" + path + "'");
    return ss.str();
}

void add_model_option(CLI::App& app, CommonOptions& o) {
    app.add_option("-m,--model", o.model_path, "GGUF file or Hugging Face model directory")
        ->required();
}

void add_threads_option(CLI::App& app, CommonOptions& o) {
    app.add_option("-t,--threads", o.threads, "worker threads (default: all cores)")
        ->check(CLI::Range(0, 1024));
}

void add_dtype_option(CLI::App& app, CommonOptions& o) {
    app.add_option("--dtype", o.dtype, "runtime weight format")
        ->check(CLI::IsMember({"bf16", "f32"}));
    app.add_option(
        "--weights", o.weights,
        "linear-layer weight format: auto|bf16|f32|fp8|int8|int8-g32|int4|int4-g32|int4-g128 "
        "(int4 suffixes -asym, -bf16s, -a16; see docs/WEIGHT_QUANT.md). Default auto: "
        "Q4_0 / Q4_1 / Q8_0 GGUF layers and compressed-tensors checkpoints keep their "
        "own format (bit-exact), others load as --dtype");
    app.add_option("--prefill-weights", o.prefill_weights,
                   "keep a bf16|fp8 copy of quantized matrices for prefill rows");
    app.add_flag("--no-mmap", o.no_mmap,
                 "copy GGUF blocks that run as stored into 2 MiB-page memory instead of reading "
                 "them from the mapped file, and build the panels of Q4_0/Q4_1/Q8_0 blocks and of "
                 "compressed-tensors int4 and FP8 codes while loading "
                 "instead of in the background: slower start-up, a few percent faster decode");
    app.add_flag("--quantize-embeddings", o.quantize_embeddings,
                 "quantize token embeddings and the output head to the --weights format");
    app.add_option(
        "--head-weights", o.head_weights,
        "format of the token embeddings and output head, e.g. int8 or bf16 (default: beside "
        "quantized layers a GGUF Q4_0/Q4_1/Q8_0 head in its own format, else int8 beside int4 "
        "layers, else --dtype; a bf16 embedding table that is not also the head stays bf16, read "
        "in place; --quantize-embeddings: the --weights format)");
}

model::RuntimeDType parse_dtype(const std::string& s) {
    if (s == "bf16") return model::RuntimeDType::BF16;
    if (s == "f32") return model::RuntimeDType::F32;
    throw util::Error("unknown --dtype '" + s + "' (bf16 or f32)");
}

model::LoadOptions load_options(const CommonOptions& o) {
    model::LoadOptions lo;
    lo.dtype = parse_dtype(o.dtype);
    lo.map_weights = !o.no_mmap;
    const bool native = o.weights.empty() || o.weights == "auto";  // the loader picks (LoadOptions)
    if (!native) {
        lo.weights = tensor::parse_weight_format(o.weights);
        if (lo.weights->type == tensor::WeightType::F32) lo.dtype = model::RuntimeDType::F32;
    }
    if (!o.prefill_weights.empty()) {
        lo.prefill_weights = tensor::parse_weight_format(o.prefill_weights);
        const auto t = lo.prefill_weights->type;
        if (t != tensor::WeightType::BF16 && t != tensor::WeightType::FP8)
            throw util::Error("--prefill-weights must be bf16 or fp8, got '" + o.prefill_weights +
                              "'");
    }
    if (!o.head_weights.empty()) {
        if (o.quantize_embeddings)
            throw util::Error(
                "--head-weights and --quantize-embeddings both set the head's format; use one");
        lo.head_weights = tensor::parse_weight_format(o.head_weights);
    } else if (o.quantize_embeddings) {
        // The head takes the layers' format, which must be named: the native format is only
        // known once the file is read, and a head silently left at --dtype would ignore the flag.
        if (native)
            throw util::Error("--quantize-embeddings needs --weights FORMAT (the head's format)");
        lo.head_weights = lo.weights;
    }  // else the loader's default head beside lo.weights (int8 beside int4;
       // LoadOptions::head_weights)
    return lo;
}

LoadedModel load(const CommonOptions& o, bool weights, util::ThreadPool& pool) {
    model::LoadOptions lo = load_options(o);
    lo.load_weights = weights;
    util::PhaseTimer timer("load");
    // The tokenizer needs only the file's metadata: it is read on a thread of its own while the
    // weights load (a fifth of a small model's start-up). A model that fails to load reports
    // its own error; the tokenizer thread is then waited for and its result dropped.
    auto tok_loading = std::async(std::launch::async, [&o] {
        return tokenizer::Tokenizer::from_checkpoint(o.model_path, nullptr);
    });
    auto m = model::load_model(o.model_path, lo, pool);
    timer.mark("model");
    auto tok = tok_loading.get();
    timer.mark("tokenizer (waited for)");
    const bool quantized = m->weights_format != model::runtime_dtype_name(lo.dtype);
    // One line: formats, memory. Printed whenever a format was named (bench/weights_speed.sh reads
    // the memory of `--weights bf16` from it too) or the loader chose one.
    if (weights && (lo.weights || quantized || lo.prefill_weights || !m->weights_note.empty() ||
                    m->weight_memory.amx_tile_matrices > 0)) {
        const auto& wm = m->weight_memory;
        auto mib = [](int64_t b) { return std::to_string(b / (1024 * 1024)) + " MiB"; };
        const std::string why = m->weights_note.empty() ? "" : " (" + m->weights_note + ")";
        const std::string tiles =
            (wm.amx_tile_matrices > 0 ? ", " + std::to_string(wm.amx_tile_matrices) +
                                            " bf16 matrices in the AMX-BF16 tile layout (padding " +
                                            mib(wm.amx_tiles) + ")"
                                      : "") +
            (wm.in_place > 0 ? ", read in place from the file " + mib(wm.in_place) : "") +
            (wm.deferred_copies > 0 ? " (" + mib(wm.deferred_copies) +
                                          " of it then in panels, built in the background)"
                                    : "");
        std::fprintf(stderr,
                     "warden: weights %s%s: layers %s, embeddings/head %s, prefill copy %s%s\n",
                     m->weights_format.c_str(), why.c_str(), mib(wm.layers).c_str(),
                     mib(wm.embeddings).c_str(), mib(wm.prefill_copy).c_str(), tiles.c_str());
    }
    // FP8 block-scaled checkpoints run as stored (fp8-bG), or, in another --weights format, are
    // decoded row by row while loading: the f32 that costs on top of the runtime weights is one
    // weight's scale grid (formats/fp8_block.h).
    if (weights && m->fp8_native_count > 0)
        std::fprintf(stderr,
                     "warden: fp8 block-scaled source: %lld weights run as stored (e4m3 codes and "
                     "block scales), %lld decoded into the runtime format\n",
                     static_cast<long long>(m->fp8_native_count),
                     static_cast<long long>(m->fp8_dequant_count));
    else if (weights && m->fp8_dequant_count > 0) {
        const double kib = static_cast<double>(m->fp8_dequant_peak_bytes) / 1024.0;
        std::fprintf(stderr,
                     "warden: fp8 block-scaled source: %lld weights decoded row by row into the "
                     "runtime format, at most %.1f %s of f32 scales held\n",
                     static_cast<long long>(m->fp8_dequant_count),
                     kib < 1024.0 ? kib : kib / 1024.0, kib < 1024.0 ? "KiB" : "MiB");
    }
    // A tokenizer with more tokens than the model has embedding rows (a mismatched pair): said
    // once here; each prompt that holds such a token is refused with its id (Scheduler::add).
    if (tok && tok->vocab_size() > m->config.vocab_size)
        std::fprintf(stderr,
                     "warden: warning: the tokenizer has %lld tokens but the model's vocabulary "
                     "is %lld; prompts holding token ids %lld and above are refused\n",
                     static_cast<long long>(tok->vocab_size()),
                     static_cast<long long>(m->config.vocab_size),
                     static_cast<long long>(m->config.vocab_size));
    return LoadedModel{std::move(m), std::move(tok)};
}

}  // namespace warden::launch
