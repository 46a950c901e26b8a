#pragma once
// The request fields each POST endpoint knows, and the check that no request field is silently
// ignored: a field warden implements is accepted (openai_request.cpp validates its value); a
// field it knows but does not implement is refused with 400 naming it (unless its value is the
// one that asks for nothing, e.g. "echo": false); any other field is refused as unknown. The same
// table is the request schema of /openapi.json, so the document and the server cannot disagree.
#include <nlohmann/json.hpp>
#include <span>
#include <string_view>

namespace warden::server {

enum class Endpoint { Completions, ChatCompletions, Tokenize, Detokenize };

enum class FieldStatus {
    Supported,  // implemented
    Refused,    // known (OpenAI or vLLM), not implemented: 400 unless the value is `noop`
};

struct FieldSpec {
    const char* name;
    FieldStatus status;
    const char* origin;  // "openai", "vllm" (vLLM's extra fields) or "warden"
    const char* schema;  // JSON Schema of the value (JSON text)
    const char* noop;    // Refused only: the JSON value that asks for nothing (null: none)
    const char* why;     // Refused only: the 400's explanation
};

// Every field `ep` knows, supported and refused.
std::span<const FieldSpec> request_fields(Endpoint ep);

// Throws ApiError(400, param = the field) for the first unknown or refused field of `body` (a
// JSON object). A field whose value is null counts as absent when it is known.
void check_fields(const nlohmann::json& body, Endpoint ep);

}  // namespace warden::server
