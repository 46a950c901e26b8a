#pragma once
// The router's view of its backends: the decode servers it forwards completions to and the
// prefill servers it watches, each with its health (GET /health, checked in the background;
// a failed forward marks a backend down at once) and its requests in flight.
//
// Choice of a decode server: with a routing key (the request's `user`, else its prompt's
// first characters), rendezvous hashing over the healthy servers sends equal keys to the same
// server (its prefix cache holds that prefix), unless that server already has `slack` more
// requests in flight than the least loaded one; without a key, the least loaded server.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace warden::router {

struct Backend {
    std::string url;  // http://HOST:PORT as given
    std::string host;
    std::string port;
    bool healthy = true;
    int in_flight = 0;
    int64_t routed = 0, failures = 0;
    std::string kv;  // prefill servers: their KV endpoint (--kv-listen HOST:PORT); empty: unknown
};

// "http://HOST:PORT" -> host, port; throws util::Error when malformed.
Backend parse_backend(const std::string& url);

class BackendPool {
  public:
    BackendPool(std::vector<Backend> decode, std::vector<Backend> prefill, int slack = 4);
    ~BackendPool();  // stops the health checker

    // Starts health checks every `period` (a backend answering non-200, or not at all within
    // the period, is down until it answers 200 again).
    void start_health_checks(std::chrono::milliseconds period);

    // A decode server for a request with this routing key (empty: none); nullopt when no
    // decode server is healthy. Counts the request in flight until done().
    std::optional<size_t> choose(const std::string& key, std::string* reason = nullptr);
    void done(size_t i, bool failed);  // failed: connection refused/reset -> marked down
    Backend decode(size_t i) const;
    // A prefill server for the request, by the same rule over the healthy prefill servers whose
    // KV endpoint is known (nullopt: none; the decode server then chooses). Counted in flight
    // until prefill_done(). (A failed prefill server is retried around by the decode server.)
    std::optional<size_t> choose_prefill(const std::string& key);
    void prefill_done(size_t i);
    Backend prefill(size_t i) const;
    bool any_prefill_healthy() const;

    // Prometheus text: backend health, requests in flight, decisions by reason.
    std::string metrics() const;
    std::string health_json() const;

  private:
    void check_all();
    // The rule above over one list; counts the decision as prefix + reason.
    std::optional<size_t> pick(std::vector<Backend>& list, const std::string& key,
                               const std::string& prefix, std::string* reason);
    mutable std::mutex mu_;
    std::vector<Backend> decode_, prefill_;
    int slack_;
    std::map<std::string, int64_t> decisions_;  // by reason
    std::atomic<bool> stop_{false};
    std::condition_variable cv_;
    std::thread checker_;
    std::chrono::milliseconds period_{1000};
};

// GET url path on host:port with a timeout; the status code, or 0 when it did not answer.
int http_get_status(const std::string& host, const std::string& port, const std::string& path,
                    std::chrono::milliseconds timeout);

}  // namespace warden::router
