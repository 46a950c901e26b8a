// `warden imatrix -m MODEL -f TEXT -o OUT.gguf`: an importance matrix for `warden quantize
// --imatrix` and llama.cpp's llama-quantize, computed as llama-imatrix computes it: the text is
// tokenized once (with BOS where the model asks for it), cut into chunks of --chunk-size tokens,
// each chunk starts with BOS and runs from position 0 on an empty cache, and every layer matrix's
// input columns accumulate their squared activations (convert/imatrix_collector.h). The output is
// llama.cpp's GGUF imatrix format.
#include <chrono>
#include <cstdio>

#include "convert/imatrix_collector.h"
#include "launch/common.h"
#include "model/kv_cache.h"
#include "model/transformer.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace warden::cli {

namespace {

struct ImatrixOptions {
    CommonOptions common;
    std::string text_file;
    std::string out;
    int64_t chunk_size = 512;
    int64_t chunks = -1;  // all
    bool process_output = false;
};

int imatrix(const ImatrixOptions& o) {
    util::check(
        o.out.size() > 5 && o.out.ends_with(".gguf"),
        "imatrix: output '" + o.out + "' must end in .gguf (llama.cpp's GGUF imatrix format)");
    util::check(o.chunk_size >= 16, "imatrix: --chunk-size must be at least 16 tokens");
    util::check(o.chunks != 0 && o.chunks >= -1,
                "imatrix: --chunks must be positive (or -1 for all)");
    const std::string text = read_text_file(o.text_file);
    util::ThreadPool pool(o.common.threads);
    auto model = load(o.common, true, pool);
    util::check(model->tokenizer != nullptr,
                "imatrix: model '" + o.common.model_path + "' has no tokenizer");
    util::check(o.chunk_size <= model->config.max_ctx,
                "imatrix: --chunk-size " + std::to_string(o.chunk_size) +
                    " exceeds the model's context of " + std::to_string(model->config.max_ctx));
    const tokenizer::Tokenizer& tok = *model->tokenizer;
    const bool bos = tok.add_bos_default() && tok.bos_id() >= 0;
    const std::vector<int32_t> tokens = tok.encode(text, bos);
    const auto available = static_cast<int64_t>(tokens.size()) / o.chunk_size;
    util::check(available >= 1,
                "imatrix: '" + o.text_file + "' tokenizes to " + std::to_string(tokens.size()) +
                    " tokens, fewer than one chunk of " + std::to_string(o.chunk_size));
    const int64_t n_chunks = o.chunks < 0 ? available : std::min(o.chunks, available);

    convert::ImatrixCollector collector(*model, o.process_output);
    if (o.process_output && collector.entries().count("output.weight") == 0)
        std::fprintf(stderr,
                     "imatrix: --process-output: the output head is tied to the embeddings "
                     "(token_embd.weight), which is not collected, as llama-imatrix does not\n");
    // With --process-output every row's logits are computed, so the head sees the whole chunk as
    // llama-imatrix's does; otherwise no head runs at all.
    std::vector<float> logits(
        o.process_output ? static_cast<size_t>(o.chunk_size * model->config.vocab_size) : 0);
    model::Transformer tf(*model, pool);
    tf.set_observer(&collector);
    model::ContiguousKvCache cache(model->config, o.chunk_size, tensor::KvType::F32);
    std::vector<int32_t> chunk(static_cast<size_t>(o.chunk_size));
    std::fprintf(stderr, "imatrix: %lld chunks of %lld tokens (%zu in the text), %zu matrices\n",
                 static_cast<long long>(n_chunks), static_cast<long long>(o.chunk_size),
                 tokens.size(), collector.entries().size());
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t c = 0; c < n_chunks; ++c) {
        std::copy_n(tokens.begin() + c * o.chunk_size, o.chunk_size, chunk.begin());
        if (bos) chunk[0] = tok.bos_id();  // as llama-imatrix: every chunk starts with BOS
        cache.set_n_tokens(0);
        tf.forward(chunk.data(), o.chunk_size, cache, o.process_output ? logits.data() : nullptr,
                   o.process_output);
        const double s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::fprintf(stderr, "imatrix: chunk %lld/%lld, %.1f s, %.0f tok/s\n",
                     static_cast<long long>(c + 1), static_cast<long long>(n_chunks), s,
                     static_cast<double>((c + 1) * o.chunk_size) / s);
    }
    collector.write_gguf(o.out, {o.text_file}, n_chunks, o.chunk_size);
    std::printf("wrote %s: %zu entries from %lld chunks of %lld tokens of %s\n", o.out.c_str(),
                collector.entries().size(), static_cast<long long>(n_chunks),
                static_cast<long long>(o.chunk_size), o.text_file.c_str());
    return 0;
}

}  // namespace

void register_imatrix(CLI::App& app, int& rc) {
    auto o = std::make_shared<ImatrixOptions>();
    auto* sub = app.add_subcommand("imatrix",
                                   "compute an importance matrix over calibration text "
                                   "(llama.cpp's GGUF imatrix, for quantize --imatrix)");
    add_model_option(*sub, o->common);
    add_threads_option(*sub, o->common);
    add_dtype_option(*sub, o->common);
    sub->add_option("-f,--file", o->text_file, "calibration text file")->required();
    sub->add_option("-o,--output", o->out, "output imatrix (.gguf)")->required();
    sub->add_option("--chunk-size", o->chunk_size,
                    "tokens per chunk, each from position 0 and starting with BOS (default 512, as "
                    "llama-imatrix's context)");
    sub->add_option("--chunks", o->chunks, "chunks to process (default: all the text holds)");
    sub->add_flag("--process-output", o->process_output,
                  "collect the output head too, as output.weight (not for a head tied to the "
                  "embeddings; as llama-imatrix's --process-output)");
    sub->callback([o, &rc] { rc = imatrix(*o); });
}

}  // namespace warden::cli
