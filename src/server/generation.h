#pragma once
// One completion request while it runs: its choices (one engine stream each), and the JSON
// and SSE bodies built from them. Not thread-safe: one connection's strand owns it.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/choice.h"
#include "server/openai_request.h"

namespace warden::server {

struct Generation {
    bool chat = false;
    std::string id, model;
    int64_t created = 0;
    CompletionRequest req;
    std::vector<Choice> choices;
    int64_t prompt_tokens = 0;
    std::shared_ptr<void> tenant_slot;  // the tenant's concurrency claim, released with this
    bool finished_sent = false;         // streaming: the final chunks were produced

    Generation() = default;
    Generation(const Generation&) = delete;
    Generation& operator=(const Generation&) = delete;
    // Cancels what is still running (its client is gone) and detaches the streams' hooks.
    ~Generation();

    // Choices run per prompt: best_of (>= n) of them, the n most likely answered.
    int per_prompt() const { return std::max(req.n, req.best_of); }
    bool all_done() const;
    void cancel_all();
    // Consumes every event already queued on the streams, without waiting. True if any.
    bool drain_events();

    nlohmann::json usage() const;
    nlohmann::json timing() const;
    const Choice* failed() const;
    // The choices answered, in order: all of them, or per prompt the n best of best_of.
    std::vector<const Choice*> answered() const;
    nlohmann::json full_response() const;
    // SSE events for whatever became sendable; empty when nothing did.
    std::string sse_chunks();
    // The closing SSE events: the usage chunk when asked for, then "data: [DONE]".
    std::string sse_tail() const;
};

// "data: <json>\n\n" and the stream's end marker.
std::string sse_event(const nlohmann::json& j);
inline constexpr const char* kSseDone = "data: [DONE]\n\n";
// JSON text as the server sends it (invalid UTF-8 replaced, never a throw).
std::string dump_json(const nlohmann::json& j);

}  // namespace warden::server
