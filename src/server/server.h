#pragma once
// `warden serve`'s HTTP front end: an event loop (Boost.Asio, a few threads) accepting
// connections up to the configured limits (server/http_limits.h), each served by an
// HttpConnection; the OpenAI-compatible routes live in server/api.h. It validates,
// authenticates (bearer key -> tenant), renders chat templates, tokenizes and hands requests to
// the Engine; it never touches KV pages.
#include <memory>
#include <string>
#include <unordered_map>

#include "engine/engine.h"
#include "server/http_limits.h"
#include "server/openai_request.h"

namespace warden::server {

struct ServerConfig {
    std::string host = "127.0.0.1";
    int port = 8080;
    int tenant_max_concurrency = 64;  // requests in flight per tenant; more -> 429
    std::unordered_map<std::string, std::string> api_keys;  // empty: open (tenant "default")
    HttpLimits http;
};

class Server {
  public:
    Server(ServerConfig cfg, engine::Engine& eng, ModelInfo model);
    ~Server();
    // Binds and listens; throws util::Error when the address cannot be bound. Returns the port.
    int bind();
    void serve();  // runs the event loop; returns after drain_and_stop()
    // SIGTERM (any thread): new requests get 503, requests in flight finish; at most
    // `max_wait_s` later the ones still running are cut (503, or an SSE error event and [DONE]),
    // and about a second after that serve() returns whatever the clients do.
    void drain_and_stop(int max_wait_s);

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace warden::server
