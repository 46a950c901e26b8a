#include "server/server.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "server/choice.h"
#include "server/listen_backlog.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/log.h"

namespace warden::server {

using json = nlohmann::json;

namespace {

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

void send_error(httplib::Response& res, const ApiError& e) {
    res.status = e.status;
    res.set_content(dump(e.body()), "application/json");
}

int64_t now_s() {
    return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

// One request's claim on its tenant's concurrency and on the drain counter.
struct TenantSlot {
    Server* s;
    std::string tenant;
    TenantSlot(Server* srv, std::string t) : s(srv), tenant(std::move(t)) {}
    ~TenantSlot() {
        std::lock_guard lk(s->tenants_mu_);
        if (--s->tenant_in_flight_[tenant] == 0) s->tenant_in_flight_.erase(tenant);
    }
};

// Everything one completion request needs while it runs (shared with the SSE provider).
struct Generation {
    bool chat = false;
    std::string id, model;
    int64_t created = 0;
    CompletionRequest req;
    std::vector<Choice> choices;
    int64_t prompt_tokens = 0;
    std::shared_ptr<TenantSlot> slot;
    std::shared_ptr<std::atomic<int64_t>> in_flight_guard;
    bool finished_sent = false;

    bool all_done() const {
        return std::all_of(choices.begin(), choices.end(), [](const Choice& c) { return c.done; });
    }
    void cancel_all() {
        for (auto& c : choices) c.stream->cancel();
    }
    // Pulls every available event; waits up to `wait` when none is ready. True if any arrived.
    bool pump(std::chrono::milliseconds wait) {
        bool any = false;
        engine::Event ev;
        for (auto& c : choices)
            while (!c.done && c.stream->next(ev, std::chrono::milliseconds(0))) {
                c.on_event(std::move(ev));
                any = true;
            }
        if (any) return true;
        for (auto& c : choices)
            if (!c.done) {
                if (c.stream->next(ev, wait)) {
                    c.on_event(std::move(ev));
                    return true;
                }
                return false;
            }
        return false;
    }
    json usage() const {
        // Cached prompt tokens per distinct prompt (the n samples of one prompt count it once,
        // as prompt_tokens does): its first choice's count.
        int64_t completion = 0, cached = 0;
        for (const auto& c : choices) {
            completion += c.n_tokens;
            if (c.index % req.n == 0) cached += c.result.cached_tokens;
        }
        return json{{"prompt_tokens", prompt_tokens},
                    {"completion_tokens", completion},
                    {"total_tokens", prompt_tokens + completion},
                    {"prompt_tokens_details", json{{"cached_tokens", cached}}}};
    }
    json timing() const {
        engine::Timing t;
        for (const auto& c : choices) {
            const auto& x = c.result.timing;
            t.queue_ms = std::max(t.queue_ms, x.queue_ms);
            t.prefill_ms = std::max(t.prefill_ms, x.prefill_ms);
            t.ttft_ms = std::max(t.ttft_ms, x.ttft_ms);
            t.tpot_ms = std::max(t.tpot_ms, x.tpot_ms);
            t.total_ms = std::max(t.total_ms, x.total_ms);
        }
        return timing_json(t);
    }
    const Choice* failed() const {
        for (const auto& c : choices)
            if (c.error_status) return &c;
        return nullptr;
    }
    json full_response() const {
        json out;
        out["id"] = id;
        out["object"] = chat ? "chat.completion" : "text_completion";
        out["created"] = created;
        out["model"] = model;
        json cs = json::array();
        for (const auto& c : choices) {
            json j;
            j["index"] = c.index;
            if (chat) j["message"] = json{{"role", "assistant"}, {"content", c.text}};
            else j["text"] = c.text;
            j["logprobs"] = c.logprobs_json(0, c.lp.size());
            j["finish_reason"] = c.finish;
            cs.push_back(j);
        }
        out["choices"] = cs;
        out["usage"] = usage();
        out["warden_timing"] = timing();
        return out;
    }
    // SSE chunks for whatever became sendable; empty when nothing did.
    std::string sse_chunks() {
        std::string out;
        for (auto& c : choices) {
            std::string piece;
            size_t lp_from = c.lp_sent, lp_to = c.lp.size();
            const bool first = !c.started;
            c.started = true;
            const bool have_text = c.take_sendable(piece);
            const bool finishing = c.done && !c.finish_sent;
            if (c.error_status && finishing) {
                c.finish_sent = true;
                out += "data: " + dump(ApiError(c.error_status, c.error).body()) + "\n\n";
                continue;
            }
            if (!first && !have_text && lp_to == lp_from && !finishing) continue;
            c.lp_sent = lp_to;
            json ch;
            ch["id"] = id;
            ch["object"] = chat ? "chat.completion.chunk" : "text_completion";
            ch["created"] = created;
            ch["model"] = model;
            json cj;
            cj["index"] = c.index;
            if (chat) {
                json d = json::object();
                if (first) d["role"] = "assistant";
                if (have_text || first) d["content"] = piece;
                cj["delta"] = d;
            } else {
                cj["text"] = piece;
            }
            cj["logprobs"] = c.logprobs_json(lp_from, lp_to);
            cj["finish_reason"] = finishing ? json(c.finish) : json(nullptr);
            ch["choices"] = json::array({cj});
            if (finishing) {
                c.finish_sent = true;
                ch["warden_timing"] = timing_json(c.result.timing);
            }
            out += "data: " + dump(ch) + "\n\n";
        }
        return out;
    }
};

Server::Server(ServerConfig cfg, engine::Engine& eng, ModelInfo model)
    : cfg_(std::move(cfg)), eng_(eng), model_(std::move(model)), http_(std::make_unique<httplib::Server>()) {
    const int threads = cfg_.http_threads;
    http_->new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
    http_->set_payload_max_length(cfg_.max_body_bytes);
    http_->set_read_timeout(cfg_.read_timeout_s, 0);
    http_->set_write_timeout(cfg_.read_timeout_s, 0);
    http_->set_keep_alive_timeout(5);
    routes();
}

Server::~Server() = default;

int Server::bind() {
    if (cfg_.port == 0) {
        const int p = http_->bind_to_any_port(cfg_.host);
        util::check(p > 0, "cannot bind " + cfg_.host);
        cfg_.port = p;
    } else {
        util::check(http_->bind_to_port(cfg_.host, cfg_.port),
                    "cannot bind " + cfg_.host + ":" + std::to_string(cfg_.port) + " (in use or not an address of this host)");
    }
    // Room for a burst of connections while the accept thread waits for a busy CPU
    // (server/listen_backlog.h); without it the server still works, with httplib's 5.
    if (!raise_listen_backlog(cfg_.port, 1024))
        spdlog::warn("could not raise the listen backlog of port {}", cfg_.port);
    return cfg_.port;
}

void Server::serve() { http_->listen_after_bind(); }

void Server::drain_and_stop(int max_wait_s) {
    draining_ = true;
    eng_.begin_drain();
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(max_wait_s);
    (void)eng_.wait_idle(std::chrono::seconds(max_wait_s));
    while (in_flight_.load() > 0 && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    http_->stop();
}

std::string Server::authenticate(const std::string& authorization) const {
    if (cfg_.api_keys.empty()) return "default";
    const std::string prefix = "Bearer ";
    if (authorization.size() <= prefix.size() || authorization.compare(0, prefix.size(), prefix) != 0)
        throw ApiError(401, "missing bearer API key (Authorization: Bearer KEY)", "", "invalid_api_key");
    auto it = cfg_.api_keys.find(authorization.substr(prefix.size()));
    if (it == cfg_.api_keys.end()) throw ApiError(401, "invalid API key", "", "invalid_api_key");
    return it->second;
}

void Server::routes() {
    http_->set_error_handler([](const httplib::Request&, httplib::Response& res) {
        if (!res.body.empty()) return;
        const std::string msg = res.status == 404 ? "no such endpoint"
                                : res.status == 413 ? "request body too large"
                                : res.status == 405 ? "method not allowed"
                                : res.status == 414 ? "request URI too long"
                                                    : "bad request";
        send_error(res, ApiError(res.status, msg));
    });
    http_->set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        try {
            std::rethrow_exception(ep);
        } catch (const ApiError& e) {
            send_error(res, e);
        } catch (const std::exception& e) {
            send_error(res, ApiError(500, std::string("internal error: ") + e.what()));
        } catch (...) {
            send_error(res, ApiError(500, "internal error"));
        }
    });

    http_->Get("/health", [this](const httplib::Request&, httplib::Response& res) {
        if (draining_) return send_error(res, ApiError(503, "draining"));
        res.set_content(R"({"status":"ok"})", "application/json");
    });
    http_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
        res.set_content(eng_.metrics().prometheus(), "text/plain; version=0.0.4");
    });
    http_->Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
        try {
            (void)authenticate(req.get_header_value("Authorization"));
        } catch (const ApiError& e) {
            return send_error(res, e);
        }
        json m{{"id", model_.id}, {"object", "model"}, {"created", now_s()}, {"owned_by", "warden"},
               {"max_model_len", std::min(model_.max_ctx, model_.kv_tokens)}};
        res.set_content(dump(json{{"object", "list"}, {"data", json::array({m})}}), "application/json");
    });

    auto generate = [this](bool chat) {
        return [this, chat](const httplib::Request& hreq, httplib::Response& res) {
            std::string tenant = "-";
            try {
                if (draining_) throw ApiError(503, "the server is shutting down", "", "draining");
                tenant = authenticate(hreq.get_header_value("Authorization"));
                json body;
                try {
                    body = json::parse(hreq.body);
                } catch (const json::exception&) {
                    throw ApiError(400, "the body is not valid JSON", "", "invalid_json");
                }
                auto g = std::make_shared<Generation>();
                g->chat = chat;
                g->req = parse_request(body, chat, model_);
                g->model = model_.id;
                g->created = now_s();
                {
                    std::lock_guard lk(tenants_mu_);
                    int& n = tenant_in_flight_[tenant];
                    if (n >= cfg_.tenant_max_concurrency)
                        throw ApiError(429, "too many concurrent requests for tenant '" + tenant + "'", "",
                                       "tenant_concurrency_limit");
                    ++n;
                }
                g->slot = std::make_shared<TenantSlot>(this, tenant);
                ++in_flight_;
                g->in_flight_guard = std::shared_ptr<std::atomic<int64_t>>(&in_flight_, [](std::atomic<int64_t>* p) { --*p; });
                // Submit every choice (prompt i, sample j); all or nothing.
                const auto stop_ids = model_.tok->stop_ids();
                int index = 0;
                for (size_t pi = 0; pi < g->req.prompts.size(); ++pi) {
                    g->prompt_tokens += static_cast<int64_t>(g->req.prompts[pi].size());
                    for (int j = 0; j < g->req.n; ++j) {
                        engine::Request er;
                        er.prompt = g->req.prompts[pi];
                        er.max_new_tokens = g->req.max_tokens;
                        er.sampling = g->req.sampling;
                        er.sampling.seed += static_cast<uint64_t>(j);
                        if (!g->req.ignore_eos) er.stop_ids = stop_ids;
                        er.top_logprobs = g->req.top_logprobs;
                        er.tenant = tenant;
                        er.cache_salt = g->req.cache_salt;
                        auto sub = eng_.submit(std::move(er));
                        if (sub.status != engine::SubmitStatus::Ok) {
                            g->cancel_all();
                            if (sub.status == engine::SubmitStatus::QueueFull)
                                throw ApiError(429, "the request queue is full; retry later", "", "queue_full");
                            throw ApiError(503, "the server is shutting down", "", "draining");
                        }
                        g->choices.emplace_back(index++, *model_.tok, sub.stream, stop_ids, g->req.stop, g->req.ignore_eos, chat,
                                                g->req.top_logprobs);
                    }
                }
                g->id = std::string(chat ? "chatcmpl-" : "cmpl-") + std::to_string(g->choices.front().stream->id());
                if (!g->req.stream) {
                    while (!g->all_done()) g->pump(std::chrono::milliseconds(1000));
                    if (const Choice* f = g->failed()) throw ApiError(f->error_status, f->error);
                    res.set_content(dump(g->full_response()), "application/json");
                    return;
                }
                res.set_header("Cache-Control", "no-cache");
                res.set_chunked_content_provider(
                    "text/event-stream",
                    [g](size_t, httplib::DataSink& sink) -> bool {
                        if (g->finished_sent) return false;
                        if (!g->all_done()) g->pump(std::chrono::milliseconds(100));
                        const std::string out = g->sse_chunks();
                        if (!out.empty() && !sink.write(out.data(), out.size())) return false;
                        if (g->all_done()) {
                            std::string tail;
                            if (g->req.include_usage) {
                                json u{{"id", g->id},
                                       {"object", g->chat ? "chat.completion.chunk" : "text_completion"},
                                       {"created", g->created},
                                       {"model", g->model},
                                       {"choices", json::array()},
                                       {"usage", g->usage()},
                                       {"warden_timing", g->timing()}};
                                tail += "data: " + dump(u) + "\n\n";
                            }
                            tail += "data: [DONE]\n\n";
                            g->finished_sent = true;
                            if (!sink.write(tail.data(), tail.size())) return false;
                            sink.done();
                            return true;
                        }
                        return sink.is_writable();
                    },
                    [g](bool) {
                        if (!g->all_done()) g->cancel_all();  // client went away: a message to the scheduler
                    });
            } catch (const ApiError& e) {
                if (e.status == 429 || e.status == 401 || e.status == 503)
                    eng_.metrics().count_abort(tenant, e.code.empty() ? std::to_string(e.status) : e.code);
                send_error(res, e);
            }
        };
    };
    http_->Post("/v1/completions", generate(false));
    http_->Post("/v1/chat/completions", generate(true));
}

}  // namespace warden::server
