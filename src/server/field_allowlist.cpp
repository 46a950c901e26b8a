#include "server/field_allowlist.h"

#include <string>

#include "server/api_error.h"
#include "util/error.h"

namespace warden::server {

namespace {

using json = nlohmann::json;
constexpr FieldStatus S = FieldStatus::Supported;
constexpr FieldStatus R = FieldStatus::Refused;

constexpr const char* kNum = R"({"type":"number"})";
constexpr const char* kInt = R"({"type":"integer"})";
constexpr const char* kBool = R"({"type":"boolean"})";
constexpr const char* kStr = R"({"type":"string"})";
constexpr const char* kObj = R"({"type":"object"})";
constexpr const char* kAny = R"({})";
constexpr const char* kIds = R"({"type":"array","items":{"type":"integer"}})";
constexpr const char* kStop =
    R"({"oneOf":[{"type":"string"},{"type":"array","items":{"type":"string"},"maxItems":16}]})";
constexpr const char* kBias = R"({"type":"object","additionalProperties":{"type":"number"}})";
constexpr const char* kStreamOptions =
    R"({"type":"object","properties":{"include_usage":{"type":"boolean"}}})";

constexpr const char* kNotImpl = "is not implemented by warden";
constexpr const char* kLegacyTools =
    "is the deprecated form of tool calling, not implemented by warden; send 'tools' and "
    "'tool_choice' instead";
constexpr const char* kReasoning =
    "is not implemented by warden (reasoning_content comes with any thinking model whose template "
    "warden recognizes)";

// Sampling and output fields both completion endpoints share.
#define WARDEN_SAMPLING_FIELDS                                                 \
    {"model", S, "openai", kStr, nullptr, nullptr},                            \
        {"max_tokens", S, "openai", kInt, nullptr, nullptr},                   \
        {"temperature", S, "openai", kNum, nullptr, nullptr},                  \
        {"top_p", S, "openai", kNum, nullptr, nullptr},                        \
        {"n", S, "openai", kInt, nullptr, nullptr},                            \
        {"stream", S, "openai", kBool, nullptr, nullptr},                      \
        {"stream_options", S, "openai", kStreamOptions, nullptr, nullptr},     \
        {"stop", S, "openai", kStop, nullptr, nullptr},                        \
        {"seed", S, "openai", kInt, nullptr, nullptr},                         \
        {"frequency_penalty", S, "openai", kNum, nullptr, nullptr},            \
        {"presence_penalty", S, "openai", kNum, nullptr, nullptr},             \
        {"logit_bias", S, "openai", kBias, nullptr, nullptr},                  \
        {"user", S, "openai", kStr, nullptr, nullptr},                         \
        {"top_k", S, "vllm", kInt, nullptr, nullptr},                          \
        {"min_p", S, "vllm", kNum, nullptr, nullptr},                          \
        {"repetition_penalty", S, "vllm", kNum, nullptr, nullptr},             \
        {"ignore_eos", S, "vllm", kBool, nullptr, nullptr},                    \
        {"cache_salt", S, "vllm", kStr, nullptr, nullptr},                     \
        {"min_tokens", S, "vllm", kInt, nullptr, nullptr},                     \
        {"stop_token_ids", S, "vllm", kIds, nullptr, nullptr},                 \
        {"include_stop_str_in_output", S, "vllm", kBool, nullptr, nullptr},    \
        {"skip_special_tokens", S, "vllm", kBool, nullptr, nullptr},           \
        {"prompt_logprobs", S, "vllm", kInt, nullptr, nullptr},                \
        {"use_beam_search", R, "vllm", kBool, "false", kNotImpl},              \
        {"length_penalty", R, "vllm", kNum, "1", kNotImpl},                    \
        {"spaces_between_special_tokens", R, "vllm", kBool, "true", kNotImpl}, \
        {"truncate_prompt_tokens", R, "vllm", kInt, nullptr, kNotImpl},        \
        {"allowed_token_ids", R, "vllm", kIds, nullptr, kNotImpl},             \
        {"bad_words", R, "vllm", kAny, "[]", kNotImpl},                        \
        {"add_special_tokens", R, "vllm", kBool, nullptr, kNotImpl},           \
        {"priority", R, "vllm", kInt, "0", kNotImpl},                          \
        {"request_id", R, "vllm", kStr, nullptr, kNotImpl},                    \
        {"logits_processors", R, "vllm", kAny, nullptr, kNotImpl},             \
        {"return_tokens_as_token_ids", R, "vllm", kBool, "false", kNotImpl},   \
        {"return_token_ids", R, "vllm", kBool, "false", kNotImpl},             \
        {"kv_transfer_params", R, "vllm", kObj, nullptr, kNotImpl},            \
        {"vllm_xargs", R, "vllm", kObj, nullptr, kNotImpl},                    \
        {"response_format", S, "openai", kObj, nullptr, nullptr},              \
        {"structured_outputs", S, "vllm", kObj, nullptr, nullptr},             \
        {"guided_json", S, "vllm", kAny, nullptr, nullptr},                    \
        {"guided_regex", S, "vllm", kStr, nullptr, nullptr},                   \
        {"guided_choice", S, "vllm", kAny, nullptr, nullptr},                  \
        {"guided_grammar", S, "vllm", kStr, nullptr, nullptr},                 \
        {"guided_decoding_backend", R, "vllm", kStr, nullptr, kNotImpl}, {     \
        "guided_whitespace_pattern", R, "vllm", kStr, nullptr, kNotImpl        \
    }

constexpr FieldSpec kCompletions[] = {
    WARDEN_SAMPLING_FIELDS,
    {"prompt", S, "openai",
     R"({"oneOf":[{"type":"string"},{"type":"array","items":{"type":"string"}},)"
     R"({"type":"array","items":{"type":"integer"}},)"
     R"({"type":"array","items":{"type":"array","items":{"type":"integer"}}}]})",
     nullptr, nullptr},
    {"logprobs", S, "openai", kInt, nullptr, nullptr},
    {"echo", S, "openai", kBool, nullptr, nullptr},
    {"best_of", S, "openai", kInt, nullptr, nullptr},
    {"suffix", R, "openai", kStr, R"("")", kNotImpl},
};

constexpr FieldSpec kChat[] = {
    WARDEN_SAMPLING_FIELDS,
    {"messages", S, "openai", R"({"type":"array","items":{"type":"object"}})", nullptr, nullptr},
    {"max_completion_tokens", S, "openai", kInt, nullptr, nullptr},
    {"logprobs", S, "openai", kBool, nullptr, nullptr},
    {"top_logprobs", S, "openai", kInt, nullptr, nullptr},
    {"tools", S, "openai", R"({"type":"array","items":{"type":"object"}})", nullptr, nullptr},
    {"tool_choice", S, "openai", kAny, nullptr, nullptr},
    {"parallel_tool_calls", S, "openai", kBool, nullptr, nullptr},
    {"functions", R, "openai", kAny, "[]", kLegacyTools},
    {"function_call", R, "openai", kAny, R"("none")", kLegacyTools},
    {"chat_template_kwargs", S, "vllm", kObj, nullptr, nullptr},
    {"reasoning_effort", S, "openai",
     R"({"enum":["none","minimal","low","medium","high","xhigh","max"]})", nullptr, nullptr},
    {"include_reasoning", R, "vllm", kBool, nullptr, kReasoning},
    {"echo", R, "vllm", kBool, "false", kNotImpl},
    {"add_generation_prompt", R, "vllm", kBool, "true", kNotImpl},
    {"continue_final_message", R, "vllm", kBool, "false", kNotImpl},
    {"chat_template", R, "vllm", kStr, nullptr, kNotImpl},
    {"documents", R, "vllm", kAny, nullptr, kNotImpl},
    {"mm_processor_kwargs", R, "vllm", kObj, nullptr, kNotImpl},
    {"store", R, "openai", kBool, "false", kNotImpl},
    {"metadata", R, "openai", kObj, nullptr, kNotImpl},
    {"service_tier", R, "openai", kStr, R"("auto")", kNotImpl},
    {"modalities", R, "openai", kAny, R"(["text"])", kNotImpl},
    {"audio", R, "openai", kObj, nullptr, kNotImpl},
    {"prediction", R, "openai", kObj, nullptr, kNotImpl},
    {"web_search_options", R, "openai", kObj, nullptr, kNotImpl},
    {"verbosity", R, "openai", kStr, nullptr, kNotImpl},
    {"prompt_cache_key", R, "openai", kStr, nullptr, kNotImpl},
    {"safety_identifier", R, "openai", kStr, nullptr, kNotImpl},
};

#undef WARDEN_SAMPLING_FIELDS

constexpr FieldSpec kTokenize[] = {
    {"model", S, "vllm", kStr, nullptr, nullptr},
    {"prompt", S, "vllm", kStr, nullptr, nullptr},
    {"messages", S, "vllm", R"({"type":"array","items":{"type":"object"}})", nullptr, nullptr},
    {"add_special_tokens", S, "vllm", kBool, nullptr, nullptr},
    {"add_generation_prompt", S, "vllm", kBool, nullptr, nullptr},
    {"return_token_strs", S, "vllm", kBool, nullptr, nullptr},
    {"continue_final_message", R, "vllm", kBool, "false", kNotImpl},
    {"tools", S, "vllm", R"({"type":"array","items":{"type":"object"}})", nullptr, nullptr},
    {"chat_template", R, "vllm", kStr, nullptr, kNotImpl},
    {"chat_template_kwargs", S, "vllm", kObj, nullptr, nullptr},
    {"mm_processor_kwargs", R, "vllm", kObj, nullptr, kNotImpl},
};

constexpr FieldSpec kDetokenize[] = {
    {"model", S, "vllm", kStr, nullptr, nullptr},
    {"tokens", S, "vllm", kIds, nullptr, nullptr},
};

}  // namespace

std::span<const FieldSpec> request_fields(Endpoint ep) {
    switch (ep) {
        case Endpoint::Completions:
            return kCompletions;
        case Endpoint::ChatCompletions:
            return kChat;
        case Endpoint::Tokenize:
            return kTokenize;
        case Endpoint::Detokenize:
            return kDetokenize;
    }
    return {};
}

void check_fields(const json& body, Endpoint ep) {
    if (!body.is_object()) return;  // the parser refuses it with its own message
    const auto fields = request_fields(ep);
    for (const auto& [key, value] : body.items()) {
        const FieldSpec* spec = nullptr;
        for (const FieldSpec& f : fields)
            if (key == f.name) spec = &f;
        const std::string shown = util::printable(std::string(key), 64);
        if (!spec)
            throw ApiError(400,
                           "unknown field '" + shown +
                               "' (warden refuses fields it does not know rather than ignore "
                               "them; see /openapi.json)",
                           shown, "unknown_field");
        if (spec->status == FieldStatus::Supported || value.is_null()) continue;
        if (spec->noop && value == json::parse(spec->noop)) continue;
        throw ApiError(400, "'" + shown + "' " + spec->why, shown, "unsupported_field");
    }
}

}  // namespace warden::server
