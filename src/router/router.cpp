#include "router/router.h"

#include <sys/socket.h>
#include <sys/time.h>

#include <boost/asio/connect.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>
#include <thread>

#include "server/api_error.h"
#include "util/error.h"
#include "util/log.h"

namespace warden::router {

namespace beast = boost::beast;
namespace http = beast::http;
using tcp = boost::asio::ip::tcp;

namespace {

constexpr size_t kKeyChars = 512;  // prompt characters that make a routing key

void set_timeouts(tcp::socket& s, std::chrono::seconds t) {
    timeval tv{};
    tv.tv_sec = static_cast<time_t>(t.count());
    setsockopt(s.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(s.native_handle(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

void reply(tcp::socket& s, unsigned status, const std::string& body, const char* type) {
    http::response<http::string_body> res{static_cast<http::status>(status), 11};
    res.set(http::field::server, "warden-router");
    res.set(http::field::content_type, type);
    res.keep_alive(false);
    res.body() = body;
    res.prepare_payload();
    beast::error_code ec;
    http::write(s, res, ec);
}

void reply_error(tcp::socket& s, const server::ApiError& e) {
    reply(s, static_cast<unsigned>(e.status), e.body().dump(), "application/json");
}

// Relays the backend's response (head, then body as it arrives: SSE streams stay streams).
// Returns false when the backend failed before any byte reached the client.
bool relay(tcp::socket& backend, tcp::socket& client, bool& sent_any) {
    beast::flat_buffer bbuf;
    http::response_parser<http::buffer_body> p;
    p.body_limit(boost::none);
    beast::error_code ec;
    http::read_header(backend, bbuf, p, ec);
    if (ec) return false;
    http::response<http::buffer_body> res{p.get().result(), 11};
    for (const auto& f : p.get()) {
        if (f.name() == http::field::content_length || f.name() == http::field::transfer_encoding ||
            f.name() == http::field::connection)
            continue;
        res.set(f.name_string(), f.value());
    }
    res.keep_alive(false);
    res.chunked(true);
    http::response_serializer<http::buffer_body> sr{res};
    res.body().data = nullptr;
    res.body().more = true;
    http::write_header(client, sr, ec);
    sent_any = true;
    if (ec) return true;
    char buf[16384];
    while (!p.is_done()) {
        p.get().body().data = buf;
        p.get().body().size = sizeof buf;
        http::read_some(backend, bbuf, p, ec);  // what has arrived: SSE events one by one
        if (ec == http::error::need_buffer) ec = {};
        if (ec) break;  // the backend died mid-response: the client sees the stream end
        const size_t n = sizeof buf - p.get().body().size;
        if (n == 0) continue;
        res.body().data = buf;
        res.body().size = n;
        res.body().more = true;
        http::write(client, sr, ec);
        if (ec == http::error::need_buffer) ec = {};
        if (ec) return true;  // the client left
    }
    res.body().data = nullptr;
    res.body().more = false;
    http::write(client, sr, ec);
    return true;
}

}  // namespace

std::string routing_key(const std::string& body) {
    const auto j = nlohmann::json::parse(body, nullptr, false);
    if (!j.is_object()) return {};
    if (auto u = j.find("user"); u != j.end() && u->is_string() && !u->get<std::string>().empty())
        return "user:" + u->get<std::string>();
    std::string text;
    if (auto m = j.find("messages"); m != j.end())
        text = m->dump();
    else if (auto p = j.find("prompt"); p != j.end())
        text = p->is_string() ? p->get<std::string>() : p->dump();
    if (text.empty()) return {};
    return "prefix:" + text.substr(0, kKeyChars);
}

Router::Router(RouterConfig cfg)
    : cfg_(std::move(cfg)),
      pool_(
          [&] {
              std::vector<Backend> v;
              for (const auto& u : cfg_.decode) v.push_back(parse_backend(u));
              return v;
          }(),
          [&] {
              util::check(cfg_.prefill_kv.empty() || cfg_.prefill_kv.size() == cfg_.prefill.size(),
                          "--prefill-kv needs one KV endpoint per --prefill server, in order");
              std::vector<Backend> v;
              for (size_t i = 0; i < cfg_.prefill.size(); ++i) {
                  v.push_back(parse_backend(cfg_.prefill[i]));
                  if (!cfg_.prefill_kv.empty()) v.back().kv = cfg_.prefill_kv[i];
              }
              return v;
          }(),
          cfg_.affinity_slack) {}

Router::~Router() {
    stop();
}

int Router::bind() {
    beast::error_code ec;
    const auto addr = boost::asio::ip::make_address(cfg_.host, ec);
    util::check(!ec, "warden router: bad --host '" + cfg_.host + "'");
    acceptor_ = std::make_unique<tcp::acceptor>(io_);
    tcp::endpoint ep(addr, static_cast<uint16_t>(cfg_.port));
    acceptor_->open(ep.protocol(), ec);
    if (!ec) acceptor_->set_option(boost::asio::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_->bind(ep, ec);
    if (!ec) acceptor_->listen(boost::asio::socket_base::max_listen_connections, ec);
    util::check(!ec, "warden router: cannot listen on " + cfg_.host + ":" +
                         std::to_string(cfg_.port) + ": " + ec.message());
    pool_.start_health_checks(cfg_.health_period);
    return acceptor_->local_endpoint().port();
}

void Router::stop() {
    if (stop_.exchange(true)) return;
    // Wakes the blocking accept() (the acceptor itself is closed by its destructor).
    if (acceptor_) ::shutdown(acceptor_->native_handle(), SHUT_RDWR);
}

void Router::serve() {
    while (!stop_) {
        tcp::socket sock(io_);
        beast::error_code ec;
        acceptor_->accept(sock, ec);
        if (ec) {
            if (stop_) break;
            continue;
        }
        if (connections_ >= 4096) continue;  // closes it
        ++connections_;
        std::thread([this, s = std::move(sock)]() mutable {
            handle(std::move(s));
            --connections_;
        }).detach();
    }
    // Let the connection threads finish (bounded by their socket timeouts).
    for (int i = 0; i < 300 && connections_ > 0; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
}

void Router::handle(tcp::socket sock) {
    set_timeouts(sock, std::chrono::seconds(30));
    beast::flat_buffer buf;
    http::request_parser<http::string_body> parser;
    parser.body_limit(cfg_.max_body);
    beast::error_code ec;
    http::read(sock, buf, parser, ec);
    if (ec == http::error::body_limit) {
        reply_error(sock, server::ApiError(413, "request body too large"));
        return;
    }
    if (ec) {
        if (ec != http::error::end_of_stream)
            reply_error(sock, server::ApiError(400, "malformed HTTP request"));
        return;
    }
    set_timeouts(sock, cfg_.io_timeout);
    auto& req = parser.get();
    const std::string target(req.target());
    const std::string path = target.substr(0, target.find('?'));
    const bool completion = path == "/v1/completions" || path == "/v1/chat/completions";
    if (path == "/health" && req.method() == http::verb::get) {
        const std::string h = pool_.health_json();
        reply(sock, h.find("\"ok\"") != std::string::npos ? 200 : 503, h, "application/json");
        return;
    }
    if (path == "/metrics" && req.method() == http::verb::get) {
        reply(sock, 200, pool_.metrics(), "text/plain; version=0.0.4");
        return;
    }
    if (!completion && path != "/v1/models") {
        reply_error(sock, server::ApiError(404, "no route " + path, "", "not_found"));
        return;
    }
    if ((completion && req.method() != http::verb::post) ||
        (!completion && req.method() != http::verb::get)) {
        reply_error(sock, server::ApiError(405, "method not allowed", "", "method_not_allowed"));
        return;
    }
    const std::string key = completion ? routing_key(req.body()) : std::string();
    // The prefill server, when the router knows their KV endpoints (else the decode server
    // chooses); a client's own X-Warden-Prefill is never passed on.
    req.erase("X-Warden-Prefill");
    std::optional<size_t> pi;
    if (completion && !cfg_.prefill_kv.empty()) pi = pool_.choose_prefill(key);
    if (pi) req.set("X-Warden-Prefill", pool_.prefill(*pi).kv);
    struct PrefillDone {
        BackendPool& pool;
        std::optional<size_t> i;
        ~PrefillDone() {
            if (i) pool.prefill_done(*i);
        }
    } prefill_done{pool_, pi};
    // Each decode server at most once; a server that fails before answering is marked down.
    for (size_t attempt = 0; attempt < cfg_.decode.size(); ++attempt) {
        const auto i = pool_.choose(key);
        if (!i) break;
        const Backend b = pool_.decode(*i);
        tcp::socket bs(io_);
        bool sent_any = false, ok = false;
        try {
            tcp::resolver r(io_);
            boost::asio::connect(bs, r.resolve(b.host, b.port));
            set_timeouts(bs, cfg_.io_timeout);
            http::request<http::string_body> fwd = req;
            fwd.set(http::field::host, b.host + ":" + b.port);
            fwd.keep_alive(false);
            fwd.prepare_payload();
            http::write(bs, fwd);
            ok = relay(bs, sock, sent_any);
        } catch (const std::exception&) {
            ok = false;
        }
        pool_.done(*i, !ok);
        if (ok || sent_any) return;
        spdlog::warn("router: decode {} failed before answering; trying another", b.url);
    }
    reply_error(sock, server::ApiError(503, "no decode server available", "", "no_backend"));
}

}  // namespace warden::router
