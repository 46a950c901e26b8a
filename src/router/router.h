#pragma once
// `warden router`: the OpenAI-compatible entry point of a disaggregated deployment. It holds no
// model: each completion is forwarded (body untouched, responses and SSE streams relayed as
// they arrive) to a decode server chosen by BackendPool (prefix/user affinity, else least
// loaded). With the prefill servers' KV endpoints known (--prefill-kv) the router also chooses
// the request's prefill server by the same rule and names it to the decode server (header
// X-Warden-Prefill); the decode server retries on another prefill server when that one fails
// before anything was emitted. A decode
// server that refuses the connection or fails before answering is marked down and the request
// goes to another one; with none healthy the client gets a 503 in the API's error format.
// /health and /metrics describe the router and its backends.
//
// One thread per client connection (blocking Beast I/O with socket timeouts); one response per
// connection (Connection: close).
#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "router/backend_pool.h"

namespace warden::router {

struct RouterConfig {
    std::string host = "127.0.0.1";
    int port = 8080;
    std::vector<std::string> decode, prefill;  // http://HOST:PORT
    // The prefill servers' KV endpoints (their --kv-listen HOST:PORT), in --prefill's order;
    // given: the router chooses the prefill server of each request too and names it to the
    // decode server (header X-Warden-Prefill). Empty: the decode servers choose.
    std::vector<std::string> prefill_kv;
    std::chrono::milliseconds health_period{1000};
    size_t max_body = 1 << 20;
    int affinity_slack = 4;  // in-flight requests a preferred server may be above the least
    std::chrono::seconds io_timeout{600};  // one read or write on either side
};

class Router {
  public:
    explicit Router(RouterConfig cfg);
    ~Router();
    int bind();    // throws util::Error; returns the port
    void serve();  // until stop()
    void stop();   // any thread
    BackendPool& pool() { return pool_; }

  private:
    void handle(boost::asio::ip::tcp::socket sock);
    RouterConfig cfg_;
    BackendPool pool_;
    boost::asio::io_context io_;
    std::unique_ptr<boost::asio::ip::tcp::acceptor> acceptor_;
    std::atomic<bool> stop_{false};
    std::atomic<int> connections_{0};
};

// The routing key of a completion body: its `user`, else the start of its prompt or messages
// (requests sharing a prefix share a key); empty when the body is not a JSON object.
std::string routing_key(const std::string& body);

}  // namespace warden::router
