#pragma once
// The limits and deadlines the HTTP front end enforces on every connection (`warden serve`
// flags): connection counts overall and per client address, whole-phase deadlines for the
// request head, the body and keep-alive idleness, and the sizes of the head and body.
#include <cstddef>
#include <string>

namespace warden::server {

struct HttpLimits {
    int io_threads = 2;                       // event-loop threads
    int prepare_threads = 2;                  // JSON parse, chat template, tokenize
    int max_connections = 4096;               // more are closed at once
    int max_connections_per_client = 256;     // per remote IP; more are closed at once
    double header_timeout_s = 10;             // request line + headers, as a whole -> 408
    double body_timeout_s = 10;               // body, plus 1 s per 64 KiB of it -> 408
    double idle_timeout_s = 5;                // keep-alive wait for the next request -> close
    double write_timeout_s = 30;              // one write that makes no progress -> close
    size_t max_header_bytes = 16384;          // -> 431
    size_t max_headers = 100;                 // -> 431
    size_t max_body_bytes = size_t{1} << 20;  // whatever the framing -> 413
    std::string cors_origin;                  // non-empty: answer CORS preflight for this origin
};

// Seconds the body of `bytes` bytes may take on top of body_timeout_s.
inline double body_allowance_s(size_t bytes) {
    return static_cast<double>(bytes) / 65536.0;
}

}  // namespace warden::server
