#pragma once
// A loaded model: config, runtime weights and the file mappings they borrow from. Its tokenizer
// is loaded beside it from the same checkpoint (Tokenizer::from_checkpoint; launch::load).
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "model/model_config.h"
#include "model/weights.h"
#include "tensor/weight_format.h"
#include "util/thread_pool.h"

namespace warden::formats {
class GGUFFile;
class SafetensorsModel;
}  // namespace warden::formats

namespace warden::model {

struct LoadOptions {
    RuntimeDType dtype = RuntimeDType::BF16;
    bool load_weights = true;  // false: config and tensor inventory only (info)
    // Runtime weight format of the linear layers (--weights). Unset: the checkpoint's own format
    // where one maps onto it without loss (native_weights), else `dtype`.
    std::optional<tensor::WeightFormat> weights;
    // With `weights` unset, load layer matrices stored in a format warden runs natively in that
    // format: GGUF files whose layer matrices are all Q4_0 / all Q4_1 / all Q8_0 as int4-g32 /
    // int4-g32-asym / int8 (per channel) or int8-g32, with their embeddings and head decided one by
    // one (model/gguf_native_weights.h); compressed-tensors pack-quantized checkpoints in theirs.
    // false: always `dtype` (the KV benches, whose documented runs used bf16 weights).
    bool native_weights = true;
    // Higher-precision copy for prefill rows (--prefill-weights bf16|fp8); unset: none.
    std::optional<tensor::WeightFormat> prefill_weights;
    // Format of token_embd / output (--head-weights, e.g. int8: a quarter of bf16's bytes for the
    // head without int4's quality loss; --quantize-embeddings sets it to `weights`). Unset: beside
    // quantized layers, named or native, the checkpoint's own where it maps without loss (a GGUF
    // Q4_0 / Q4_1 / Q8_0 head), else the layers' default head (int8 beside int4,
    // tensor::default_head_format), else dtype.
    std::optional<tensor::WeightFormat> head_weights;
    // GGUF blocks that run as stored (K-quants, Q5_0/Q5_1, IQ4) are read in place from the mapped
    // file: no copy, so start-up is bounded by the read. false (--no-mmap): copied into the
    // weight arena, all 2 MiB pages (the mapping has them only where the page cache holds large
    // folios), which decode reads a few percent faster (fewer TLB misses).
    bool map_weights = true;
};

// Weight memory of a loaded model, by role (bytes of the runtime matrices).
struct WeightMemory {
    int64_t layers = 0;        // the per-layer linear matrices
    int64_t embeddings = 0;    // token_embd + output (once when tied)
    int64_t prefill_copy = 0;  // --prefill-weights copies
    // What the AMX-BF16 tile layout of bf16 matrices adds over the panels it replaces (column
    // padding, kernels/matmul_bf16_tiles.h); the rest is counted under layers / embeddings.
    int64_t amx_tiles = 0;
    int64_t amx_tile_matrices = 0;  // bf16 matrices held in the tile layout
    int64_t in_place = 0;  // of layers + embeddings: read where the file maps them (Matrix::mapped)
    // Copies of in-place matrices in a faster layout (the panels of Q4_0 / Q4_1 / Q8_0 blocks and
    // of compressed-tensors int4 and FP8 codes), built after loading (DeferredLayouts); each
    // replaces its in-place bytes once built.
    int64_t deferred_copies = 0;
    // Bytes the loader's weight arena handed out (panels and copies; in-place matrices take none).
    int64_t arena = 0;
};

class DeferredLayouts;

struct Model {
    Model();
    ~Model();
    Model(const Model&) = delete;
    Model& operator=(const Model&) = delete;

    std::string path;
    std::string format;  // "gguf" or "safetensors"
    ModelConfig config;
    RuntimeDType dtype = RuntimeDType::BF16;
    ModelWeights weights;
    std::string chat_template;  // empty when none
    int64_t n_params = 0;
    std::map<std::string, int64_t> source_tensor_types;  // type name -> tensor count
    std::string weights_format = "bf16";                 // runtime format of the layer matrices
    std::string
        weights_note;  // how the loader chose weights_format without --weights; empty otherwise
    WeightMemory weight_memory;
    // FP8 block-scaled safetensors: the most f32 (dequantized source weights) held at once while
    // loading; 0 for other sources.
    int64_t fp8_dequant_peak_bytes = 0;
    int64_t fp8_dequant_count =
        0;  // FP8 weights dequantized while loading (each once, if all is well)
    int64_t fp8_native_count = 0;  // FP8 weights kept as stored (fp8-bG)

    // The mappings that borrowed weights point into.
    std::shared_ptr<formats::GGUFFile> gguf;
    std::shared_ptr<formats::SafetensorsModel> safetensors;

    // Returns once every deferred copy of the weights is published (model/deferred_layouts.h):
    // for tests and benchmarks that look at the final layout; serving never needs to wait.
    void wait_for_deferred_layouts() const;

    // Builds the weights' deferred copies (model/deferred_layouts.h); null when there are none.
    // Last, so that its thread stops before anything it writes into goes away.
    std::unique_ptr<DeferredLayouts> deferred_layouts;
};

// Loads a GGUF file or a Hugging Face model directory. Throws util::Error with a one-line
// message naming the problem (missing tensor, wrong shape, unsupported type, ...).
std::unique_ptr<Model> load_model(const std::string& path, const LoadOptions& options,
                                  util::ThreadPool& pool);

// The first multi-token-prediction (nextn) layer of `target`'s checkpoint (the layer after its
// decoder layers, num_nextn_predict_layers) as a one-layer draft model (model/mtp.h): weights
// in `options`' formats, embeddings and head its own where the checkpoint has them, else
// aliases of the target's (which must outlive it). Throws util::Error when the checkpoint has
// no MTP layer or one of its tensors is missing or misshapen.
std::unique_ptr<Model> load_mtp_model(const Model& target, const LoadOptions& options,
                                      util::ThreadPool& pool);

}  // namespace warden::model
