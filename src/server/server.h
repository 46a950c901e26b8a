#pragma once
// `warden serve`'s HTTP front end (cpp-httplib): OpenAI-compatible /v1/completions,
// /v1/chat/completions (JSON and SSE streaming), /v1/models, /health and Prometheus /metrics.
// It validates, authenticates (bearer key -> tenant), renders chat templates, tokenizes and
// hands requests to the Engine; it never touches KV pages.
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "engine/engine.h"
#include "server/openai_request.h"

namespace httplib {
class Server;
}

namespace warden::server {

struct ServerConfig {
    std::string host = "127.0.0.1";
    int port = 8080;
    size_t max_body_bytes = size_t{1} << 20;  // larger bodies -> 413
    int http_threads = 96;
    int tenant_max_concurrency = 64;          // requests in flight per tenant; more -> 429
    std::unordered_map<std::string, std::string> api_keys;  // empty: open (tenant "default")
    int read_timeout_s = 10;
};

class Server {
public:
    Server(ServerConfig cfg, engine::Engine& eng, ModelInfo model);
    ~Server();
    // Binds; throws util::Error when the address cannot be bound. Returns the bound port.
    int bind();
    void serve();  // blocks until stop()
    // SIGTERM: refuse new requests (503), let in-flight ones finish (bounded), then stop.
    void drain_and_stop(int max_wait_s);

private:
    void routes();
    std::string authenticate(const std::string& authorization) const;  // tenant; throws ApiError(401)

    ServerConfig cfg_;
    engine::Engine& eng_;
    ModelInfo model_;
    std::unique_ptr<httplib::Server> http_;
    std::atomic<bool> draining_{false};
    std::atomic<int64_t> in_flight_{0};
    std::mutex tenants_mu_;
    std::map<std::string, int> tenant_in_flight_;
    friend struct TenantSlot;
};

}  // namespace warden::server
