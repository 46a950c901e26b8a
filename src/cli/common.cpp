#include "cli/common.h"

#include "util/error.h"

namespace warden::cli {

void add_model_option(CLI::App& app, CommonOptions& o) {
    app.add_option("-m,--model", o.model_path, "GGUF file or Hugging Face model directory")->required();
}

void add_threads_option(CLI::App& app, CommonOptions& o) {
    app.add_option("-t,--threads", o.threads, "worker threads (default: all cores)")
        ->check(CLI::Range(0, 1024));
}

void add_dtype_option(CLI::App& app, CommonOptions& o) {
    app.add_option("--dtype", o.dtype, "runtime weight format")->check(CLI::IsMember({"bf16", "f32"}));
}

model::RuntimeDType parse_dtype(const std::string& s) {
    if (s == "bf16") return model::RuntimeDType::BF16;
    if (s == "f32") return model::RuntimeDType::F32;
    throw util::Error("unknown --dtype '" + s + "' (bf16 or f32)");
}

std::unique_ptr<model::Model> load(const CommonOptions& o, bool weights, util::ThreadPool& pool) {
    model::LoadOptions lo;
    lo.dtype = parse_dtype(o.dtype);
    lo.load_weights = weights;
    return model::load_model(o.model_path, lo, pool);
}

}  // namespace warden::cli
