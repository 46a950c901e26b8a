#pragma once
// Options shared by the subcommands and helpers to turn them into engine objects.
#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "util/thread_pool.h"

namespace warden::launch {

struct CommonOptions {
    std::string model_path;
    int threads = 0;  // 0: all cores
    std::string dtype = "bf16";
    std::string weights;  // --weights (empty or "auto": the checkpoint's own format, else --dtype)
    std::string prefill_weights;  // --prefill-weights (empty: none)
    bool quantize_embeddings = false;
    // --no-mmap: copy GGUF blocks that run as stored (LoadOptions::map_weights)
    bool no_mmap = false;
    std::string head_weights;  // --head-weights (empty: see --quantize-embeddings)
};

void add_model_option(CLI::App& app, CommonOptions& o);
// The whole file as bytes; util::Error naming the path when it cannot be read.
std::string read_text_file(const std::string& path);
void add_threads_option(CLI::App& app, CommonOptions& o);
// --dtype plus the weight-format options --weights, --prefill-weights, --quantize-embeddings.
void add_dtype_option(CLI::App& app, CommonOptions& o);

model::RuntimeDType parse_dtype(const std::string& s);

// A model and its tokenizer, loaded side by side from the same checkpoint.
struct LoadedModel {
    std::unique_ptr<model::Model> model;
    std::unique_ptr<tokenizer::Tokenizer> tokenizer;  // null when the checkpoint has none
};
// weights false: config, tokenizer and tensor inventory only (`warden info`).
LoadedModel load(const CommonOptions& o, bool weights, util::ThreadPool& pool);
// The load options those flags make (--dtype, --weights, --prefill-weights, --head-weights, ...).
model::LoadOptions load_options(const CommonOptions& o);

}  // namespace warden::launch
