#include "server/http_connection.h"

#include <sys/socket.h>

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>
#include <cerrno>
#include <cstdio>

#include "util/log.h"

namespace warden::server {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using error_code = boost::system::error_code;

namespace {

std::chrono::steady_clock::duration seconds(double s) {
    return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(s));
}

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
}

constexpr std::string_view kJson = "application/json";

}  // namespace

HttpConnection::HttpConnection(tcp::socket socket, ConnectionHost& host, uint64_t id,
                               std::string client)
    : sock_(std::move(socket)),
      timer_(sock_.get_executor()),
      host_(host),
      id_(id),
      client_(std::move(client)),
      opened_(Clock::now()) {}

HttpConnection::~HttpConnection() {
    host_.on_closed(id_, client_);
}

void HttpConnection::start() {
    net::post(sock_.get_executor(), [self = shared_from_this()] { self->next_request(true); });
}

void HttpConnection::drain() {
    net::post(sock_.get_executor(), [self = shared_from_this()] {
        self->draining_ = true;
        if (self->phase_ == Phase::Idle) self->close();
    });
}

void HttpConnection::cut() {
    net::post(sock_.get_executor(), [self = shared_from_this()] {
        auto& s = *self;
        if (s.phase_ == Phase::Closed || s.phase_ == Phase::Closing) return;
        s.cut_ = true;
        s.keep_alive_ = false;
        const ApiError e(503, "the server is shutting down; the request was cut", "",
                         "server_shutdown");
        if (s.gen_ && s.streaming_) {
            s.gen_->cancel_all();
            if (!s.gen_->finished_sent) {
                s.gen_->finished_sent = true;
                s.pending_ += sse_event(e.body());
                s.pending_ += kSseDone;
                s.stream_ending_ = true;
            }
            s.flush_stream();
        } else if (s.busy_ && !s.writing_ && s.phase_ == Phase::Busy) {
            s.end_generation();  // cancels it
            s.respond_error(e, true);
        } else if (!s.busy_) {
            s.close();
        }
    });
}

// ---------------------------------------------------------------- reading a request

void HttpConnection::next_request(bool fresh) {
    if (draining_ || cut_) return graceful_close();
    fresh_ = fresh;
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(host_.limits.max_header_bytes));
    parser_->body_limit(boost::none);  // checked against the route and key first (on_header)
    route_ = Route::None;
    tenant_ = "-";
    if (buf_.size() > 0) {  // a pipelined request is already here
        phase_ = Phase::Header;
        set_deadline(Clock::now() + seconds(host_.limits.header_timeout_s));
        return read();
    }
    phase_ = Phase::Idle;
    set_deadline(fresh ? opened_ + seconds(host_.limits.header_timeout_s)
                       : Clock::now() + seconds(host_.limits.idle_timeout_s));
    wait_for_bytes();
}

void HttpConnection::wait_for_bytes() {
    sock_.async_wait(tcp::socket::wait_read, [self = shared_from_this()](error_code ec) {
        if (self->phase_ != Phase::Idle) return;
        if (ec) return self->close();
        self->phase_ = Phase::Header;
        // A new connection's head is due header_timeout after it opened; a kept-alive one's
        // header_timeout after its first byte.
        if (!self->fresh_)
            self->set_deadline(Clock::now() + seconds(self->host_.limits.header_timeout_s));
        self->read();
    });
}

void HttpConnection::read() {
    http::async_read_some(
        sock_, buf_, *parser_,
        [self = shared_from_this()](error_code ec, size_t) { self->on_read(ec); });
}

void HttpConnection::on_read(error_code ec) {
    if (phase_ == Phase::Closed) return;
    if (timed_out_) {
        timed_out_ = false;
        if (phase_ == Phase::Header && buf_.size() == 0 && !parser_->got_some()) return close();
        return respond_error(
            ApiError(408,
                     phase_ == Phase::Body ? "the request body was not received in time"
                                           : "the request head was not received in time",
                     "", "request_timeout"),
            true);
    }
    if (ec) {
        if (ec == http::error::header_limit)
            return respond_error(
                ApiError(431,
                         "the request head is larger than " +
                             std::to_string(host_.limits.max_header_bytes) + " bytes",
                         "", "headers_too_large"),
                true);
        if (ec == http::error::body_limit)
            return respond_error(
                ApiError(413, "request body too large (limit " +
                                  std::to_string(host_.limits.max_body_bytes) + " bytes)"),
                true);
        if (ec.category() == http::make_error_code(http::error::bad_method).category() &&
            ec != http::error::end_of_stream && ec != http::error::partial_message)
            return respond_error(
                ApiError(400, "malformed HTTP request (" + ec.message() + ")", "", "bad_request"),
                true);
        return close();  // the peer closed or reset, possibly mid-request
    }
    if (phase_ == Phase::Header) {
        if (parser_->is_header_done()) return on_header();
        return read();
    }
    if (parser_->is_done()) return on_request();
    set_deadline(body_deadline());  // the allowance grows with what arrived (chunked bodies)
    read();
}

HttpConnection::Clock::time_point HttpConnection::body_deadline() const {
    size_t bytes = parser_->get().body().size();
    if (auto cl = parser_->content_length())
        bytes = std::max<size_t>(bytes, static_cast<size_t>(*cl));
    return body_start_ + seconds(host_.limits.body_timeout_s + body_allowance_s(bytes));
}

void HttpConnection::on_header() {
    const auto& req = parser_->get();
    version_ = req.version();
    keep_alive_ = req.keep_alive();
    route_ = find_route(req.target());
    const auto& lim = host_.limits;
    if (static_cast<size_t>(std::distance(req.begin(), req.end())) > lim.max_headers)
        return respond_error(
            ApiError(431, "more than " + std::to_string(lim.max_headers) + " request headers", "",
                     "too_many_headers"),
            true);
    if (auto te = req.find(http::field::transfer_encoding);
        te != req.end() && !beast::iequals(trim(te->value()), "chunked"))
        return respond_error(
            ApiError(501, "unsupported Transfer-Encoding (only chunked is accepted)", "",
                     "unsupported_transfer_encoding"),
            true);
    if (auto ce = req.find(http::field::content_encoding); ce != req.end()) {
        const auto v = trim(ce->value());
        if (!v.empty() && !beast::iequals(v, "identity"))
            return respond_error(
                ApiError(
                    415,
                    "compressed request bodies are not accepted (Content-Encoding: identity only)",
                    "", "unsupported_content_encoding"),
                true);
    }
    if (route_ == Route::None) return respond_error(ApiError(404, "no such endpoint"), false);
    const std::string_view method = req.method_string();
    if (method == "OPTIONS" && !lim.cors_origin.empty()) return preflight();
    if (method != route_method(route_)) {
        const std::string allow =
            std::string(route_method(route_)) + (lim.cors_origin.empty() ? "" : ", OPTIONS");
        if (method == "HEAD")
            keep_alive_ = false;  // no body may follow a HEAD answer: close instead
        return respond(405, dump_json(ApiError(405, "method not allowed").body()), kJson.data(),
                       method == "HEAD", allow.c_str());
    }
    if (host_.api.needs_key(route_)) {
        try {
            tenant_ = host_.api.authenticate(req[http::field::authorization]);
        } catch (const ApiError& e) {
            host_.api.count_refusal(tenant_, e);
            return respond_error(e, true);
        }
    } else {
        tenant_ = "default";
    }
    if (host_.api.draining() && route_method(route_) == std::string_view("POST")) {
        const ApiError e = route_ == Route::Health
                               ? ApiError(503, "draining")
                               : ApiError(503, "the server is shutting down", "", "draining");
        if (route_ != Route::Health) host_.api.count_refusal(tenant_, e);
        return respond_error(e, true);
    }
    if (auto cl = parser_->content_length(); cl && *cl > lim.max_body_bytes)
        return respond_error(ApiError(413, "request body too large (limit " +
                                               std::to_string(lim.max_body_bytes) + " bytes)"),
                             true);
    parser_->body_limit(static_cast<std::uint64_t>(lim.max_body_bytes));
    if (parser_->is_done()) return on_request();
    if (beast::iequals(req[http::field::expect], "100-continue")) {
        static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
        phase_ = Phase::Busy;
        set_deadline(Clock::now() + seconds(lim.write_timeout_s));
        return net::async_write(sock_, net::buffer(kContinue),
                                [self = shared_from_this()](error_code ec, size_t) {
                                    if (self->phase_ == Phase::Closed) return;
                                    if (ec) return self->close();
                                    self->start_body();
                                });
    }
    start_body();
}

void HttpConnection::start_body() {
    phase_ = Phase::Body;
    body_start_ = Clock::now();
    set_deadline(body_deadline());
    read();
}

// ---------------------------------------------------------------- answering it

void HttpConnection::on_request() {
    phase_ = Phase::Busy;
    clear_deadline();
    switch (route_) {
        case Route::Health:
            return respond(200, R"({"status":"ok"})", kJson.data(), false);
        case Route::Models:
            return respond(200, host_.api.models_body(), kJson.data(), false);
        case Route::Model:
            try {
                return respond(200, host_.api.model_body(parser_->get().target()), kJson.data(),
                               false);
            } catch (const ApiError& e) {
                return respond_error(e, false);
            }
        case Route::TokenizerInfo:
            return respond(200, host_.api.tokenizer_info_body(), kJson.data(), false);
        case Route::Version:
            return respond(200, Api::version_body(), kJson.data(), false);
        case Route::OpenApi:
            return respond(200, Api::openapi_body(), kJson.data(), false);
        case Route::Metrics:
            return respond(200, host_.api.metrics_body(), "text/plain; version=0.0.4", false);
        case Route::Tokenize:
        case Route::Detokenize:
            return answer_off_loop();
        case Route::Completions:
        case Route::ChatCompletions:
            break;
        case Route::None:
            return respond_error(ApiError(404, "no such endpoint"), false);
    }
    busy_ = host_.api.busy_token();
    const bool chat = route_ == Route::ChatCompletions;
    std::string hint(parser_->get()["X-Warden-Prefill"]);  // a router's prefill server choice
    net::post(host_.prepare_pool, [self = shared_from_this(),
                                   body = std::move(parser_->get().body()), chat, tenant = tenant_,
                                   hint = std::move(hint)]() mutable {
        std::shared_ptr<Generation> g;
        std::optional<ApiError> err;
        try {
            g = self->host_.api.start_generation(body, chat, tenant, hint);
        } catch (const ApiError& e) {
            err = e;
        } catch (const std::exception& e) {
            err = ApiError(500, std::string("internal error: ") + e.what());
        }
        body = std::string();
        auto ex = self->sock_.get_executor();
        net::post(ex, [self = std::move(self), g = std::move(g), err = std::move(err)]() mutable {
            self->on_prepared(std::move(g), std::move(err));
        });
    });
}

// Tokenize / detokenize: answered from the prepare pool (tokenizing a large body must not stall
// the event loop), then written from the connection's executor.
void HttpConnection::answer_off_loop() {
    busy_ = host_.api.busy_token();
    const bool tokenize = route_ == Route::Tokenize;
    net::post(host_.prepare_pool, [self = shared_from_this(),
                                   body = std::move(parser_->get().body()), tokenize]() mutable {
        std::string out;
        std::optional<ApiError> err;
        try {
            out = tokenize ? self->host_.api.tokenize_body(body)
                           : self->host_.api.detokenize_body(body);
        } catch (const ApiError& e) {
            err = e;
        } catch (const std::exception& e) {
            err = ApiError(500, std::string("internal error: ") + e.what());
        }
        auto ex = self->sock_.get_executor();
        net::post(
            ex, [self = std::move(self), out = std::move(out), err = std::move(err)]() mutable {
                if (self->phase_ == Phase::Closed || self->phase_ == Phase::Closing || self->cut_)
                    return;
                if (err) return self->respond_error(*err, false);
                self->respond(200, std::move(out), kJson.data(), false);
            });
    });
}

void HttpConnection::on_prepared(std::shared_ptr<Generation> g, std::optional<ApiError> err) {
    if (phase_ == Phase::Closed || phase_ == Phase::Closing || cut_) return;  // `g` cancels itself
    if (err) {
        host_.api.count_refusal(tenant_, *err);
        return respond_error(*err, false);
    }
    gen_ = std::move(g);
    // Engine events reach the connection through weak references and the socket may have no
    // operation pending while the engine works: the connection keeps itself alive meanwhile.
    self_ = shared_from_this();
    streaming_ = gen_->req.stream;
    auto posted = event_posted_ = std::make_shared<std::atomic<bool>>(false);
    std::weak_ptr<HttpConnection> weak = shared_from_this();
    auto ex = sock_.get_executor();
    auto gate = host_.gate;
    for (auto& c : gen_->choices)
        c.stream->set_notify([weak, ex, gate, posted] {
            if (posted->exchange(true)) return;  // a drain is already on its way
            std::lock_guard lk(gate->mu);
            if (!gate->open) return;
            net::post(ex, [weak] {
                if (auto self = weak.lock()) self->on_engine_events();
            });
        });
    watch_peer();
    if (streaming_) {
        count_response(200);
        head_ = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n";
        if (!host_.limits.cors_origin.empty())
            head_ += "Access-Control-Allow-Origin: " + host_.limits.cors_origin + "\r\n";
        if (version_ >= 11) {
            chunked_ = true;
            head_ += "Transfer-Encoding: chunked\r\n";
            if (!keep_alive_) head_ += "Connection: close\r\n";
        } else {  // HTTP/1.0 has no chunks: the body ends when the connection does
            chunked_ = false;
            keep_alive_ = false;
            head_ += "Connection: close\r\n";
        }
        head_ += "\r\n";
    }
    on_engine_events();
}

void HttpConnection::on_engine_events() {
    if (phase_ == Phase::Closed || !gen_) return;
    event_posted_->store(false);
    gen_->drain_events();
    if (!streaming_) {
        if (gen_->all_done()) finish_non_streaming();
        return;
    }
    if (!gen_->finished_sent) {
        pending_ += gen_->sse_chunks();
        if (gen_->all_done()) {
            pending_ += gen_->sse_tail();
            gen_->finished_sent = true;
            stream_ending_ = true;
        }
    }
    flush_stream();
}

void HttpConnection::finish_non_streaming() {
    const auto g = std::move(gen_);
    self_.reset();  // the caller holds a reference
    if (const Choice* f = g->failed())
        return respond_error(ApiError(f->error_status, f->error), false);
    respond(200, dump_json(g->full_response()), kJson.data(), false);
}

void HttpConnection::flush_stream() {
    if (writing_ || phase_ == Phase::Closed) return;
    std::string out = std::move(head_);
    head_.clear();
    if (!pending_.empty()) {
        if (chunked_) {
            char size[24];
            std::snprintf(size, sizeof size, "%zx\r\n", pending_.size());
            out += size;
            out += pending_;
            out += "\r\n";
        } else {
            out += pending_;
        }
        pending_.clear();
    }
    const bool last = stream_ending_;
    if (last && chunked_) out += "0\r\n\r\n";
    if (out.empty()) return;
    stream_ending_ = false;
    wbuf_ = std::move(out);
    writing_ = true;
    set_deadline(Clock::now() + seconds(host_.limits.write_timeout_s));
    net::async_write(sock_, net::buffer(wbuf_),
                     [self = shared_from_this(), last](error_code ec, size_t) {
                         self->on_stream_written(ec, last);
                     });
}

void HttpConnection::on_stream_written(error_code ec, bool last) {
    writing_ = false;
    if (phase_ == Phase::Closed) return;
    if (ec) return close();  // the client is gone: close() cancels the generation
    clear_deadline();
    if (!last) return flush_stream();
    end_generation();
    busy_.reset();
    streaming_ = false;
    if (!keep_alive_) return graceful_close();
    next_request(false);
}

void HttpConnection::watch_peer() {
    if (watching_ || phase_ == Phase::Closed) return;
    watching_ = true;
    sock_.async_wait(tcp::socket::wait_read, [self = shared_from_this()](error_code ec) {
        self->watching_ = false;
        if (ec || self->phase_ == Phase::Closed || !self->gen_) return;
        char c;
        const ssize_t n = ::recv(self->sock_.native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
        if (n > 0) return;  // the next request, pipelined: keep generating
        if (n == 0) {
            if (self->buf_.size() > 0)
                return;            // half-closed behind pipelined requests: answer them
            return self->close();  // the client left: close() cancels the generation
        }
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return self->watch_peer();
        self->close();
    });
}

void HttpConnection::count_response(unsigned status) {
    std::string_view method;
    if (parser_)
        method = std::string_view(parser_->get().method_string().data(),
                                  parser_->get().method_string().size());
    host_.api.count_http(route_, method, status);
}

void HttpConnection::respond(unsigned status, std::string body, const char* content_type,
                             bool force_close, const char* allow) {
    count_response(status);
    auto res = std::make_shared<http::response<http::string_body>>(
        static_cast<http::status>(status), version_);
    res->set(http::field::content_type, content_type);
    if (allow) res->set(http::field::allow, allow);
    if (!host_.limits.cors_origin.empty())
        res->set(http::field::access_control_allow_origin, host_.limits.cors_origin);
    const bool head =
        parser_ && parser_->is_header_done() && parser_->get().method() == http::verb::head;
    // Input left unread (a refused body) makes the connection unusable for another request.
    const bool close_after =
        force_close || cut_ || draining_ || !keep_alive_ || !parser_ || !parser_->is_done();
    res->keep_alive(!close_after);
    res->body() = head ? std::string() : std::move(body);
    res->prepare_payload();
    phase_ = Phase::Busy;
    writing_ = true;
    set_deadline(Clock::now() + seconds(host_.limits.write_timeout_s));
    http::async_write(sock_, *res,
                      [self = shared_from_this(), res, close_after](error_code ec, size_t) {
                          self->writing_ = false;
                          self->on_written(ec, close_after);
                      });
}

void HttpConnection::respond_error(const ApiError& e, bool force_close) {
    respond(static_cast<unsigned>(e.status), dump_json(e.body()), kJson.data(), force_close);
}

void HttpConnection::preflight() {
    auto res =
        std::make_shared<http::response<http::empty_body>>(http::status::no_content, version_);
    const auto& origin = host_.limits.cors_origin;
    res->set(http::field::access_control_allow_origin, origin);
    res->set(http::field::access_control_allow_methods,
             std::string(route_method(route_)) + ", OPTIONS");
    res->set(http::field::access_control_allow_headers, "Authorization, Content-Type");
    res->set(http::field::access_control_max_age, "600");
    res->set(http::field::vary, "Origin");
    const bool close_after = !keep_alive_ || !parser_->is_done();
    res->keep_alive(!close_after);
    phase_ = Phase::Busy;
    writing_ = true;
    set_deadline(Clock::now() + seconds(host_.limits.write_timeout_s));
    http::async_write(sock_, *res,
                      [self = shared_from_this(), res, close_after](error_code ec, size_t) {
                          self->writing_ = false;
                          self->on_written(ec, close_after);
                      });
}

void HttpConnection::on_written(error_code ec, bool close_after) {
    busy_.reset();
    if (phase_ == Phase::Closed) return;
    if (ec) return close();
    clear_deadline();
    if (close_after) return graceful_close();
    next_request(false);
}

// ---------------------------------------------------------------- closing

void HttpConnection::graceful_close() {
    // Send FIN, then read and drop what the client still sends for a moment: closing with
    // unread input would reset the connection and could destroy the response in flight.
    if (phase_ == Phase::Closed || phase_ == Phase::Closing) return;
    phase_ = Phase::Closing;
    end_generation();
    busy_.reset();
    error_code ec;
    sock_.shutdown(tcp::socket::shutdown_send, ec);
    if (ec) return close();
    set_deadline(Clock::now() + std::chrono::seconds(2));
    discard_input();
}

void HttpConnection::discard_input() {
    sock_.async_read_some(net::buffer(scratch_),
                          [self = shared_from_this()](error_code ec, size_t n) {
                              if (self->phase_ == Phase::Closed) return;
                              self->discarded_ += n;
                              if (ec || self->discarded_ > (size_t{16} << 20)) return self->close();
                              self->discard_input();
                          });
}

void HttpConnection::close() {
    if (phase_ == Phase::Closed) return;
    phase_ = Phase::Closed;
    ++timer_seq_;
    timer_.cancel();
    error_code ec;
    sock_.shutdown(tcp::socket::shutdown_both, ec);
    sock_.close(ec);
    end_generation();  // a generation still running is cancelled (Generation's destructor)
    busy_.reset();
}

void HttpConnection::end_generation() {
    gen_.reset();
    self_.reset();  // every caller runs in a handler that holds its own reference
}

// ---------------------------------------------------------------- deadlines

void HttpConnection::set_deadline(Clock::time_point t) {
    const uint64_t seq = ++timer_seq_;
    if (t == Clock::time_point::max()) {
        timer_.cancel();
        return;
    }
    timer_.expires_at(t);
    timer_.async_wait([self = shared_from_this(), seq](error_code ec) {
        if (ec || seq != self->timer_seq_) return;
        self->on_deadline();
    });
}

void HttpConnection::on_deadline() {
    switch (phase_) {
        case Phase::Header:
        case Phase::Body: {
            timed_out_ = true;  // on_read answers 408 (or closes when nothing came)
            error_code ec;
            sock_.cancel(ec);
            return;
        }
        case Phase::Idle:     // keep-alive or a new connection that sent nothing
        case Phase::Busy:     // a write the client does not take
        case Phase::Closing:  // lingering
            return close();
        case Phase::Closed:
            return;
    }
}

}  // namespace warden::server
