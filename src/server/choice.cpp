#include "server/choice.h"

#include <algorithm>

namespace warden::server {

using json = nlohmann::json;

json timing_json(const engine::Timing& t) {
    json j{{"queue_ms", t.queue_ms},
           {"prefill_ms", t.prefill_ms},
           {"ttft_ms", t.ttft_ms},
           {"tpot_ms", t.tpot_ms},
           {"total_ms", t.total_ms}};
    if (t.kv_transfer_bytes > 0) {  // disaggregated: the prompt's KV came from a prefill server
        j["kv_transfer_ms"] = t.kv_transfer_ms;
        j["kv_transfer_bytes"] = t.kv_transfer_bytes;
    }
    return j;
}

Choice::Choice(int idx, const tokenizer::Tokenizer& tok, std::shared_ptr<engine::Stream> s,
               std::vector<int32_t> stop_ids, std::vector<std::string> stop, bool ignore_eos,
               bool is_chat, int32_t top_logprobs)
    : index(idx),
      stream(std::move(s)),
      tok_(tok),
      dec_(tok),
      stop_ids_(ignore_eos ? std::vector<int32_t>{} : std::move(stop_ids)),
      stop_(std::move(stop)) {
    want_logprobs = top_logprobs >= 0;
    chat = is_chat;
}

void Choice::append(const std::string& piece) {
    if (piece.empty() || stopped_) return;
    size_t longest = 0;
    for (const auto& s : stop_) longest = std::max(longest, s.size());
    const size_t from = text.size() >= longest ? text.size() - longest + 1 : 0;
    text += piece;
    size_t best = std::string::npos;
    for (const auto& s : stop_) {
        const size_t p = text.find(s, from);
        if (p != std::string::npos) best = std::min(best, p);
    }
    if (best != std::string::npos) {
        text.resize(
            std::max(best, sent_));  // never take back text already sent (cannot happen: held back)
        finish = "stop";
        stopped_ = true;
        stream->cancel();
    }
}

void Choice::on_event(engine::Event&& ev) {
    if (ev.kind == engine::Event::Kind::Token) {
        if (stopped_) return;
        ++n_tokens;
        const int32_t id = ev.token.token;
        LogprobEntry e;
        e.token = id;
        e.logprob = ev.token.logprobs.logprob;
        e.top = std::move(ev.token.logprobs.top);
        e.text_offset = text.size();
        lp.push_back(std::move(e));
        if (std::find(stop_ids_.begin(), stop_ids_.end(), id) != stop_ids_.end()) {
            finish = "stop";
            stopped_ = true;  // the engine finishes it too (stop ids are the request's)
            return;
        }
        append(dec_.push(id));
        return;
    }
    done = true;
    result = std::move(ev.result);
    if (!stopped_) append(dec_.flush());
    if (!finish.empty()) return;  // a stop string / stop token already decided it
    switch (result.finish) {
        case engine::FinishReason::Stop:
            finish = "stop";
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

size_t Choice::holdback() const {
    // Longest suffix of the unsent text that is a proper prefix of some stop string.
    size_t hold = 0;
    for (const auto& s : stop_)
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
    for (size_t i = from; i < to && i < lp.size(); ++i) {
        tokens.push_back(tok_.token_bytes(lp[i].token));
        lps.push_back(lp[i].logprob);
        json t = json::object();
        for (const auto& [id, l] : lp[i].top) t[tok_.token_bytes(id)] = l;
        tops.push_back(t);
        offs.push_back(lp[i].text_offset);
    }
    return json{
        {"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offs}};
}

}  // namespace warden::server
