#pragma once
// One client connection of `warden serve` (Boost.Beast over Boost.Asio). Every handler runs on
// the connection's strand; nothing here blocks an event-loop thread: the CPU-heavy start of a
// completion runs on the prepare pool, and engine events arrive through Stream::set_notify.
//
// Per request: the head must arrive within the header deadline (408 when part of it came,
// a silent close when none did), then it is checked before any body byte is read (header size
// and count -> 431, framing -> 400/501, Content-Encoding -> 415, route -> 404/405, the API key
// -> 401, Content-Length over --max-body -> 413), then the body within its deadline (chunked
// bodies -> 413 as soon as they pass --max-body). Errors that leave unread input close the
// connection after the response. Keep-alive and pipelined requests are answered in order.
// While a completion runs the socket is watched: a peer that closes cancels it.
#include <array>
#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "server/api.h"
#include "server/http_limits.h"

namespace warden::server {

// Engine-thread hooks post into the event loop only while this is open; the server closes it
// before the event loop is torn down.
struct NotifyGate {
    std::mutex mu;
    bool open = true;
};

// What connections share: the server's limits, API, prepare pool and connection registry.
struct ConnectionHost {
    const HttpLimits& limits;
    Api& api;
    boost::asio::thread_pool& prepare_pool;
    std::shared_ptr<NotifyGate> gate;
    std::function<void(uint64_t id, const std::string& client)> on_closed;
};

class HttpConnection : public std::enable_shared_from_this<HttpConnection> {
  public:
    // `socket`'s executor must be a strand.
    HttpConnection(boost::asio::ip::tcp::socket socket, ConnectionHost& host, uint64_t id,
                   std::string client);
    ~HttpConnection();
    HttpConnection(const HttpConnection&) = delete;
    HttpConnection& operator=(const HttpConnection&) = delete;

    void start();
    // Shutdown (any thread): drain() closes the connection when it is between requests and
    // after its current response; cut() ends the running request now (a 503, or an SSE error
    // event and [DONE] on a stream) and closes.
    void drain();
    void cut();

  private:
    using Clock = std::chrono::steady_clock;
    enum class Phase { Idle, Header, Body, Busy, Closing, Closed };

    void next_request(bool fresh);
    void wait_for_bytes();
    void read();
    void on_read(boost::system::error_code ec);
    void on_header();
    void start_body();
    void on_request();
    void on_prepared(std::shared_ptr<Generation> g, std::optional<ApiError> err);
    void on_engine_events();
    void finish_non_streaming();
    void flush_stream();
    void on_stream_written(boost::system::error_code ec, bool last);
    void watch_peer();
    void end_generation();

    void respond(unsigned status, std::string body, const char* content_type, bool force_close,
                 const char* allow = nullptr);
    void respond_error(const ApiError& e, bool force_close);
    void answer_off_loop();
    void count_response(unsigned status);  // in the HTTP metrics
    void preflight();
    void on_written(boost::system::error_code ec, bool close_after);
    void graceful_close();
    void discard_input();
    void close();

    void set_deadline(Clock::time_point t);
    void clear_deadline() { set_deadline(Clock::time_point::max()); }
    void on_deadline();
    Clock::time_point body_deadline() const;

    boost::asio::ip::tcp::socket sock_;
    boost::asio::steady_timer timer_;
    ConnectionHost& host_;
    const uint64_t id_;
    const std::string client_;
    const Clock::time_point opened_;

    boost::beast::flat_buffer buf_;
    std::optional<boost::beast::http::request_parser<boost::beast::http::string_body>> parser_;
    Phase phase_ = Phase::Idle;
    bool fresh_ = true;       // no request has been read on this connection yet
    bool timed_out_ = false;  // the deadline cancelled the read in progress
    uint64_t timer_seq_ = 0;
    Clock::time_point body_start_{};
    unsigned version_ = 11;
    bool keep_alive_ = true;
    Route route_ = Route::None;
    std::string tenant_ = "-";

    std::shared_ptr<void> busy_;  // Api::busy_token while a request is being answered
    std::shared_ptr<Generation> gen_;
    std::shared_ptr<HttpConnection> self_;  // held while gen_ runs (see on_prepared)
    std::shared_ptr<std::atomic<bool>> event_posted_;
    bool streaming_ = false, chunked_ = false, stream_ending_ = false, writing_ = false;
    std::string head_, pending_, wbuf_;
    bool watching_ = false;
    bool draining_ = false, cut_ = false;
    std::array<char, 4096> scratch_{};
    size_t discarded_ = 0;
};

}  // namespace warden::server
