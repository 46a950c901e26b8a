#include "server/generation.h"

#include <algorithm>

#include "server/api_error.h"
#include "server/request_id.h"

namespace warden::server {

using json = nlohmann::json;

std::string dump_json(const json& j) {
    return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string sse_event(const json& j) {
    return "data: " + dump_json(j) + "\n\n";
}

namespace {

// A chat choice's finish_reason: "tool_calls" when it ended by itself after calling tools.
std::string chat_finish(const Choice& c) {
    if (c.finish == "stop" && c.output_parser && c.output_parser->tool_calls() > 0)
        return "tool_calls";
    return c.finish;
}

// tool_calls entries of one delta, one per call index (first fragments carry id and name).
json tool_call_deltas(Choice& c, const std::vector<chat_output::ToolCallDelta>& calls) {
    json out = json::array();
    std::vector<int> slot;  // call index -> position in out
    for (const auto& d : calls) {
        const auto i = static_cast<size_t>(d.index);
        if (slot.size() <= i) slot.resize(i + 1, -1);
        if (slot[i] < 0) {
            slot[i] = static_cast<int>(out.size());
            out.push_back(json{{"index", d.index}, {"function", json{{"arguments", ""}}}});
        }
        json& e = out[static_cast<size_t>(slot[i])];
        if (d.first) {
            e["id"] = c.call_id(d);
            e["type"] = "function";
            e["function"]["name"] = d.name;
        }
        e["function"]["arguments"] = e["function"]["arguments"].get<std::string>() + d.arguments;
    }
    return out;
}

// The assistant message of a finished chat choice.
json chat_message(const Choice& c) {
    if (!c.output_parser) return json{{"role", "assistant"}, {"content", c.text}};
    const chat_output::OutputDelta d = c.output_parser->feed(c.text, true);
    chat_output::ParsedOutput p;
    chat_output::accumulate(p, d);
    json m{{"role", "assistant"}};
    m["content"] = p.content.empty() && !p.calls.empty() ? json(nullptr) : json(p.content);
    if (c.output_parser->has_reasoning_parser())
        m["reasoning_content"] = p.reasoning.empty() ? json(nullptr) : json(p.reasoning);
    if (!p.calls.empty()) {
        json calls = json::array();
        for (size_t i = 0; i < p.calls.size(); ++i) {
            calls.push_back(json{
                {"id", p.calls[i].id.empty() ? random_id("call_") : p.calls[i].id},
                {"type", "function"},
                {"function", {{"name", p.calls[i].name}, {"arguments", p.calls[i].arguments}}}});
        }
        m["tool_calls"] = calls;
    }
    return m;
}

}  // namespace

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
        if (c.index % per_prompt() == 0) cached += c.result.cached_tokens;
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
        t.spec_proposed += x.spec_proposed;  // speculative drafts: summed over the choices
        t.spec_accepted += x.spec_accepted;
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

std::vector<const Choice*> Generation::answered() const {
    std::vector<const Choice*> out;
    const size_t per = static_cast<size_t>(per_prompt());
    for (size_t p0 = 0; p0 < choices.size(); p0 += per) {
        std::vector<const Choice*> group;
        for (size_t i = p0; i < std::min(p0 + per, choices.size()); ++i)
            group.push_back(&choices[i]);
        // best_of: the n with the highest cumulative logprob, best first (vLLM's order)
        if (per > static_cast<size_t>(req.n))
            std::stable_sort(group.begin(), group.end(), [](const Choice* a, const Choice* b) {
                return a->cumulative_logprob() > b->cumulative_logprob();
            });
        group.resize(std::min(group.size(), static_cast<size_t>(req.n)));
        out.insert(out.end(), group.begin(), group.end());
    }
    return out;
}

json Generation::full_response() const {
    json out;
    out["id"] = id;
    out["object"] = chat ? "chat.completion" : "text_completion";
    out["created"] = created;
    out["model"] = model;
    json cs = json::array();
    for (const Choice* cp : answered()) {
        const Choice& c = *cp;
        json j;
        j["index"] = cs.size();
        if (chat) {
            j["message"] = chat_message(c);
        } else {
            j["text"] = c.opts.echo ? c.opts.echo_text + c.text : c.text;
        }
        j["logprobs"] = c.logprobs_json(0, c.lp.size());
        if (c.opts.echo && c.want_logprobs) {
            json e = c.echo_logprobs_json();
            for (const char* k : {"tokens", "token_logprobs", "top_logprobs", "text_offset"})
                for (auto& v : j["logprobs"][k]) e[k].push_back(v);
            j["logprobs"] = e;
        }
        if (!chat && c.opts.prompt_logprobs >= 0) j["prompt_logprobs"] = c.prompt_logprobs_json();
        j["finish_reason"] = chat ? chat_finish(c) : c.finish;
        cs.push_back(j);
    }
    out["choices"] = cs;
    if (chat && !choices.empty() && choices[0].opts.prompt_logprobs >= 0)
        out["prompt_logprobs"] = choices[0].prompt_logprobs_json();
    out["usage"] = usage();
    out["warden_timing"] = timing();
    return out;
}

std::string Generation::sse_chunks() {
    std::string out;
    for (auto& c : choices) {
        std::string piece;
        // echo: the first chunk carries the prompt (and its logprobs, which come with the first
        // token), so it waits for that token
        if (!c.started && c.opts.echo && c.lp.empty() && !c.done) continue;
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
        chat_output::OutputDelta parsed;
        bool have_delta = have_text;
        if (chat && c.output_parser && (have_text || finishing)) {
            parsed = c.output_parser->feed(piece, finishing);
            have_delta = !parsed.empty();
        }
        // With an output parser, held-back text sends nothing (unless logprobs are due).
        const bool lp_due = lp_to != lp_from && (!c.output_parser || c.want_logprobs);
        if (!first && !have_delta && !lp_due && !finishing) continue;
        c.lp_sent = lp_to;
        json ch;
        ch["id"] = id;
        ch["object"] = chat ? "chat.completion.chunk" : "text_completion";
        ch["created"] = created;
        ch["model"] = model;
        json cj;
        cj["index"] = c.index;
        if (chat && c.output_parser) {
            json d = json::object();
            if (first) d["role"] = "assistant";
            if (!parsed.content.empty() || first) d["content"] = parsed.content;
            if (!parsed.reasoning.empty()) d["reasoning_content"] = parsed.reasoning;
            if (!parsed.calls.empty()) d["tool_calls"] = tool_call_deltas(c, parsed.calls);
            cj["delta"] = d;
        } else if (chat) {
            json d = json::object();
            if (first) d["role"] = "assistant";
            if (have_text || first) d["content"] = piece;
            cj["delta"] = d;
        } else {
            cj["text"] = first && c.opts.echo ? c.opts.echo_text + piece : piece;
        }
        cj["logprobs"] = c.logprobs_json(lp_from, lp_to);
        if (first && c.opts.echo && c.want_logprobs) {
            json e = c.echo_logprobs_json();
            for (const char* k : {"tokens", "token_logprobs", "top_logprobs", "text_offset"})
                for (auto& v : cj["logprobs"][k]) e[k].push_back(v);
            cj["logprobs"] = e;
        }
        cj["finish_reason"] = finishing ? json(chat ? chat_finish(c) : c.finish) : json(nullptr);
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
