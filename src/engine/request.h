#pragma once
// What a caller hands the scheduler (Request) and what it gets back: every sampled token
// (TokenInfo) and, once per request, how it ended (Result, FinishReason, Timing).
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "constrain/constraint.h"
#include "engine/sampler.h"
#include "kv/kv_cache.h"
#include "kv/page_table.h"

namespace warden::engine {

// Disaggregated decode: a prompt whose KV was computed by a prefill server and already sits,
// verified, in this engine's pages; the first token is sampled from `logits` at admission.
struct PrefilledPrompt {
    kv::PageTable table;                            // covers the prompt (n_tokens == prompt size)
    std::vector<float> logits;                      // of the last prompt position
    std::chrono::steady_clock::time_point arrival;  // when the request reached this server
    double transfer_ms = 0;
    int64_t transfer_bytes = 0;
};

// Disaggregated prefill: called on the scheduler thread once the prompt's KV is computed, with
// the sequence's pages and the last position's logits, before its first token is sampled.
using PromptComputedFn =
    std::function<void(kv::KvCache&, const kv::PageTable&, const std::vector<float>&)>;

struct Request {
    std::vector<int32_t> prompt;
    int64_t max_new_tokens = 16;
    SamplingParams sampling;
    std::vector<int32_t> stop_ids;
    int32_t top_logprobs =
        -1;  // < 0: no logprobs; >= 0: logprob of each token + this many top ones
    // The server-side tenant (from the API key, never from the client): the metrics label and
    // the prefix cache's isolation scope. cache_salt is the client's optional narrowing of it.
    std::string tenant;
    std::string cache_salt;
    // Prompt logprobs (echo, vLLM's prompt_logprobs): < 0 none; >= 0 the logprob of every prompt
    // token after the first under the model, with this many top alternatives, delivered with
    // the first sampled token. The prompt's logits are computed at every position, so such a
    // request never attaches cached prefix pages for its first prefill.
    int32_t prompt_logprobs = -1;
    // Output controls applied to the logits before sampling (logit_processors.h); the logprobs
    // reported are still those of the model's distribution.
    std::vector<std::pair<int32_t, float>> logit_bias;  // (token, added to its logit)
    int64_t min_tokens = 0;  // stop ids cannot be sampled before this many tokens
    // Structured output: this sequence's own grammar state (one per sequence, never shared);
    // null: unconstrained. Tokens it refuses are masked before sampling (constrained_sample.h).
    std::shared_ptr<constrain::Constraint> constraint;
    std::shared_ptr<PrefilledPrompt> prefilled;  // nullptr: the prompt is computed here
    // Disaggregated decode: the prefill server (its KV endpoint, HOST:PORT) a router chose for
    // this request; empty: the decode server chooses. A retry goes to another one.
    std::string prefill_hint;
    PromptComputedFn on_prompt_computed;  // empty: nothing to hand off
};

// Unavailable: a resource outside this server failed (the prefill server of a disaggregated
// request); the client may retry.
enum class FinishReason { Length, Stop, IntegrityError, Cancelled, Rejected, Timeout, Unavailable };
const char* finish_reason_name(FinishReason r);

// Per-request latency breakdown, milliseconds. queue: arrival -> first admission; prefill:
// first admission -> first token; ttft: arrival -> first token; tpot: mean gap between output
// tokens after the first; total: arrival -> finish. Zero where the event never happened.
// kv_transfer_ms/bytes: a disaggregated request's prompt KV fetched from a prefill server
// (request sent -> last page here) and its size; zero when the prompt was computed here.
struct Timing {
    double queue_ms = 0, prefill_ms = 0, ttft_ms = 0, tpot_ms = 0, total_ms = 0;
    // Speculative decoding: draft tokens the target verified, and how many it kept.
    int64_t spec_proposed = 0, spec_accepted = 0;
    double kv_transfer_ms = 0;
    int64_t kv_transfer_bytes = 0;
};

struct Result {
    std::vector<int32_t> output;
    FinishReason finish = FinishReason::Length;
    std::optional<kv::IntegrityViolation> violation;
    bool fault_target = false;  // an injected fault was aimed at this sequence
    int64_t preemptions = 0;
    std::string error;  // for Rejected
    int64_t n_prompt = 0;
    int64_t cached_tokens = 0;  // prompt tokens served by the prefix cache at first admission
    Timing timing;
};

// One sampled token as delivered to on_token.
struct TokenInfo {
    int32_t token = 0;
    TokenLogprobs logprobs;  // filled when the request asked for logprobs
    // First token of a request with prompt_logprobs >= 0: entry i is prompt token i + 1.
    std::vector<TokenLogprobs> prompt_logprobs;
};

}  // namespace warden::engine
