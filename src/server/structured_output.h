#pragma once
// The structured-output fields of a request, compiled to a grammar for the vocabulary:
//   response_format: {"type": "text" | "json_object" | "json_schema",
//                     "json_schema": {"name", "schema", "strict", "description"}}   (OpenAI)
//   guided_json, guided_regex, guided_choice, guided_grammar                          (vLLM)
//   structured_outputs: {"json" | "regex" | "choice" | "grammar" | "json_object"}     (vLLM)
// At most one of them may constrain a request. A schema, regex or grammar that cannot be
// enforced exactly is a 400 naming the field (and the refused keyword in the message).
#include <memory>
#include <nlohmann/json.hpp>

#include "constrain/token_mask.h"
#include "server/openai_request.h"

namespace warden::server {

// Null when the request asks for no structure. Throws ApiError(400). Uses m.vocab (or, when
// the caller built none, one made from m.tok for this request).
std::shared_ptr<const constrain::CompiledGrammar> parse_structured_output(
    const nlohmann::json& body, const ModelInfo& m);

}  // namespace warden::server
