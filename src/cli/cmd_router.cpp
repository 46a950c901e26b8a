// `warden router`: the OpenAI-compatible entry point in front of prefill and decode servers
// (router/router.h). Holds no model. SIGTERM/SIGINT stop it.
#include <pthread.h>

#include <csignal>
#include <cstdio>
#include <sstream>
#include <thread>

#include "cli/commands.h"
#include "router/router.h"
#include "util/error.h"

namespace warden::cli {

namespace {

std::vector<std::string> split_urls(const std::vector<std::string>& in) {
    std::vector<std::string> out;
    for (const std::string& s : in) {
        std::stringstream ss(s);
        for (std::string u; std::getline(ss, u, ',');)
            if (!u.empty()) out.push_back(u);
    }
    return out;
}

}  // namespace

void register_router(CLI::App& app, int& rc) {
    auto cfg = std::make_shared<router::RouterConfig>();
    auto decode = std::make_shared<std::vector<std::string>>();
    auto prefill = std::make_shared<std::vector<std::string>>();
    auto prefill_kv = std::make_shared<std::vector<std::string>>();
    auto health_s = std::make_shared<double>(1.0);
    CLI::App* sub = app.add_subcommand(
        "router", "OpenAI-compatible router in front of prefill and decode servers (no model)");
    sub->add_option("--decode", *decode, "decode servers: http://HOST:PORT[,...]")->required();
    sub->add_option("--prefill", *prefill,
                    "prefill servers (health-checked; decode servers fetch from them): "
                    "http://HOST:PORT[,...]");
    sub->add_option("--prefill-kv", *prefill_kv,
                    "the --prefill servers' KV endpoints (their --kv-listen), HOST:PORT[,...] in "
                    "the same order: the router then chooses each request's prefill server "
                    "(prefix/user affinity, else least loaded) and names it to the decode server");
    sub->add_option("--host", cfg->host, "address to bind (default 127.0.0.1)");
    sub->add_option("--port", cfg->port, "port (default 8080; 0 picks a free one)")
        ->check(CLI::Range(0, 65535));
    sub->add_option("--health-interval", *health_s,
                    "seconds between backend health checks (default 1)")
        ->check(CLI::Range(0.05, 3600.0));
    sub->add_option("--affinity-slack", cfg->affinity_slack,
                    "requests in flight a prefix/user-affine decode server may have above the "
                    "least loaded one before the least loaded is chosen (default 4)")
        ->check(CLI::Range(0, 1 << 20));
    sub->callback([=, &rc] {
        cfg->decode = split_urls(*decode);
        cfg->prefill = split_urls(*prefill);
        cfg->prefill_kv = split_urls(*prefill_kv);
        cfg->health_period = std::chrono::milliseconds(static_cast<int64_t>(*health_s * 1000));
        util::check(cfg->host == "127.0.0.1" || cfg->host == "localhost" || cfg->host == "::1",
                    "warden router serves loopback only (it forwards without API keys)");
        sigset_t sigs;
        sigemptyset(&sigs);
        sigaddset(&sigs, SIGTERM);
        sigaddset(&sigs, SIGINT);
        pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
        std::signal(SIGPIPE, SIG_IGN);
        router::Router r(*cfg);
        const int port = r.bind();
        std::thread sig([&] {
            int s = 0;
            sigwait(&sigs, &s);
            r.stop();
        });
        std::fprintf(stderr, "warden router: http://%s:%d -> %zu decode, %zu prefill servers\n",
                     cfg->host.c_str(), port, cfg->decode.size(), cfg->prefill.size());
        std::fflush(stderr);
        r.serve();
        pthread_kill(sig.native_handle(), SIGTERM);
        sig.join();
        std::fprintf(stderr, "warden router: stopped\n");
        rc = 0;
    });
}

}  // namespace warden::cli
