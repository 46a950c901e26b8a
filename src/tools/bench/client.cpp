#include "tools/bench/client.h"

#include <httplib.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "util/error.h"

namespace warden::tools::bench {

namespace {

double ms_between(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace

Endpoint Endpoint::parse(const std::string& url) {
    std::string u = url;
    if (u.find("://") == std::string::npos) u = "http://" + u;
    util::check(u.rfind("http://", 0) == 0, "--url: only http:// is supported, got '" + url + "'");
    const size_t slash = u.find('/', 7);
    Endpoint ep;
    ep.host_port = u.substr(0, slash);
    util::check(ep.host_port.size() > 7, "--url: no host in '" + url + "'");
    std::string path = slash == std::string::npos ? "" : u.substr(slash);
    while (!path.empty() && path.back() == '/') path.pop_back();
    if (path.size() >= 3 && path.compare(path.size() - 3, 3, "/v1") == 0)
        path.resize(path.size() - 3);
    ep.prefix = path;
    return ep;
}

void SseParser::feed(const char* data, size_t n, std::vector<std::string>& events) {
    buf_.append(data, n);
    // Events end with a blank line; accept \n\n and \r\n\r\n.
    while (true) {
        size_t end = buf_.find("\n\n");
        size_t skip = 2;
        const size_t crlf = buf_.find("\r\n\r\n");
        if (crlf != std::string::npos && (end == std::string::npos || crlf < end)) {
            end = crlf;
            skip = 4;
        }
        if (end == std::string::npos) return;
        const std::string ev = buf_.substr(0, end);
        buf_.erase(0, end + skip);
        std::string payload;
        size_t i = 0;
        while (i < ev.size()) {
            size_t j = ev.find('\n', i);
            if (j == std::string::npos) j = ev.size();
            std::string line = ev.substr(i, j - i);
            if (!line.empty() && line.back() == '\r') line.pop_back();
            if (line.rfind("error:", 0) == 0) {
                // Not in the SSE spec's fields, but llama.cpp's server reports failures this way.
                std::string v = line.substr(6);
                if (!v.empty() && v.front() == ' ') v.erase(0, 1);
                payload =
                    nlohmann::json{{"error", nlohmann::json::parse(v, nullptr, false).is_discarded()
                                                 ? nlohmann::json(v)
                                                 : nlohmann::json::parse(v)}}
                        .dump();
                break;
            }
            if (line.rfind("data:", 0) == 0) {
                std::string v = line.substr(5);
                if (!v.empty() && v.front() == ' ') v.erase(0, 1);
                if (!payload.empty()) payload += '\n';
                payload += v;
            }
            i = j + 1;
        }
        if (!payload.empty()) events.push_back(std::move(payload));
    }
}

StreamClient::StreamClient(const Endpoint& ep, const ClientOptions& o)
    : ep_(ep), o_(o), cli_(std::make_unique<httplib::Client>(ep.host_port)) {
    const auto to = std::chrono::duration_cast<std::chrono::microseconds>(
        std::chrono::duration<double>(o.timeout_s));
    cli_->set_connection_timeout(to);
    cli_->set_read_timeout(to);
    cli_->set_write_timeout(to);
    // A connection per request: servers close idle keep-alive connections on their own
    // schedule (llama.cpp's after a few requests), and a request written into a connection the
    // server just closed fails without reaching it. Loopback connects cost ~0.1 ms.
    cli_->set_keep_alive(false);
}

StreamClient::~StreamClient() = default;

RequestRecord StreamClient::send(const BenchRequest& r, Clock::time_point deadline) {
    RequestRecord rec;
    rec.prompt_tokens = r.input_words;
    nlohmann::json body = {{"model", o_.model},
                           {"max_tokens", r.max_tokens},
                           {"stream", true},
                           {"stream_options", {{"include_usage", true}}},
                           {"temperature", 0.0}};
    if (o_.ignore_eos)
        body["ignore_eos"] = true;  // llama-server, vLLM, warden: generate exactly max_tokens
    std::string path = ep_.prefix;
    if (r.chat) {
        body["messages"] = r.messages;
        path += "/v1/chat/completions";
    } else {
        body["prompt"] = r.prompt;
        path += "/v1/completions";
    }
    httplib::Request req;
    req.method = "POST";
    req.path = path;
    req.headers = {{"Accept", "text/event-stream"}};
    req.body = body.dump();
    req.set_header("Content-Type", "application/json");

    const auto t0 = Clock::now();
    const auto limit = std::min(deadline, t0 + std::chrono::duration_cast<Clock::duration>(
                                                   std::chrono::duration<double>(o_.timeout_s)));
    SseParser sse;
    std::vector<std::string> events;
    Clock::time_point first{}, last{};
    bool done = false, timed_out = false, finished = false;
    std::string err_body;
    req.response_handler = [&](const httplib::Response& res) {
        rec.status = res.status;
        rec.headers_ms = ms_between(t0, Clock::now());
        return true;
    };
    req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
        const auto now = Clock::now();
        if (rec.status != 200) {
            if (err_body.size() < 2000) err_body.append(data, std::min<size_t>(n, 2000));
            return now < limit;
        }
        events.clear();
        sse.feed(data, n, events);
        for (const auto& ev : events) {
            if (ev == "[DONE]") {
                done = true;
                continue;
            }
            nlohmann::json j = nlohmann::json::parse(ev, nullptr, false);
            if (j.is_discarded()) {
                rec.error = "bad SSE payload: " + ev.substr(0, 200);
                return false;
            }
            if (j.contains("error")) {
                rec.error = "server error in stream: " + j["error"].dump().substr(0, 300);
                return false;
            }
            if (j.contains("usage") && j["usage"].is_object()) {
                const auto& u = j["usage"];
                if (u.contains("prompt_tokens") && u["prompt_tokens"].is_number_integer()) {
                    rec.prompt_tokens = u["prompt_tokens"].get<int64_t>();
                    rec.usage_reported = true;
                }
                if (u.contains("completion_tokens") && u["completion_tokens"].is_number_integer())
                    rec.output_tokens = u["completion_tokens"].get<int64_t>();
                if (u.contains("prompt_tokens_details") && u["prompt_tokens_details"].is_object() &&
                    u["prompt_tokens_details"].contains("cached_tokens") &&
                    u["prompt_tokens_details"]["cached_tokens"].is_number_integer())
                    rec.cached_tokens = u["prompt_tokens_details"]["cached_tokens"].get<int64_t>();
            }
            if (j.contains("warden_timing") && j["warden_timing"].is_object()) {
                const auto& t = j["warden_timing"];  // the same totals on every event that has it
                if (t.contains("spec_proposed") && t["spec_proposed"].is_number_integer())
                    rec.spec_proposed = t["spec_proposed"].get<int64_t>();
                if (t.contains("spec_accepted") && t["spec_accepted"].is_number_integer())
                    rec.spec_accepted = t["spec_accepted"].get<int64_t>();
            }
            if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].empty())
                continue;
            const auto& c = j["choices"][0];
            if (c.contains("finish_reason") && c["finish_reason"].is_string()) finished = true;
            std::string piece;
            if (c.contains("text") && c["text"].is_string()) piece = c["text"].get<std::string>();
            if (c.contains("delta") && c["delta"].is_object() && c["delta"].contains("content") &&
                c["delta"]["content"].is_string())
                piece = c["delta"]["content"].get<std::string>();
            if (piece.empty()) continue;
            if (rec.chunks == 0) {
                first = now;
                rec.ttft_ms = ms_between(t0, now);
            } else {
                rec.itl_ms.push_back(ms_between(last, now));
            }
            last = now;
            ++rec.chunks;
            rec.text += piece;
        }
        if (now >= limit) {
            timed_out = true;
            return false;
        }
        return true;
    };
    const auto res = cli_->send(req);
    const auto t1 = Clock::now();
    rec.e2e_ms = ms_between(t0, t1);
    if (!res) {
        if (rec.error.empty()) {
            const bool read_timeout =
                res.error() == httplib::Error::Read && rec.e2e_ms >= o_.timeout_s * 1000 * 0.99;
            if (timed_out || t1 >= limit || read_timeout)
                rec.error =
                    "timeout after " + std::to_string(static_cast<int64_t>(rec.e2e_ms)) + " ms";
            else
                rec.error = "transport error: " + httplib::to_string(res.error());
        }
        cli_->stop();
        return rec;
    }
    if (rec.status != 200) {
        rec.error = "HTTP " + std::to_string(rec.status) + ": " + err_body.substr(0, 300);
        return rec;
    }
    if (!rec.error.empty()) return rec;
    if (!done) {
        rec.error = "stream ended without [DONE]";
        return rec;
    }
    if (rec.chunks == 0) {
        rec.error = "no tokens in the stream";
        return rec;
    }
    if (!finished) {  // every OpenAI stream names why it ended; one that does not was cut short
        rec.error = "stream ended without a finish_reason";
        return rec;
    }
    if (rec.output_tokens <= 0) rec.output_tokens = rec.chunks;
    if (rec.output_tokens > 1)
        rec.tpot_ms = ms_between(first, last) / static_cast<double>(rec.output_tokens - 1);
    rec.ok = true;
    return rec;
}

std::string discover_model(const Endpoint& ep, double timeout_s) {
    httplib::Client cli(ep.host_port);
    const auto to = std::chrono::duration_cast<std::chrono::microseconds>(
        std::chrono::duration<double>(timeout_s));
    cli.set_connection_timeout(to);
    cli.set_read_timeout(to);
    auto res = cli.Get(ep.prefix + "/v1/models");
    if (!res || res->status != 200) return "";
    auto j = nlohmann::json::parse(res->body, nullptr, false);
    if (j.is_discarded() || !j.contains("data") || !j["data"].is_array() || j["data"].empty())
        return "";
    const auto& m = j["data"][0];
    return m.contains("id") && m["id"].is_string() ? m["id"].get<std::string>() : "";
}

}  // namespace warden::tools::bench
