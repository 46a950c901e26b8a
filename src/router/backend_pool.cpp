#include "router/backend_pool.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include "kv/keyed_hash.h"
#include "util/error.h"
#include "util/log.h"

namespace warden::router {

namespace beast = boost::beast;
namespace http = beast::http;
using tcp = boost::asio::ip::tcp;

Backend parse_backend(const std::string& url) {
    std::string rest = url;
    const std::string scheme = "http://";
    if (rest.rfind(scheme, 0) == 0) rest = rest.substr(scheme.size());
    if (!rest.empty() && rest.back() == '/') rest.pop_back();
    const size_t colon = rest.rfind(':');
    util::check(colon != std::string::npos && colon > 0 && colon + 1 < rest.size() &&
                    rest.find('/') == std::string::npos,
                "backend URL must be http://HOST:PORT (got '" + url + "')");
    Backend b;
    b.url = url;
    b.host = rest.substr(0, colon);
    b.port = rest.substr(colon + 1);
    util::check(b.port.find_first_not_of("0123456789") == std::string::npos,
                "backend URL has a bad port: '" + url + "'");
    return b;
}

int http_get_status(const std::string& host, const std::string& port, const std::string& path,
                    std::chrono::milliseconds timeout) {
    try {
        boost::asio::io_context io;
        beast::tcp_stream s(io);
        tcp::resolver r(io);
        int status = 0;
        s.expires_after(timeout);
        auto results = r.resolve(host, port);
        s.async_connect(results, [&](beast::error_code ec, const tcp::endpoint&) {
            if (ec) return;
            auto req = std::make_shared<http::request<http::empty_body>>(http::verb::get, path, 11);
            req->set(http::field::host, host);
            http::async_write(s, *req, [&, req](beast::error_code ec2, size_t) {
                if (ec2) return;
                auto buf = std::make_shared<beast::flat_buffer>();
                auto res = std::make_shared<http::response<http::string_body>>();
                http::async_read(s, *buf, *res, [&, buf, res](beast::error_code ec3, size_t) {
                    if (!ec3) status = static_cast<int>(res->result_int());
                });
            });
        });
        io.run();
        return status;
    } catch (const std::exception&) {
        return 0;
    }
}

BackendPool::BackendPool(std::vector<Backend> decode, std::vector<Backend> prefill, int slack)
    : decode_(std::move(decode)), prefill_(std::move(prefill)), slack_(slack) {
    util::check(!decode_.empty(), "warden router needs at least one --decode server");
}

BackendPool::~BackendPool() {
    stop_ = true;
    cv_.notify_all();
    if (checker_.joinable()) checker_.join();
}

void BackendPool::start_health_checks(std::chrono::milliseconds period) {
    period_ = period;
    check_all();
    checker_ = std::thread([this] {
        std::mutex m;
        while (!stop_) {
            std::unique_lock lk(m);
            cv_.wait_for(lk, period_, [&] { return stop_.load(); });
            if (!stop_) check_all();
        }
    });
}

void BackendPool::check_all() {
    std::vector<std::pair<std::string, std::string>> d, p;
    {
        std::lock_guard lk(mu_);
        for (const auto& b : decode_) d.emplace_back(b.host, b.port);
        for (const auto& b : prefill_) p.emplace_back(b.host, b.port);
    }
    std::vector<bool> dh, ph;
    for (auto& [h, port] : d) dh.push_back(http_get_status(h, port, "/health", period_) == 200);
    for (auto& [h, port] : p) ph.push_back(http_get_status(h, port, "/health", period_) == 200);
    std::lock_guard lk(mu_);
    for (size_t i = 0; i < dh.size(); ++i) {
        if (decode_[i].healthy != dh[i])
            spdlog::info("router: decode {} is {}", decode_[i].url, dh[i] ? "up" : "down");
        decode_[i].healthy = dh[i];
    }
    for (size_t i = 0; i < ph.size(); ++i) {
        if (prefill_[i].healthy != ph[i])
            spdlog::info("router: prefill {} is {}", prefill_[i].url, ph[i] ? "up" : "down");
        prefill_[i].healthy = ph[i];
    }
}

std::optional<size_t> BackendPool::pick(std::vector<Backend>& list, const std::string& key,
                                        const std::string& prefix, std::string* reason) {
    // Prefill servers qualify only with a known KV endpoint (what the decode server is told).
    const auto eligible = [&](size_t i) {
        return list[i].healthy && (prefix.empty() || !list[i].kv.empty());
    };
    int least = INT32_MAX;
    std::optional<size_t> least_i;
    for (size_t i = 0; i < list.size(); ++i)
        if (eligible(i) && list[i].in_flight < least) {
            least = list[i].in_flight;
            least_i = i;
        }
    if (!least_i) {
        ++decisions_[prefix + "no_backend"];
        return std::nullopt;
    }
    size_t chosen = *least_i;
    std::string why = "least_loaded";
    if (!key.empty()) {
        // Rendezvous hashing: the eligible server with the highest hash of (key, url).
        uint64_t best = 0;
        std::optional<size_t> aff;
        for (size_t i = 0; i < list.size(); ++i) {
            if (!eligible(i)) continue;
            const std::string k = key + '\0' + list[i].url;
            const uint64_t h = kv::siphash24(
                kv::HashKey{1, 2}, std::span(reinterpret_cast<const uint8_t*>(k.data()), k.size()));
            if (!aff || h > best) {
                best = h;
                aff = i;
            }
        }
        if (aff && list[*aff].in_flight <= least + slack_) {
            chosen = *aff;
            why = "affinity";
        } else {
            why = "affinity_overloaded";
        }
    }
    ++list[chosen].in_flight;
    ++list[chosen].routed;
    ++decisions_[prefix + why];
    if (reason) *reason = why;
    return chosen;
}

std::optional<size_t> BackendPool::choose(const std::string& key, std::string* reason) {
    std::lock_guard lk(mu_);
    return pick(decode_, key, "", reason);
}

std::optional<size_t> BackendPool::choose_prefill(const std::string& key) {
    std::lock_guard lk(mu_);
    return pick(prefill_, key, "prefill_", nullptr);
}

void BackendPool::prefill_done(size_t i) {
    std::lock_guard lk(mu_);
    --prefill_[i].in_flight;
}

Backend BackendPool::prefill(size_t i) const {
    std::lock_guard lk(mu_);
    return prefill_[i];
}

void BackendPool::done(size_t i, bool failed) {
    std::lock_guard lk(mu_);
    --decode_[i].in_flight;
    if (failed) {
        ++decode_[i].failures;
        decode_[i].healthy = false;  // until the next health check says otherwise
    }
}

Backend BackendPool::decode(size_t i) const {
    std::lock_guard lk(mu_);
    return decode_[i];
}

bool BackendPool::any_prefill_healthy() const {
    std::lock_guard lk(mu_);
    for (const auto& b : prefill_)
        if (b.healthy) return true;
    return prefill_.empty();
}

std::string BackendPool::metrics() const {
    std::lock_guard lk(mu_);
    std::string o;
    o += "# HELP warden_router_backend_up backend health (1 up, 0 down)\n"
         "# TYPE warden_router_backend_up gauge\n";
    for (const auto& b : decode_)
        o += "warden_router_backend_up{role=\"decode\",url=\"" + b.url + "\"} " +
             (b.healthy ? "1" : "0") + "\n";
    for (const auto& b : prefill_)
        o += "warden_router_backend_up{role=\"prefill\",url=\"" + b.url + "\"} " +
             (b.healthy ? "1" : "0") + "\n";
    o += "# HELP warden_router_in_flight requests forwarded and not finished\n"
         "# TYPE warden_router_in_flight gauge\n";
    for (const auto& b : decode_)
        o += "warden_router_in_flight{url=\"" + b.url + "\"} " + std::to_string(b.in_flight) + "\n";
    for (const auto& b : prefill_)
        o += "warden_router_in_flight{url=\"" + b.url + "\"} " + std::to_string(b.in_flight) + "\n";
    o += "# HELP warden_router_routed_total requests sent to each backend (prefill: chosen for "
         "the request's prompt)\n"
         "# TYPE warden_router_routed_total counter\n";
    for (const auto* list : {&decode_, &prefill_})
        for (const auto& b : *list)
            o += "warden_router_routed_total{url=\"" + b.url + "\"} " + std::to_string(b.routed) +
                 "\n";
    o += "# HELP warden_router_decisions_total routing decisions by reason\n"
         "# TYPE warden_router_decisions_total counter\n";
    for (const auto& [why, n] : decisions_)
        o += "warden_router_decisions_total{reason=\"" + why + "\"} " + std::to_string(n) + "\n";
    return o;
}

std::string BackendPool::health_json() const {
    std::lock_guard lk(mu_);
    nlohmann::json d = nlohmann::json::array(), p = nlohmann::json::array();
    bool any = false;
    for (const auto& b : decode_) {
        d.push_back({{"url", b.url}, {"healthy", b.healthy}, {"in_flight", b.in_flight}});
        any = any || b.healthy;
    }
    for (const auto& b : prefill_)
        p.push_back({{"url", b.url}, {"healthy", b.healthy}, {"in_flight", b.in_flight}});
    return nlohmann::json{{"status", any ? "ok" : "no_backend"}, {"decode", d}, {"prefill", p}}
        .dump();
}

}  // namespace warden::router
