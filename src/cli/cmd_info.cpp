// `warden info`: what a model file is, without loading its weights.
#include <cstdio>

#include "cli/commands.h"
#include "kernels/cpu_features.h"
#include "launch/common.h"
#include "launch/engine_options.h"
#include "tokenizer/tokenizer.h"

namespace warden::cli {

namespace {

std::string printable(const std::string& s) {
    std::string out;
    for (char ch : s) {
        if (ch == '\n')
            out += "\\n";
        else if (static_cast<unsigned char>(ch) < 0x20)
            out += "?";
        else
            out += ch;
    }
    return out;
}

// The KV budget in bytes and tokens for the chosen format, and what the same bytes hold in
// every other format (page arithmetic of kv::KvCache, scale overhead included).
void print_kv_budget(const launch::EngineOptions& e, const model::ModelConfig& c) {
    kv::KvCacheConfig k = launch::kv_config(e, c, false);
    k.budget_bytes = e.kv_cache_bytes.empty()
                         ? int64_t{1} << 30
                         : launch::parse_bytes(e.kv_cache_bytes, "--kv-cache-bytes");
    const double per_token =
        static_cast<double>(kv::kv_page_bytes(k)) / static_cast<double>(k.page_size);
    std::printf("kv cache:       %s, pages of %d tokens x %lld bytes (%.1f bytes per token)\n",
                kv::kv_format_name(k).c_str(), k.page_size,
                static_cast<long long>(kv::kv_page_bytes(k)), per_token);
    std::printf("kv budget:      %lld bytes%s -> %lld tokens\n",
                static_cast<long long>(k.budget_bytes),
                e.kv_cache_bytes.empty() ? " (default; --kv-cache-bytes)" : "",
                static_cast<long long>(kv::kv_tokens_for_budget(k)));
    std::printf("same bytes in: ");
    for (tensor::KvType t : {tensor::KvType::BF16, tensor::KvType::F16, tensor::KvType::FP8_E4M3,
                             tensor::KvType::FP8_E5M2, tensor::KvType::INT8}) {
        kv::KvCacheConfig o = k;
        o.type = t;
        o.scales = kernels::KvScales::TokenHead;
        std::printf(" %s %lld", tensor::kv_type_name(t),
                    static_cast<long long>(kv::kv_tokens_for_budget(o)));
    }
    std::printf(" tokens\n");
}

int info(const launch::CommonOptions& o, const launch::EngineOptions& e) {
    util::ThreadPool pool(1);
    auto m = launch::load(o, false, pool);
    const auto& c = m->config;
    std::printf("model:          %s (%s)\n", m->path.c_str(), m->format.c_str());
    std::printf("architecture:   %s\n", c.arch_name.c_str());
    std::printf("parameters:     %lld (%.1fM)\n", static_cast<long long>(m->n_params),
                static_cast<double>(m->n_params) / 1e6);
    std::printf("tensor types:  ");
    for (const auto& [type, count] : m->source_tensor_types)
        std::printf(" %s x%lld", type.c_str(), static_cast<long long>(count));
    std::printf("\n");
    std::printf("weights:        %s%s\n", m->weights_format.c_str(),
                m->weights_note.empty() ? "" : (" (" + m->weights_note + ")").c_str());
    // The kernel family this process runs (WARDEN_ISA can lower it) and why AMX is or is not
    // available; `warden run`'s timings line says isa= too.
    std::printf("kernels:        isa=%s (AMX: %s)\n", kernels::isa_name(kernels::active_isa()),
                kernels::amx_status());
    std::printf("layers:         %lld\n", static_cast<long long>(c.n_layers));
    std::printf("hidden size:    %lld (ffn %lld)\n", static_cast<long long>(c.d_model),
                static_cast<long long>(c.d_ff));
    std::printf("attention:      %lld heads, %lld kv heads, head dim %lld%s%s\n",
                static_cast<long long>(c.n_heads), static_cast<long long>(c.n_kv_heads),
                static_cast<long long>(c.head_dim), c.qkv_bias ? ", qkv bias" : "",
                c.qk_norm ? ", qk norm" : "");
    std::printf("rope:           theta %g, %s, dims %lld\n", static_cast<double>(c.rope_theta),
                c.rope_style == model::RopeStyle::NeoX ? "neox" : "interleaved",
                static_cast<long long>(c.rope_dim));
    std::printf("context length: %lld\n", static_cast<long long>(c.max_ctx));
    std::printf("vocab size:     %lld\n", static_cast<long long>(c.vocab_size));
    std::printf("embeddings:     %s\n", c.tied_embeddings ? "tied" : "untied");
    print_kv_budget(e, c);
    if (m->tokenizer) {
        const auto& t = *m->tokenizer;
        std::printf("tokenizer:      %s, %d tokens, bos %d, eos %d, add_bos %s\n", t.kind().c_str(),
                    t.vocab_size(), t.bos_id(), t.eos_id(), t.add_bos_default() ? "yes" : "no");
        std::printf("stop tokens:   ");
        for (int32_t id : t.stop_ids()) std::printf(" %d", id);
        std::printf("\n");
        const auto specials = t.special_tokens();
        std::printf("special tokens: %zu\n", specials.size());
        size_t shown = 0;
        for (const auto& [text, id] : specials) {
            if (shown++ == 32) {
                std::printf("  ... (%zu more)\n", specials.size() - 32);
                break;
            }
            std::printf("  %6d  %s\n", id, printable(text).c_str());
        }
    } else {
        std::printf("tokenizer:      none\n");
    }
    std::printf("chat template:  %s\n", m->chat_template.empty() ? "none" : "yes");
    return 0;
}

}  // namespace

void register_info(CLI::App& app, int& rc) {
    auto o = std::make_shared<launch::CommonOptions>();
    auto e = std::make_shared<launch::EngineOptions>();
    CLI::App* sub = app.add_subcommand(
        "info", "describe a model: architecture, sizes, tensor types, tokenizer, KV budget");
    launch::add_model_option(*sub, *o);
    launch::add_threads_option(*sub, *o);
    launch::add_kv_format_options(*sub, *e);
    sub->add_option("--kv-page-size", e->kv_page_size, "tokens per KV page (default 16)")
        ->check(CLI::Range(1, 4096));
    sub->add_option("--kv-cache-bytes", e->kv_cache_bytes,
                    "KV cache budget to report on, e.g. 512M or 2G (default 1G)");
    sub->callback([o, e, &rc] { rc = info(*o, *e); });
}

}  // namespace warden::cli
