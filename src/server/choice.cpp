#include "server/choice.h"

#include <algorithm>

#include "server/request_id.h"

namespace warden::server {

using json = nlohmann::json;

json timing_json(const engine::Timing& t) {
    json j{{"queue_ms", t.queue_ms},
           {"prefill_ms", t.prefill_ms},
           {"ttft_ms", t.ttft_ms},
           {"tpot_ms", t.tpot_ms},
           {"total_ms", t.total_ms}};
    if (t.spec_proposed > 0) {  // speculative decoding verified drafts for this request
        j["spec_proposed"] = t.spec_proposed;
        j["spec_accepted"] = t.spec_accepted;
    }
    if (t.kv_transfer_bytes > 0) {  // disaggregated: the prompt's KV came from a prefill server
        j["kv_transfer_ms"] = t.kv_transfer_ms;
        j["kv_transfer_bytes"] = t.kv_transfer_bytes;
    }
    return j;
}

Choice::Choice(int idx, const tokenizer::Tokenizer& tok, std::shared_ptr<engine::Stream> s,
               ChoiceOptions o)
    : index(idx), stream(std::move(s)), opts(std::move(o)), tok_(tok), dec_(tok) {
    want_logprobs = opts.top_logprobs >= 0;
    chat = opts.chat;
}

void Choice::append(const std::string& piece) {
    if (piece.empty() || stopped_) return;
    size_t longest = 0;
    for (const auto& s : opts.stop) longest = std::max(longest, s.size());
    const size_t from = text.size() >= longest ? text.size() - longest + 1 : 0;
    text += piece;
    size_t best = std::string::npos, best_len = 0;
    for (const auto& s : opts.stop) {
        const size_t p = text.find(s, from);
        if (p != std::string::npos && (p < best || (p == best && s.size() > best_len))) {
            best = p;
            best_len = s.size();
        }
    }
    if (best != std::string::npos) {
        if (opts.include_stop_str) best += best_len;
        text.resize(
            std::max(best, sent_));  // never take back text already sent (cannot happen: held back)
        finish = "stop";
        stopped_ = true;
        stream->stop();
    }
}

void Choice::on_event(engine::Event&& ev) {
    if (ev.kind == engine::Event::Kind::Token) {
        if (!ev.token.prompt_logprobs.empty()) prompt_lp = std::move(ev.token.prompt_logprobs);
        if (stopped_ || n_tokens >= opts.max_tokens) return;  // max_tokens 0: prompt only
        ++n_tokens;
        const int32_t id = ev.token.token;
        LogprobEntry e;
        e.token = id;
        e.logprob = ev.token.logprobs.logprob;
        e.top = std::move(ev.token.logprobs.top);
        e.text_offset = text.size();
        lp.push_back(std::move(e));
        if (std::find(opts.stop_ids.begin(), opts.stop_ids.end(), id) != opts.stop_ids.end()) {
            finish = "stop";
            stopped_ = true;  // the engine finishes it too (stop ids are the request's)
            return;
        }
        if (opts.skip_special && tok_.is_special(id)) return;
        append(dec_.push(id));
        return;
    }
    done = true;
    result = std::move(ev.result);
    if (!stopped_) append(dec_.flush());
    if (!finish.empty()) return;  // a stop string / stop token already decided it
    switch (result.finish) {
        case engine::FinishReason::Stop:
            // max_tokens 0: the one token the engine computes is not part of the answer, so a
            // stop token there does not end it; the answer (the prompt) ended at its limit.
            finish = opts.max_tokens == 0 ? "length" : "stop";
            break;
        case engine::FinishReason::Length:
            finish = "length";
            break;
        case engine::FinishReason::Cancelled:
            finish = "stop";
            break;  // only the client cancels
        case engine::FinishReason::Timeout:
            error_status = 503;
            error = "the request timed out";
            break;
        case engine::FinishReason::IntegrityError:
            error_status = 500;
            error = "the request was aborted by a KV cache integrity check";
            break;
        case engine::FinishReason::Unavailable:
            error_status = 503;
            error = result.error.empty() ? "a backend server is unavailable" : result.error;
            break;
        case engine::FinishReason::Rejected:
            error_status = 400;
            error = result.error.empty() ? "request rejected" : result.error;
            break;
    }
    if (finish.empty()) finish = "error";
}

const std::string& Choice::call_id(const chat_output::ToolCallDelta& d) {
    const auto i = static_cast<size_t>(d.index);
    if (call_ids.size() <= i) call_ids.resize(i + 1);
    if (call_ids[i].empty()) call_ids[i] = d.id.empty() ? random_id("call_") : d.id;
    return call_ids[i];
}

size_t Choice::holdback() const {
    // Longest suffix of the unsent text that is a proper prefix of some stop string.
    size_t hold = 0;
    for (const auto& s : opts.stop)
        for (size_t k = std::min(s.size() - 1, text.size() - sent_); k > hold; --k)
            if (text.compare(text.size() - k, k, s, 0, k) == 0) {
                hold = k;
                break;
            }
    return hold;
}

bool Choice::take_sendable(std::string& out) {
    const size_t end = (done || stopped_) ? text.size() : text.size() - holdback();
    if (end <= sent_) return false;
    out = text.substr(sent_, end - sent_);
    sent_ = end;
    return true;
}

json Choice::logprobs_json(size_t from, size_t to) const {
    if (!want_logprobs) return nullptr;
    auto bytes = [](const std::string& s) {
        json a = json::array();
        for (unsigned char c : s) a.push_back(static_cast<int>(c));
        return a;
    };
    if (chat) {
        json content = json::array();
        for (size_t i = from; i < to && i < lp.size(); ++i) {
            const std::string t = tok_.token_bytes(lp[i].token);
            json top = json::array();
            for (const auto& [id, l] : lp[i].top) {
                const std::string tt = tok_.token_bytes(id);
                top.push_back(json{{"token", tt}, {"logprob", l}, {"bytes", bytes(tt)}});
            }
            content.push_back(json{{"token", t},
                                   {"logprob", lp[i].logprob},
                                   {"bytes", bytes(t)},
                                   {"top_logprobs", top}});
        }
        return json{{"content", content}};
    }
    json tokens = json::array(), lps = json::array(), tops = json::array(), offs = json::array();
    const size_t shift = opts.echo ? opts.echo_text.size() : 0;
    for (size_t i = from; i < to && i < lp.size(); ++i) {
        tokens.push_back(tok_.token_bytes(lp[i].token));
        lps.push_back(lp[i].logprob);
        json t = json::object();
        for (const auto& [id, l] : lp[i].top) t[tok_.token_bytes(id)] = l;
        tops.push_back(t);
        offs.push_back(lp[i].text_offset + shift);
    }
    return json{
        {"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offs}};
}

json Choice::echo_logprobs_json() const {
    json tokens = json::array(), lps = json::array(), tops = json::array(), offs = json::array();
    size_t off = 0;
    for (size_t i = 0; i < opts.prompt.size(); ++i) {
        const std::string t = tok_.token_bytes(opts.prompt[i]);
        tokens.push_back(t);
        offs.push_back(off);
        off += t.size();
        if (i == 0 || i - 1 >= prompt_lp.size()) {  // the first token has no logprob
            lps.push_back(nullptr);
            tops.push_back(nullptr);
            continue;
        }
        const engine::TokenLogprobs& e = prompt_lp[i - 1];
        lps.push_back(e.logprob);
        json top = json::object();
        for (const auto& [id, l] : e.top) top[tok_.token_bytes(id)] = l;
        tops.push_back(top);
    }
    return json{
        {"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offs}};
}

json Choice::prompt_logprobs_json() const {
    if (opts.prompt_logprobs < 0) return nullptr;
    json out = json::array({nullptr});
    for (size_t i = 1; i < opts.prompt.size(); ++i) {
        json d = json::object();
        if (i - 1 < prompt_lp.size()) {
            const engine::TokenLogprobs& e = prompt_lp[i - 1];
            for (const auto& [id, l] : e.top) {
                int32_t rank = 1;
                for (const auto& [id2, l2] : e.top) rank += l2 > l ? 1 : 0;
                d[std::to_string(id)] =
                    json{{"logprob", l}, {"rank", rank}, {"decoded_token", tok_.token_bytes(id)}};
            }
            const int32_t id = opts.prompt[i];
            d[std::to_string(id)] = json{
                {"logprob", e.logprob}, {"rank", e.rank}, {"decoded_token", tok_.token_bytes(id)}};
        }
        out.push_back(d);
    }
    return out;
}

double Choice::cumulative_logprob() const {
    double sum = 0;
    for (const auto& e : lp) sum += e.logprob;
    return sum;
}

}  // namespace warden::server
