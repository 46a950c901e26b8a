#include "server/generation.h"

#include <algorithm>

#include "server/api_error.h"

namespace warden::server {

using json = nlohmann::json;

std::string dump_json(const json& j) {
    return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string sse_event(const json& j) {
    return "data: " + dump_json(j) + "\n\n";
}

Generation::~Generation() {
    for (auto& c : choices) {
        c.stream->set_notify({});
        if (!c.done) c.stream->cancel();
    }
}

bool Generation::all_done() const {
    return std::all_of(choices.begin(), choices.end(), [](const Choice& c) { return c.done; });
}

void Generation::cancel_all() {
    for (auto& c : choices) c.stream->cancel();
}

bool Generation::drain_events() {
    bool any = false;
    engine::Event ev;
    for (auto& c : choices)
        while (!c.done && c.stream->next(ev, std::chrono::milliseconds(0))) {
            c.on_event(std::move(ev));
            any = true;
        }
    return any;
}

json Generation::usage() const {
    // Cached prompt tokens per distinct prompt (the n samples of one prompt count it once, as
    // prompt_tokens does): its first choice's count.
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

json Generation::timing() const {
    engine::Timing t;
    for (const auto& c : choices) {
        const auto& x = c.result.timing;
        t.queue_ms = std::max(t.queue_ms, x.queue_ms);
        t.prefill_ms = std::max(t.prefill_ms, x.prefill_ms);
        t.ttft_ms = std::max(t.ttft_ms, x.ttft_ms);
        t.tpot_ms = std::max(t.tpot_ms, x.tpot_ms);
        t.total_ms = std::max(t.total_ms, x.total_ms);
        t.kv_transfer_ms = std::max(t.kv_transfer_ms, x.kv_transfer_ms);
        t.kv_transfer_bytes += x.kv_transfer_bytes;
    }
    return timing_json(t);
}

const Choice* Generation::failed() const {
    for (const auto& c : choices)
        if (c.error_status) return &c;
    return nullptr;
}

json Generation::full_response() const {
    json out;
    out["id"] = id;
    out["object"] = chat ? "chat.completion" : "text_completion";
    out["created"] = created;
    out["model"] = model;
    json cs = json::array();
    for (const auto& c : choices) {
        json j;
        j["index"] = c.index;
        if (chat)
            j["message"] = json{{"role", "assistant"}, {"content", c.text}};
        else
            j["text"] = c.text;
        j["logprobs"] = c.logprobs_json(0, c.lp.size());
        j["finish_reason"] = c.finish;
        cs.push_back(j);
    }
    out["choices"] = cs;
    out["usage"] = usage();
    out["warden_timing"] = timing();
    return out;
}

std::string Generation::sse_chunks() {
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
            out += sse_event(ApiError(c.error_status, c.error).body());
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
        out += sse_event(ch);
    }
    return out;
}

std::string Generation::sse_tail() const {
    std::string tail;
    if (req.include_usage) {
        json u{{"id", id},
               {"object", chat ? "chat.completion.chunk" : "text_completion"},
               {"created", created},
               {"model", model},
               {"choices", json::array()},
               {"usage", usage()},
               {"warden_timing", timing()}};
        tail += sse_event(u);
    }
    tail += kSseDone;
    return tail;
}

}  // namespace warden::server
