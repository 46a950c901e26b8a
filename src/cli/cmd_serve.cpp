// `warden serve`: the OpenAI-compatible HTTP server over the continuous-batching engine.
// SIGTERM/SIGINT drain in-flight requests (new ones get 503), then the process exits, at most
// --drain-timeout (+ about 1 s) after the signal.
#include <pthread.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "chat_output/reasoning_parser.h"
#include "chat_output/tool_parser.h"
#include "chat_template/chat_template.h"
#include "cli/commands.h"
#include "engine/engine.h"
#include "formats/checkpoint_identity.h"
#include "launch/common.h"
#include "launch/engine_assembly.h"
#include "launch/role_options.h"
#include "model/transformer.h"
#include "server/api_keys.h"
#include "server/http_limits.h"
#include "server/server.h"
#include "tokenizer/tokenizer.h"
#include "transfer/disagg_roles.h"
#include "util/error.h"
#include "util/log.h"
#include "util/phase_timer.h"

namespace warden::cli {

namespace {

struct ServeOptions {
    launch::CommonOptions common;
    launch::EngineOptions engine;
    std::string host = "127.0.0.1";
    int port = 8080;
    std::string api_keys;
    std::string model_name;
    int64_t max_queue = 256;
    int tenant_concurrency = 64;
    std::string max_body = "1M";
    double request_timeout_s = 600;
    double watermark = 0.01;
    std::string admission = "watermark";
    int drain_timeout_s = 60;
    bool no_prefix_cache = false;
    server::HttpLimits http;
    std::vector<std::string> shared_prefixes;  // files of prompt text as the server tokenizes it
    std::string chat_template;                 // file overriding the model's chat template
    std::string tool_call_parser = "auto";
    std::string reasoning_parser = "auto";
    transfer::RoleOptions role;  // --role and its transport options
};

// "auto": the parser the chat template's format calls for ("" when it has none); "none": "".
std::string pick_parser(const std::string& flag, const std::string& detected) {
    if (flag == "auto") return detected;
    return flag == "none" ? "" : flag;
}

// Declares each operator shared prefix and computes its pages once, before the first request,
// so that their presence in the cache never depends on (and never reveals) any tenant's traffic.
void warm_shared_prefixes(const ServeOptions& o, const tokenizer::Tokenizer& tok,
                          kv::PrefixCache& pc, engine::Engine& eng) {
    for (const std::string& path : o.shared_prefixes) {
        const std::string text = launch::read_text_file(path);
        // Tokenized like a rendered chat prompt: special tokens are parsed, no BOS is added.
        std::vector<int32_t> toks = tok.encode(text, false, true);
        const int64_t shared = pc.declare_shared_prefix(toks);
        util::check(shared > 0, "--shared-prefix " + path + ": " + std::to_string(toks.size()) +
                                    " tokens is less than one KV page (" +
                                    std::to_string(pc.page_size()) + " tokens); nothing to share");
        toks.push_back(toks.back());  // one token past the prefix, so every prefix page is computed
        engine::Request r;
        r.prompt = std::move(toks);
        r.max_new_tokens = 1;
        r.tenant = "-";
        auto sub = eng.submit(std::move(r));
        util::check(sub.status == engine::SubmitStatus::Ok,
                    "--shared-prefix: the engine refused the warm-up");
        engine::Event ev;
        while (sub.stream->next(ev, std::chrono::seconds(600)))
            if (ev.kind == engine::Event::Kind::Finish) break;
        util::check(ev.kind == engine::Event::Kind::Finish &&
                        (ev.result.finish == engine::FinishReason::Length ||
                         ev.result.finish == engine::FinishReason::Stop),
                    "--shared-prefix " + path + ": warm-up failed (" +
                        std::string(finish_reason_name(ev.result.finish)) +
                        (ev.result.error.empty() ? "" : ": " + ev.result.error) + ")");
        spdlog::info("shared prefix {}: {} tokens, {} shared pages", path, toks.size() - 1,
                     shared / pc.page_size());
    }
}

bool loopback(const std::string& h) {
    return h == "127.0.0.1" || h == "localhost" || h == "::1";
}

int serve(const ServeOptions& o) {
    util::check(
        !(o.api_keys.empty() && !loopback(o.host)),
        "refusing to serve on '" + o.host + "' without --api-keys (only loopback may be open)");
    server::ServerConfig sc;
    sc.host = o.host;
    sc.port = o.port;
    sc.tenant_max_concurrency = o.tenant_concurrency;
    sc.http = o.http;
    sc.http.max_body_bytes = static_cast<size_t>(launch::parse_bytes(o.max_body, "--max-body"));
    if (!o.api_keys.empty()) sc.api_keys = server::load_api_keys(o.api_keys);

    // Signals are taken by one thread (sigwait); block them before any thread starts.
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
    std::signal(SIGPIPE, SIG_IGN);

    util::PhaseTimer timer("serve start-up");
    util::ThreadPool pool(o.common.threads);
    timer.mark("thread pool");
    const launch::LoadedModel loaded = launch::load(o.common, true, pool);
    timer.mark("model and tokenizer");
    const auto& model = loaded.model;
    util::check(loaded.tokenizer != nullptr,
                "model '" + o.common.model_path + "' has no tokenizer");
    std::unique_ptr<chat_template::ChatTemplate> chat;
    const std::string template_source =
        o.chat_template.empty() ? model->chat_template : launch::read_text_file(o.chat_template);
    if (!template_source.empty()) {
        try {
            chat = std::make_unique<chat_template::ChatTemplate>(
                chat_template::ChatTemplate::parse(template_source));
        } catch (const util::Error& e) {
            spdlog::warn("chat template unusable ({}); /v1/chat/completions is disabled", e.what());
        }
    }
    timer.mark("chat template");
    const launch::EngineParts parts =
        launch::assemble_engine(o.engine, *model, pool, std::nullopt, &o.common);
    timer.mark("engine and KV pool");
    const auto& cache = parts.cache;
    engine::EngineConfig ec;
    ec.scheduler = parts.scheduler;
    ec.scheduler.watermark = o.watermark;
    ec.scheduler.reserve_outputs = o.admission == "reserve";
    ec.max_queue = static_cast<size_t>(o.max_queue);
    ec.request_timeout =
        std::chrono::milliseconds(static_cast<int64_t>(o.request_timeout_s * 1000));
    // The prefix cache is keyed by the weights (path, format, runtime dtype) and the KV format,
    // so entries can never be read by another model or format.
    std::unique_ptr<kv::PrefixCache> prefix;
    if (!o.no_prefix_cache) {
        kv::PrefixCacheConfig pcc;
        pcc.page_size = cache->page_size();
        // The loaded format, not the flag: without --weights the loader picks it (LoadOptions).
        pcc.model_id = std::hash<std::string>{}(o.common.model_path + '\0' + model->weights_format +
                                                '\0' + model::runtime_dtype_name(model->dtype));
        pcc.copy_partial_pages = true;
        pcc.kv_format = static_cast<uint32_t>(cache->storage().type) |
                        static_cast<uint32_t>(cache->storage().scales) << 8;
        prefix = std::make_unique<kv::PrefixCache>(cache->pool(), pcc);
        ec.prefix_cache = prefix.get();
    } else {
        util::check(o.shared_prefixes.empty(),
                    "--shared-prefix needs the prefix cache (drop --no-prefix-cache)");
    }
    ec.proposer = parts.proposer.get();
    ec.spec = parts.spec;
    // Disaggregated roles (transfer/disagg_roles.h): a decode server's prompts are computed by
    // prefill servers; a prefill server also answers them over UCX.
    // The pages' model is the checkpoint (file name and size), not the weight format, so a
    // prefill server may run other weights (--weights) than its decode servers.
    transfer::KvIdentity kv_id;
    kv_id.model_id = formats::checkpoint_identity(o.common.model_path);
    kv_id.config = cache->config();
    transfer::DecodeRole decode_role(o.role, kv_id);
    ec.remote_prefill = decode_role.source();
    timer.mark("prefix cache");
    engine::Engine eng(*parts.executor, *cache, ec, parts.faults.get());
    timer.mark("engine");
    if (prefix) warm_shared_prefixes(o, *loaded.tokenizer, *prefix, eng);
    transfer::PrefillRole prefill_role(o.role, eng, *cache, kv_id.model_id);

    server::ModelInfo mi;
    mi.id = o.model_name.empty() ? std::filesystem::path(o.common.model_path).filename().string()
                                 : o.model_name;
    mi.tok = loaded.tokenizer.get();
    mi.chat = chat.get();
    if (chat) {
        mi.chat_template_source = template_source;
        mi.tool_parser =
            pick_parser(o.tool_call_parser, chat_output::detect_tool_parser(template_source));
        mi.reasoning_parser =
            pick_parser(o.reasoning_parser, chat_output::detect_reasoning_parser(template_source));
        spdlog::info("chat output: tool-call parser {}, reasoning parser {}",
                     mi.tool_parser.empty() ? "none" : mi.tool_parser,
                     mi.reasoning_parser.empty() ? "none" : mi.reasoning_parser);
    }
    mi.max_ctx = model->config.max_ctx;
    mi.kv_tokens = cache->capacity_tokens();
    server::Server srv(sc, eng, mi);
    timer.mark("server");
    const int port = srv.bind();
    timer.mark("listening");

    std::thread sig([&] {
        int s = 0;
        sigwait(&sigs, &s);
        std::fprintf(stderr, "warden serve: signal %d, draining\n", s);
        srv.drain_and_stop(o.drain_timeout_s);
    });
    std::fprintf(stderr, "warden serve: model %s on http://%s:%d (kv %lld tokens, %s)\n",
                 mi.id.c_str(), o.host.c_str(), port, static_cast<long long>(mi.kv_tokens),
                 sc.api_keys.empty() ? "open" : "api keys");
    if (prefill_role.active())
        std::fprintf(stderr, "warden serve: role prefill, kv transfers on %s:%d\n",
                     o.role.kv_host().c_str(), prefill_role.port());
    if (decode_role.source())
        std::fprintf(stderr, "warden serve: role decode, prompts from %s\n",
                     o.role.prefill_kv.c_str());
    std::fflush(stderr);
    srv.serve();
    // serve() also returns if listening failed; make the signal thread finish either way.
    pthread_kill(sig.native_handle(), SIGTERM);
    sig.join();
    std::fprintf(stderr, "warden serve: stopped\n");
    return 0;
}

}  // namespace

void register_serve(CLI::App& app, int& rc) {
    auto o = std::make_shared<ServeOptions>();
    CLI::App* sub =
        app.add_subcommand("serve", "OpenAI-compatible HTTP server (continuous batching)");
    launch::add_model_option(*sub, o->common);
    launch::add_threads_option(*sub, o->common);
    launch::add_dtype_option(*sub, o->common);
    launch::add_engine_options(*sub, o->engine, true);
    launch::add_spec_options(*sub, o->engine);
    sub->add_option("--host", o->host, "address to bind (default 127.0.0.1)");
    sub->add_option("--port", o->port, "port (default 8080; 0 picks a free one)")
        ->check(CLI::Range(0, 65535));
    sub->add_option("--api-keys", o->api_keys, "file of 'KEY TENANT' lines: bearer auth, tenants");
    sub->add_option("--model-name", o->model_name, "model id clients use (default: the file name)");
    sub->add_option("--max-queue", o->max_queue,
                    "requests waiting for admission before 429 (default 256)")
        ->check(CLI::Range(1, 1 << 20));
    sub->add_option("--tenant-concurrency", o->tenant_concurrency,
                    "requests in flight per tenant (default 64)")
        ->check(CLI::Range(1, 1 << 20));
    sub->add_option("--max-body", o->max_body, "largest request body (default 1M); larger -> 413");
    sub->add_option("--request-timeout", o->request_timeout_s,
                    "seconds a request may take (default 600)")
        ->check(CLI::Range(0.1, 1e6));
    sub->add_option("--kv-watermark", o->watermark,
                    "fraction of KV pages admission keeps free (default 0.01)")
        ->check(CLI::Range(0.0, 0.5));
    sub->add_option("--admission", o->admission,
                    "watermark (default): admit on the prompt's pages, preempt when running "
                    "sequences outgrow the "
                    "pool; reserve: admit only when prompt + max_tokens of every running request "
                    "fit, never preempt")
        ->check(CLI::IsMember({"watermark", "reserve"}));
    sub->add_option("--drain-timeout", o->drain_timeout_s,
                    "seconds SIGTERM waits for in-flight requests before cutting them and exiting "
                    "(default 60)")
        ->check(CLI::Range(0, 3600));
    sub->add_option("--http-threads", o->http.io_threads,
                    "threads running the HTTP event loop (default 2)")
        ->check(CLI::Range(1, 64));
    sub->add_option(
           "--prepare-threads", o->http.prepare_threads,
           "threads parsing, templating and tokenizing requests off the event loop (default 2)")
        ->check(CLI::Range(1, 64));
    sub->add_option("--max-connections", o->http.max_connections,
                    "open connections at most (default 4096); more are closed at once")
        ->check(CLI::Range(1, 1 << 20));
    sub->add_option("--max-connections-per-client", o->http.max_connections_per_client,
                    "open connections per client IP address (default 256); more are closed at once")
        ->check(CLI::Range(1, 1 << 20));
    sub->add_option("--header-timeout", o->http.header_timeout_s,
                    "seconds for a request's whole head (request line + headers) to arrive "
                    "(default 10); then 408")
        ->check(CLI::Range(0.1, 3600.0));
    sub->add_option(
           "--body-timeout", o->http.body_timeout_s,
           "seconds for a request body to arrive, plus 1 s per 64 KiB of it (default 10); then 408")
        ->check(CLI::Range(0.1, 3600.0));
    sub->add_option(
           "--idle-timeout", o->http.idle_timeout_s,
           "seconds a kept-alive connection may wait for its next request (default 5); then closed")
        ->check(CLI::Range(0.1, 3600.0));
    sub->add_option(
           "--max-header-bytes", o->http.max_header_bytes,
           "largest request head (request line + headers) in bytes (default 16384); larger -> 431")
        ->check(CLI::Range(1024, 1 << 20));
    sub->add_option("--max-headers", o->http.max_headers,
                    "most header fields in a request (default 100); more -> 431")
        ->check(CLI::Range(1, 10000));
    sub->add_option(
        "--cors-origin", o->http.cors_origin,
        "answer CORS preflight (OPTIONS) and allow this origin (default: no CORS, OPTIONS -> 405)");
    sub->add_flag("--no-prefix-cache", o->no_prefix_cache,
                  "do not reuse the KV pages of earlier prompts");
    sub->add_option("--shared-prefix", o->shared_prefixes,
                    "file holding a prompt prefix (text as the chat template renders it) whose KV "
                    "pages every "
                    "tenant may share; repeatable")
        ->check(CLI::ExistingFile);
    sub->add_option("--chat-template", o->chat_template,
                    "Jinja chat template file to use instead of the model's")
        ->check(CLI::ExistingFile);
    std::vector<std::string> tool_names = {"auto", "none"}, reasoning_names = {"auto", "none"};
    for (const auto& n : chat_output::tool_parser_names()) tool_names.push_back(n);
    for (const auto& n : chat_output::reasoning_parser_names()) reasoning_names.push_back(n);
    sub->add_option("--tool-call-parser", o->tool_call_parser,
                    "format tool calls are read from the output in (vLLM's names: hermes, "
                    "llama3_json, kimi_k2, glm45, deepseek_v31); auto (default): the chat "
                    "template's; none: tools requests are refused")
        ->check(CLI::IsMember(tool_names));
    sub->add_option("--reasoning-parser", o->reasoning_parser,
                    "split <think> reasoning into reasoning_content (vLLM's names: deepseek_r1, "
                    "qwen3, glm45, kimi_k2, deepseek_v3); auto (default): when the chat template "
                    "has <think>; none: never")
        ->check(CLI::IsMember(reasoning_names));
    add_role_options(*sub, o->role);
    sub->callback([o, &rc] { rc = serve(*o); });
}

}  // namespace warden::cli
