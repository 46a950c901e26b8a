#include "server/server.h"

#include <sys/resource.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <chrono>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "server/api.h"
#include "server/http_connection.h"
#include "util/error.h"
#include "util/log.h"

namespace warden::server {

namespace net = boost::asio;
using tcp = net::ip::tcp;
using error_code = boost::system::error_code;

namespace {

// Up to `max_connections` sockets, plus the model files and the engine's: raise the soft limit
// on open files to the hard one.
void raise_open_files_limit(int max_connections) {
    rlimit rl{};
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            spdlog::warn("could not raise the open-files limit");
    }
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < static_cast<rlim_t>(max_connections) + 64)
        spdlog::warn(
            "open-files limit {} is below --max-connections {} (+64): connections past it are "
            "refused",
            static_cast<unsigned long long>(rl.rlim_cur), max_connections);
}

}  // namespace

struct Server::Impl {
    ServerConfig cfg;
    engine::Engine& eng;
    Api api;

    // Registry of open connections (drain, cut, per-client counts). It, the prepare pool and
    // `host` are declared before the event loop: connections destroyed with the loop's pending
    // handlers unregister here.
    std::mutex reg_mu;
    std::unordered_map<uint64_t, std::weak_ptr<HttpConnection>> conns;
    std::unordered_map<std::string, int> per_client;
    uint64_t next_id = 1;

    net::thread_pool prepare_pool;
    std::shared_ptr<NotifyGate> gate = std::make_shared<NotifyGate>();
    ConnectionHost host;

    net::io_context ioc;
    std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
    net::strand<net::io_context::executor_type> accept_strand{net::make_strand(ioc)};
    tcp::acceptor acceptor{accept_strand};
    net::steady_timer accept_retry{accept_strand};

    Impl(ServerConfig c, engine::Engine& e, ModelInfo m)
        : cfg(std::move(c)),
          eng(e),
          api(e, std::move(m), cfg.api_keys, cfg.tenant_max_concurrency),
          prepare_pool(static_cast<size_t>(std::max(1, cfg.http.prepare_threads))),
          host{cfg.http, api, prepare_pool, gate,
               [this](uint64_t id, const std::string& client) { forget(id, client); }} {}

    ~Impl() {
        prepare_pool.join();
        close_gate();
    }

    void close_gate() {
        std::lock_guard lk(gate->mu);
        gate->open = false;
    }

    void forget(uint64_t id, const std::string& client) {
        std::lock_guard lk(reg_mu);
        conns.erase(id);
        auto it = per_client.find(client);
        if (it != per_client.end() && --it->second <= 0) per_client.erase(it);
    }

    void accept() {
        acceptor.async_accept(net::make_strand(ioc), [this](error_code ec, tcp::socket s) {
            if (!acceptor.is_open()) return;
            if (ec) {
                // Out of descriptors (or a transient error): back off instead of spinning.
                accept_retry.expires_after(std::chrono::milliseconds(50));
                accept_retry.async_wait([this](error_code e2) {
                    if (!e2) accept();
                });
                return;
            }
            admit(std::move(s));
            accept();
        });
    }

    void admit(tcp::socket s) {
        error_code ec;
        const auto ep = s.remote_endpoint(ec);
        if (ec) return;
        std::string client = ep.address().to_string();
        uint64_t id = 0;
        {
            std::lock_guard lk(reg_mu);
            auto it = per_client.find(client);
            if (conns.size() >= static_cast<size_t>(cfg.http.max_connections) ||
                (it != per_client.end() && it->second >= cfg.http.max_connections_per_client)) {
                s.close(ec);  // over a limit: closed at once, no response
                return;
            }
            id = next_id++;
            ++per_client[client];
            conns[id];  // reserved, so the count holds before the connection exists
        }
        s.set_option(tcp::no_delay(true), ec);
        auto c = std::make_shared<HttpConnection>(std::move(s), host, id, std::move(client));
        {
            std::lock_guard lk(reg_mu);
            conns[id] = c;
        }
        c->start();
    }

    template <class F>
    void for_each_connection(F f) {
        std::vector<std::shared_ptr<HttpConnection>> live;
        {
            std::lock_guard lk(reg_mu);
            for (auto& [id, w] : conns)
                if (auto c = w.lock()) live.push_back(std::move(c));
        }
        for (auto& c : live) f(*c);
    }
};

Server::Server(ServerConfig cfg, engine::Engine& eng, ModelInfo model)
    : impl_(std::make_unique<Impl>(std::move(cfg), eng, std::move(model))) {}

Server::~Server() = default;

int Server::bind() {
    auto& m = *impl_;
    raise_open_files_limit(m.cfg.http.max_connections);
    const std::string where = m.cfg.host + ":" + std::to_string(m.cfg.port);
    error_code ec;
    tcp::resolver resolver(m.ioc);
    const auto results =
        resolver.resolve(m.cfg.host, std::to_string(m.cfg.port), tcp::resolver::passive, ec);
    util::check(!ec && !results.empty(),
                "cannot resolve " + m.cfg.host + " (" + ec.message() + ")");
    const tcp::endpoint ep = results.begin()->endpoint();
    m.acceptor.open(ep.protocol(), ec);
    if (!ec) m.acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) m.acceptor.bind(ep, ec);
    util::check(!ec, "cannot bind " + where +
                         " (in use or not an address of this host: " + ec.message() + ")");
    // Room for a burst of connections while the event loop waits for a busy CPU; the kernel
    // caps it at net.core.somaxconn.
    m.acceptor.listen(1024, ec);
    util::check(!ec, "cannot listen on " + where + " (" + ec.message() + ")");
    m.cfg.port = m.acceptor.local_endpoint().port();
    m.accept();
    return m.cfg.port;
}

void Server::serve() {
    auto& m = *impl_;
    m.work.emplace(m.ioc.get_executor());
    auto run = [&m] {
        for (;;) {
            try {
                m.ioc.run();
                return;
            } catch (const std::exception& e) {
                spdlog::error("event loop: {}", e.what());
            }
        }
    };
    std::vector<std::thread> threads;
    for (int i = 1; i < std::max(1, m.cfg.http.io_threads); ++i) threads.emplace_back(run);
    run();
    for (auto& t : threads) t.join();
    m.close_gate();
}

void Server::drain_and_stop(int max_wait_s) {
    auto& m = *impl_;
    using Clock = std::chrono::steady_clock;
    const auto deadline = Clock::now() + std::chrono::seconds(max_wait_s);
    m.api.begin_drain();
    m.eng.begin_drain();
    net::post(m.accept_strand, [&m] {
        error_code ec;
        m.acceptor.close(ec);
        m.accept_retry.cancel();
    });
    m.for_each_connection([](HttpConnection& c) { c.drain(); });
    auto wait_until = [&m](Clock::time_point t) {
        while (m.api.busy() > 0 && Clock::now() < t)
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
    };
    wait_until(deadline);
    if (m.api.busy() > 0) {
        spdlog::warn("drain timeout: cutting {} request(s) still running", m.api.busy());
        m.for_each_connection([](HttpConnection& c) { c.cut(); });
        wait_until(Clock::now() + std::chrono::seconds(1));
    }
    m.work.reset();
    m.ioc.stop();
}

}  // namespace warden::server
