#pragma once
// Request bodies -> JSON with a nesting limit enforced while parsing, so an attacker's deeply
// nested body is refused before any tree is built or walked recursively (nlohmann's parser is
// iterative; copies, comparisons and the chat template renderer are not).
#include <nlohmann/json.hpp>
#include <string>

namespace warden::server {

constexpr int kMaxJsonDepth = 64;

// Throws ApiError(400): "invalid_json" for a syntax error, "json_too_deep" past `max_depth`
// nested arrays/objects, with `param` the top-level field it occurred under ("body" otherwise).
nlohmann::json parse_json_body(const std::string& body, int max_depth = kMaxJsonDepth);

}  // namespace warden::server
