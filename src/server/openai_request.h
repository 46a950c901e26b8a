#pragma once
// Parsing and validation of the OpenAI request bodies (/v1/completions, /v1/chat/completions)
// into what the engine runs. Every bad field is an ApiError(400) naming the parameter, and so is
// every field warden does not implement (field_allowlist.h): nothing is silently ignored.
#include <algorithm>
#include <cstdint>
#include <future>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "constrain/token_mask.h"
#include "engine/sampler.h"
#include "server/api_error.h"
#include "server/chat_tools.h"

namespace warden::tokenizer {
class Tokenizer;
}  // namespace warden::tokenizer

namespace warden::chat_template {
class ChatTemplate;
}  // namespace warden::chat_template

namespace warden::server {

struct ModelInfo {
    std::string id;  // what "model" must name
    const tokenizer::Tokenizer* tok = nullptr;
    const chat_template::ChatTemplate* chat = nullptr;  // null: chat endpoint unavailable
    int64_t max_ctx = 0;                                // model context length
    int64_t kv_tokens = 0;                              // KV cache capacity in tokens
    std::string chat_template_source;                   // for /tokenizer_info ("" if none)
    std::string tool_parser;                            // chat_output/ tool-call format; "": none
    std::string reasoning_parser;                       // chat_output/ reasoning format; "": none
    // The tokenizer's token bytes for structured outputs. Api starts building them on a
    // background thread when none were given, so the server listens without waiting for them;
    // vocabulary() waits for them (the first structured request only, and only at start-up).
    std::shared_future<std::shared_ptr<const constrain::Vocabulary>> vocab;
    std::shared_ptr<const constrain::Vocabulary> vocabulary() const;
};

struct CompletionRequest {
    bool chat = false;
    std::vector<std::vector<int32_t>> prompts;  // one or more (completions accepts a batch)
    std::vector<std::string> prompt_texts;      // per prompt: its text ("" when given as ids)
    int64_t max_tokens = 16;
    int n = 1;
    bool stream = false;
    bool include_usage = false;
    std::vector<std::string> stop;
    engine::SamplingParams sampling;
    int32_t top_logprobs = -1;  // < 0: no logprobs
    bool ignore_eos = false;    // extension (vLLM's name)
    // vLLM's `cache_salt`: requests share prefix-cache pages only with requests of the same
    // tenant AND the same salt. It can only narrow sharing, never widen it past the tenant.
    std::string cache_salt;
    ChatOutputOptions chat_output;  // chat: tool calls and reasoning read from the output
    // Prompt logprobs and output controls (OpenAI and vLLM fields; see docs/SERVER.md).
    bool echo = false;             // completions: the prompt in front of the text (and logprobs)
    int32_t prompt_logprobs = -1;  // vLLM: < 0 none, else top alternatives per prompt token
    int best_of = 1;               // choices generated per prompt; the n most likely are returned
    std::vector<std::pair<int32_t, float>> logit_bias;
    int64_t min_tokens = 0;
    std::vector<int32_t> stop_token_ids;
    bool include_stop_str_in_output = false;
    bool skip_special_tokens = false;  // warden's default keeps special tokens' text
    // What the engine computes per choice: prompt logprobs for echo + logprobs or
    // prompt_logprobs (the larger top count), and at least one token (max_tokens 0).
    int32_t engine_prompt_logprobs() const {
        return std::max(prompt_logprobs, echo ? top_logprobs : -1);
    }
    // Structured output (response_format, guided_*, structured_outputs); null: none. Each
    // choice runs its own constrain::Constraint over it.
    std::shared_ptr<const constrain::CompiledGrammar> grammar;
};

// Chat messages rendered by the model's template and tokenized (special tokens parsed, no BOS
// added: the template writes it). `param` names the messages field in errors. Throws ApiError.
std::vector<int32_t> chat_prompt(const nlohmann::json& messages, bool add_generation_prompt,
                                 const ModelInfo& m);
// The same rendering as text, with the request's tools and chat_template_kwargs (template
// variables). Tool-call arguments reach the template as objects, or as the client's JSON strings
// when the template fails on objects (see chat_tools.h). Throws ApiError.
std::string render_chat(const nlohmann::json& messages, const nlohmann::json& tools,
                        const nlohmann::json& kwargs, bool add_generation_prompt,
                        const ModelInfo& m);

// Throws ApiError.
CompletionRequest parse_request(const nlohmann::json& body, bool chat, const ModelInfo& m);

}  // namespace warden::server
