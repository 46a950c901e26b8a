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

namespace warden::cli {

struct EngineOptions {
    std::string kv_integrity = "step";
    int32_t kv_page_size = 16;
    std::string kv_cache_bytes;  // empty: a default that depends on the command
    bool kv_scrub_on_free = false;
    std::string fault_inject;
    int64_t max_seqs = 64;
    int64_t max_batch_tokens = 512;
};

void add_engine_options(CLI::App& app, EngineOptions& o, bool batching);

// "1073741824", "512M", "2G", "64K" -> bytes. Throws util::Error on anything else.
int64_t parse_bytes(const std::string& s, const std::string& flag);

// The KV cache for `model`. Without --kv-cache-bytes it holds exactly `default_tokens` tokens
// when given (a single known request), else 1 GiB.
std::unique_ptr<kv::KvCache> make_kv_cache(const EngineOptions& o, const model::Model& m,
                                           std::optional<int64_t> default_tokens = std::nullopt);
std::unique_ptr<kv::FaultInjector> make_fault_injector(const EngineOptions& o);

}  // namespace warden::cli
