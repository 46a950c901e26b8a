#pragma once
// One streaming request against an OpenAI-compatible server, timed: the client side of
// `warden bench`. Uses cpp-httplib's blocking client (one per stream/thread).
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tools/bench/workload.h"

namespace httplib {
class Client;
}

namespace warden::tools::bench {

using Clock = std::chrono::steady_clock;

struct Endpoint {
    std::string host_port;  // "http://host:port" for httplib::Client
    std::string prefix;     // path prefix before "/v1/..."
    // "http://127.0.0.1:8080", "http://host:8080/v1", "host:8080" -> Endpoint. Throws util::Error.
    static Endpoint parse(const std::string& url);
};

// Times are in ms relative to the request's scheduled start; -1 when the event did not happen.
struct RequestRecord {
    int64_t index = 0;
    bool ok = false;
    int status = 0;              // HTTP status, 0 when none
    std::string error;           // empty when ok
    double wait_ms = 0;          // scheduled -> sent (client-side queueing)
    double headers_ms = -1;      // sent -> response headers (network + server accept)
    double ttft_ms = -1;         // sent -> first content token
    double e2e_ms = -1;          // sent -> end of stream
    std::vector<double> itl_ms;  // gaps between consecutive content chunks
    double tpot_ms = -1;         // (last token - first token) / (output tokens - 1)
    int64_t prompt_tokens = 0;   // from usage, else the workload's approximation
    int64_t output_tokens = 0;   // from usage, else the number of content chunks
    int64_t cached_tokens = 0;   // usage.prompt_tokens_details.cached_tokens (prefix-cache hits)
    bool usage_reported = false;
    // warden_timing.spec_proposed / spec_accepted (speculative decoding; 0 without)
    int64_t spec_proposed = 0, spec_accepted = 0;
    int64_t chunks = 0;
    std::string text;
};

struct ClientOptions {
    std::string model;
    double timeout_s = 120;  // per request: connect, each read and the whole stream
    bool ignore_eos = true;
};

class StreamClient {
  public:
    StreamClient(const Endpoint& ep, const ClientOptions& o);
    ~StreamClient();
    StreamClient(const StreamClient&) = delete;
    StreamClient& operator=(const StreamClient&) = delete;
    // Sends `r` and streams the answer until done, error, the request timeout or `deadline`.
    RequestRecord send(const BenchRequest& r, Clock::time_point deadline);

  private:
    Endpoint ep_;
    ClientOptions o_;
    std::unique_ptr<httplib::Client> cli_;
};

// GET /v1/models and return the first id, or "" when the server does not say.
std::string discover_model(const Endpoint& ep, double timeout_s);

// Incremental parser of a text/event-stream body: feed bytes, get complete `data:` payloads.
class SseParser {
  public:
    void feed(const char* data, size_t n, std::vector<std::string>& events);

  private:
    std::string buf_;
};

}  // namespace warden::tools::bench
