#pragma once
// What `warden serve` answers, apart from HTTP itself: the route table, bearer-key
// authentication (key -> tenant), per-tenant concurrency, the bodies of /health, /v1/models
// and /metrics, and the start of a completion (parse, validate, render, tokenize, submit).
// Thread-safe; the HTTP connections call it from the event loop and the prepare pool.
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>

#include "engine/engine.h"
#include "server/generation.h"
#include "server/openai_request.h"

namespace warden::server {

enum class Route {
    None,
    Completions,
    ChatCompletions,
    Models,
    Model,  // GET /v1/models/{id}
    Health,
    Metrics,
    Tokenize,
    Detokenize,
    TokenizerInfo,
    Version,
    OpenApi,
};

// The route of a request target (its path; a query string is ignored).
Route find_route(std::string_view target);
// The one method each route takes ("GET" or "POST").
const char* route_method(Route r);
// Every route's path and method, for /openapi.json (Model's path is "/v1/models/{model}").
struct RouteInfo {
    Route route;
    const char* path;
};
std::span<const RouteInfo> all_routes();

class Api {
  public:
    Api(engine::Engine& eng, ModelInfo model, std::unordered_map<std::string, std::string> api_keys,
        int tenant_max_concurrency);

    // Whether the route needs a bearer key (every /v1 route, and /metrics, when keys are set).
    bool needs_key(Route r) const;
    // Tenant of an Authorization header value ("default" when the server is open); throws
    // ApiError(401).
    std::string authenticate(std::string_view authorization) const;

    std::string models_body() const;
    // GET /v1/models/{id}: the model when `target` names it; throws ApiError(404).
    std::string model_body(std::string_view target) const;
    // POST /tokenize and /detokenize (vLLM's shapes), GET /tokenizer_info, /version and
    // /openapi.json (tokenize_routes.cpp, openapi.cpp). Throw ApiError(400) on a bad body.
    std::string tokenize_body(const std::string& body) const;
    std::string detokenize_body(const std::string& body) const;
    std::string tokenizer_info_body() const;
    static std::string version_body();
    static std::string openapi_body();
    // The engine's metrics, then the process' (resident memory, CPU seconds, open fds).
    std::string metrics_body();
    // An HTTP answer, in warden:http_requests_total (the route's path template; a method other
    // than GET, POST, OPTIONS and HEAD is counted as "other").
    void count_http(Route r, std::string_view method, unsigned status);

    // Parses and validates a completion body, renders and tokenizes its prompt, claims a
    // tenant slot and submits every choice (all or nothing). CPU-heavy: call it off the event
    // loop. Throws ApiError (400/404/429/503 ...).
    // prefill_hint: the X-Warden-Prefill header (a router's choice of prefill server, HOST:PORT
    // of its KV endpoint); it must name one of this decode server's prefill servers (else 400).
    std::shared_ptr<Generation> start_generation(const std::string& body, bool chat,
                                                 const std::string& tenant,
                                                 const std::string& prefill_hint = {});

    // Counts a refused request (401/429/503) in the abort metrics.
    void count_refusal(const std::string& tenant, const ApiError& e);

    // Shutdown: new completions are refused with 503 "draining".
    void begin_drain() { draining_ = true; }
    bool draining() const { return draining_; }

    // Requests between dispatch and their last byte written; shutdown waits for these.
    std::shared_ptr<void> busy_token();
    int64_t busy() const { return busy_.load(); }

  private:
    std::shared_ptr<void> claim_tenant_slot(const std::string& tenant);

    engine::Engine& eng_;
    ModelInfo model_;
    std::unordered_map<std::string, std::string> api_keys_;
    int tenant_max_concurrency_;
    std::atomic<bool> draining_{false};
    std::atomic<int64_t> busy_{0};
    std::mutex tenants_mu_;
    std::map<std::string, int> tenant_in_flight_;
};

}  // namespace warden::server
