#pragma once
// JSON Schema -> grammar of the JSON texts that validate against it: the strict subset OpenAI
// structured outputs and vLLM accept.
//   type (one or a list): object, array, string, number, integer, boolean, null
//   object: properties (generated in the order of the schema object's keys; nlohmann::json
//     sorts them by name), required, additionalProperties (false,
//     or absent on an object with properties: no other keys, as in OpenAI strict mode and
//     xgrammar's strict mode; true or a schema: only on an object without properties; an
//     object schema with neither is any object)
//   array: items, minItems, maxItems;  string: minLength, maxLength, pattern, format (date,
//   time, date-time, uuid);  enum, const, anyOf, oneOf (as anyOf), allOf of one schema,
//   $ref to "#", "#/$defs/...", "#/definitions/..." (recursive references work), $defs.
// Annotations (title, description, default, examples, $schema, $id, $comment, deprecated,
// readOnly, writeOnly) are allowed. Every other keyword throws SpecError naming it: a schema is
// enforced in full or refused, never partly ignored.
//
// The JSON text has no leading whitespace; between tokens and at the end short whitespace
// runs are allowed (a space, or a newline and up to 20 spaces/tabs), so a model cannot spend
// its budget on endless whitespace.
#include <nlohmann/json.hpp>
#include <string>

#include "constrain/grammar.h"

namespace warden::constrain {

// GBNF text (root rule "root") for the schema.
std::string json_schema_to_gbnf(const nlohmann::json& schema);
Grammar json_schema_grammar(const nlohmann::json& schema);

// Any JSON object (response_format json_object).
Grammar json_object_grammar();

}  // namespace warden::constrain
