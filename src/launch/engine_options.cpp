#include "launch/engine_options.h"

#include <charconv>

#include "util/error.h"
#include "util/log.h"

namespace warden::launch {

void add_kv_format_options(CLI::App& app, EngineOptions& o) {
    app.add_option("--kv-dtype", o.kv_dtype,
                   "KV cache format: bf16 (default), f16, fp8_e4m3, fp8_e5m2, int8, f32")
        ->check(CLI::IsMember({"f32", "bf16", "f16", "fp8_e4m3", "fp8_e5m2", "int8"}));
    app.add_option("--kv-scales", o.kv_scales,
                   "scales of 8-bit KV: token-head (default: one per token and kv head, stored in "
                   "the page) or "
                   "tensor (one fixed scale 1.0, for comparison)")
        ->check(CLI::IsMember({"token-head", "tensor"}));
}

kv::KvCacheConfig kv_config(const EngineOptions& o, const model::ModelConfig& c, bool f32_model) {
    tensor::KvType type = f32_model ? tensor::KvType::F32 : tensor::KvType::BF16;
    if (!o.kv_dtype.empty()) {
        const auto t = tensor::parse_kv_type(o.kv_dtype);
        util::check(t.has_value(), "--kv-dtype: unknown format '" + o.kv_dtype + "'");
        type = *t;
    }
    util::check(o.kv_scales == "token-head" || o.kv_scales == "tensor",
                "--kv-scales: expected token-head or tensor, got '" + o.kv_scales + "'");
    auto k = kv::KvCacheConfig::shaped(c.n_layers, c.n_kv_heads, c.head_dim, type, o.kv_page_size);
    k.scales = o.kv_scales == "tensor" ? kernels::KvScales::Tensor : kernels::KvScales::TokenHead;
    util::check(!(type == tensor::KvType::INT8 && k.scales == kernels::KvScales::Tensor),
                "--kv-dtype int8 needs --kv-scales=token-head (a per-tensor int8 scale would need "
                "calibration)");
    if (const model::KvShape sh = c.kv_shape(); sh.k_only) {  // MLA (same as make_kv_cache)
        k.n_kv_heads = sh.n_kv_heads;
        k.head_dim = sh.head_dim;
        k.k_only = true;
    }
    return k;
}

void add_engine_options(CLI::App& app, EngineOptions& o, bool batching) {
    add_kv_format_options(app, o);
    app.add_option("--kv-integrity", o.kv_integrity, "KV page checks: step (default), layer or off")
        ->check(CLI::IsMember({"step", "layer", "off"}));
    app.add_option("--kv-page-size", o.kv_page_size, "tokens per KV page (default 16)")
        ->check(CLI::Range(1, 4096));
    app.add_option("--kv-cache-bytes", o.kv_cache_bytes, "KV cache budget, e.g. 512M or 2G");
    app.add_flag("--kv-scrub-on-free", o.kv_scrub_on_free, "zero every KV page when it is freed");
    app.add_option("--fault-inject", o.fault_inject,
                   "inject KV ownership faults (testing), e.g. stale=0.01,seed=1");
    if (batching) {
        app.add_option("--max-seqs", o.max_seqs, "sequences batched at once (default 64)")
            ->check(CLI::Range(1, 4096));
        app.add_option("--max-batch-tokens", o.max_batch_tokens,
                       "tokens computed per step (default 512)")
            ->check(CLI::Range(1, 1 << 20));
    }
}

int64_t parse_bytes(const std::string& s, const std::string& flag) {
    int64_t v = 0;
    const char* b = s.data();
    const char* e = s.data() + s.size();
    auto [p, ec] = std::from_chars(b, e, v);
    util::check(ec == std::errc() && v > 0, flag + ": '" + s + "' is not a positive byte count");
    int64_t mul = 1;
    const std::string suffix(p, e);
    if (suffix == "K" || suffix == "KiB")
        mul = int64_t{1} << 10;
    else if (suffix == "M" || suffix == "MiB")
        mul = int64_t{1} << 20;
    else if (suffix == "G" || suffix == "GiB")
        mul = int64_t{1} << 30;
    else
        util::check(suffix.empty(), flag + ": unknown unit '" + suffix + "' (use K, M or G)");
    util::check(v <= (int64_t{1} << 50) / mul, flag + ": '" + s + "' is too large");
    return v * mul;
}

std::unique_ptr<kv::KvCache> make_kv_cache(const EngineOptions& o, const model::Model& m,
                                           std::optional<int64_t> default_tokens) {
    auto c = kv_config(o, m.config, m.dtype == model::RuntimeDType::F32);
    if (m.config.kv_shape()
            .k_only) {  // MLA: one compressed latent + rope-key row per token and layer
        c.n_kv_heads = m.config.kv_shape().n_kv_heads;
        c.head_dim = m.config.kv_shape().head_dim;
        c.k_only = true;
    }
    if (!o.kv_cache_bytes.empty()) {
        c.budget_bytes = parse_bytes(o.kv_cache_bytes, "--kv-cache-bytes");
    } else {
        c.budget_bytes =
            default_tokens ? kv::kv_budget_for_tokens(c, *default_tokens) : int64_t{1} << 30;
    }
    c.scrub_on_free = o.kv_scrub_on_free;
    auto cache = std::make_unique<kv::KvCache>(c);
    spdlog::info(
        "kv cache: {}, {} pages of {} tokens ({} bytes each), {} tokens in {} bytes, integrity {}",
        kv::kv_format_name(c), cache->pool().capacity(), cache->page_size(),
        cache->bytes_per_page(), cache->capacity_tokens(),
        (static_cast<int64_t>(cache->pool().capacity()) + 1) * cache->bytes_per_page(),
        o.kv_integrity);
    return cache;
}

std::unique_ptr<kv::FaultInjector> make_fault_injector(const EngineOptions& o) {
    if (o.fault_inject.empty()) return nullptr;
    return std::make_unique<kv::FaultInjector>(kv::FaultSpec::parse(o.fault_inject));
}

void add_spec_options(CLI::App& app, EngineOptions& o) {
    app.add_option("--spec", o.spec,
                   "speculative decoding: off (default), ngram (prompt lookup), draft (a draft "
                   "model, see --draft-model) or mtp (the checkpoint's own multi-token-prediction "
                   "layer: DeepSeek-V3, Kimi-K2, GLM-4.5)")
        ->check(CLI::IsMember({"off", "ngram", "draft", "mtp"}));
    app.add_option("--spec-tokens", o.spec_tokens,
                   "most draft tokens verified per sequence and step (default 4)")
        ->check(CLI::Range(1, 64));
    app.add_flag("--spec-fixed", o.spec_fixed,
                 "always draft --spec-tokens tokens (default: chosen per step from the measured "
                 "acceptance and batch size)");
    app.add_option("--draft-model", o.draft_model,
                   "--spec draft: the draft model's checkpoint (default: the target's own file, "
                   "self-speculation in the --draft-weights format)");
    app.add_option("--draft-weights", o.draft_weights,
                   "--spec draft: the draft's weight format (as --weights; default: the "
                   "checkpoint's own)");
}

}  // namespace warden::launch
