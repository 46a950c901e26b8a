// GET /openapi.json and GET /version. The OpenAPI document is built from the route table
// (api.cpp) and the request-field allow-list (field_allowlist.cpp), the same tables the server
// answers by, so it describes exactly what the server accepts: a request schema lists the
// implemented fields (additionalProperties: false) and, under x-warden-refused-fields, the known
// fields that are answered with 400.
#include "server/api.h"
#include "server/field_allowlist.h"
#include "util/version.h"

namespace warden::server {

using json = nlohmann::json;

namespace {

const char* summary(Route r) {
    switch (r) {
        case Route::Completions:
            return "Text completion (OpenAI)";
        case Route::ChatCompletions:
            return "Chat completion (OpenAI), the prompt rendered by the model's chat template";
        case Route::Models:
            return "The served model (OpenAI)";
        case Route::Model:
            return "One model by id (OpenAI); 404 unless it is the served one";
        case Route::Health:
            return "Liveness: 200 while serving, 503 while draining";
        case Route::Metrics:
            return "Prometheus metrics";
        case Route::Tokenize:
            return "Token ids of a prompt or of rendered chat messages (vLLM)";
        case Route::Detokenize:
            return "Text of token ids (vLLM)";
        case Route::TokenizerInfo:
            return "Special tokens, vocabulary size and chat template (vLLM)";
        case Route::Version:
            return "The server's version";
        case Route::OpenApi:
            return "This document";
        case Route::None:
            break;
    }
    return "";
}

bool endpoint_of(Route r, Endpoint& ep) {
    switch (r) {
        case Route::Completions:
            ep = Endpoint::Completions;
            return true;
        case Route::ChatCompletions:
            ep = Endpoint::ChatCompletions;
            return true;
        case Route::Tokenize:
            ep = Endpoint::Tokenize;
            return true;
        case Route::Detokenize:
            ep = Endpoint::Detokenize;
            return true;
        default:
            return false;
    }
}

json request_schema(Endpoint ep) {
    json props = json::object(), refused = json::array();
    for (const FieldSpec& f : request_fields(ep)) {
        if (f.status == FieldStatus::Supported) {
            json s = json::parse(f.schema);
            if (std::string(f.origin) != "openai") s["x-origin"] = f.origin;
            props[f.name] = s;
        } else {
            refused.push_back(f.name);
        }
    }
    json s{{"type", "object"}, {"properties", props}, {"additionalProperties", false}};
    if (!refused.empty()) s["x-warden-refused-fields"] = refused;
    return s;
}

json error_response() {
    return json{{"description", "error"},
                {"content",
                 {{"application/json", {{"schema", {{"$ref", "#/components/schemas/Error"}}}}}}}};
}

}  // namespace

std::string Api::version_body() {
    return dump_json(json{{"version", util::kVersion}});
}

std::string Api::openapi_body() {
    json paths = json::object();
    for (const RouteInfo& ri : all_routes()) {
        json op{{"summary", summary(ri.route)}, {"operationId", ri.path}};
        json ok{{"description", "OK"}};
        ok["content"] = ri.route == Route::Metrics
                            ? json{{"text/plain", json::object()}}
                            : json{{"application/json", {{"schema", {{"type", "object"}}}}}};
        if (ri.route == Route::Completions || ri.route == Route::ChatCompletions)
            ok["content"]["text/event-stream"] = json::object();
        op["responses"] = json{{"200", ok}, {"default", error_response()}};
        Endpoint ep;
        if (endpoint_of(ri.route, ep))
            op["requestBody"] =
                json{{"required", true},
                     {"content", {{"application/json", {{"schema", request_schema(ep)}}}}}};
        if (ri.route == Route::Model)
            op["parameters"] = json::array({json{{"name", "model"},
                                                 {"in", "path"},
                                                 {"required", true},
                                                 {"schema", {{"type", "string"}}}}});
        std::string method = route_method(ri.route);
        for (auto& c : method) c = static_cast<char>(c - 'A' + 'a');
        paths[ri.path] = json{{method, op}};
    }
    json error{{"type", "object"},
               {"properties",
                {{"error",
                  {{"type", "object"},
                   {"properties",
                    {{"message", {{"type", "string"}}},
                     {"type", {{"type", "string"}}},
                     {"param", {{"type", {"string", "null"}}}},
                     {"code", {{"type", {"string", "null"}}}}}}}}}}};
    json doc{{"openapi", "3.1.0"},
             {"info",
              {{"title", "warden"},
               {"version", util::kVersion},
               {"description",
                "OpenAI-compatible LLM inference server. Request fields not listed are refused "
                "with 400 naming them."}}},
             {"paths", paths},
             {"components",
              {{"schemas", {{"Error", error}}},
               {"securitySchemes", {{"bearer", {{"type", "http"}, {"scheme", "bearer"}}}}}}}};
    return dump_json(doc);
}

}  // namespace warden::server
