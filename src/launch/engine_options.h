#pragma once
// Flags of the paged KV cache and the batch engine, shared by run, batch (and later serve).
#include <CLI/CLI.hpp>
#include <memory>
#include <optional>
#include <string>

#include "kv/fault_injector.h"
#include "kv/kv_cache.h"
#include "kv/page_table.h"
#include "model/model.h"

namespace warden::launch {

struct EngineOptions {
    std::string kv_integrity = "step";
    int32_t kv_page_size = 16;
    std::string kv_cache_bytes;  // empty: a default that depends on the command
    std::string
        kv_dtype;  // empty: bf16 (f32 for an f32 model); else f32|bf16|f16|fp8_e4m3|fp8_e5m2|int8
    std::string kv_scales = "token-head";  // token-head | tensor (scale 1.0)
    bool kv_scrub_on_free = false;
    std::string fault_inject;
    int64_t max_seqs = 64;
    int64_t max_batch_tokens = 512;
    // Speculative decoding (engine/speculative): off | ngram | draft.
    std::string spec = "off";
    int32_t spec_tokens = 4;
    bool spec_fixed = false;    // always draft spec_tokens (no adaptive choice)
    std::string draft_model;    // --spec draft: the draft checkpoint (empty: the target's file)
    std::string draft_weights;  // ... and its weight format (--weights of the draft)
};

void add_engine_options(CLI::App& app, EngineOptions& o, bool batching);
// --spec, --spec-tokens, --spec-fixed, --draft-model, --draft-weights (run, batch, serve).
void add_spec_options(CLI::App& app, EngineOptions& o);
// --kv-dtype and --kv-scales alone (also used by `warden info`).
void add_kv_format_options(CLI::App& app, EngineOptions& o);
// The KV geometry and format for `model` from the options (budget not set).
kv::KvCacheConfig kv_config(const EngineOptions& o, const model::ModelConfig& c, bool f32_model);

// "1073741824", "512M", "2G", "64K" -> bytes. Throws util::Error on anything else.
int64_t parse_bytes(const std::string& s, const std::string& flag);

// The KV cache for `model`. Without --kv-cache-bytes it holds exactly `default_tokens` tokens
// when given (a single known request), else 1 GiB.
std::unique_ptr<kv::KvCache> make_kv_cache(const EngineOptions& o, const model::Model& m,
                                           std::optional<int64_t> default_tokens = std::nullopt);
std::unique_ptr<kv::FaultInjector> make_fault_injector(const EngineOptions& o);

}  // namespace warden::launch
