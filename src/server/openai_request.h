#pragma once
// Parsing and validation of the OpenAI request bodies (/v1/completions, /v1/chat/completions)
// into what the engine runs. Every bad field is an ApiError(400) naming the parameter; fields
// warden does not know are ignored (as vLLM does).
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "constrain/token_mask.h"
#include "engine/sampler.h"
#include "server/api_error.h"

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
    // The tokenizer's token bytes for structured outputs (Api builds it when left null).
    std::shared_ptr<const constrain::Vocabulary> vocab;
};

struct CompletionRequest {
    bool chat = false;
    std::vector<std::vector<int32_t>> prompts;  // one or more (completions accepts a batch)
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
    // Structured output (response_format, guided_*, structured_outputs); null: none. Each
    // choice runs its own constrain::Constraint over it.
    std::shared_ptr<const constrain::CompiledGrammar> grammar;
};

// Throws ApiError.
CompletionRequest parse_request(const nlohmann::json& body, bool chat, const ModelInfo& m);

}  // namespace warden::server
