#include "server/json_body.h"

#include "server/api_error.h"

namespace warden::server {

using json = nlohmann::json;

namespace {

struct TooDeep {};

}  // namespace

json parse_json_body(const std::string& body, int max_depth) {
    std::string top_key;  // the top-level field being parsed, when the body is an object
    const json::parser_callback_t cb = [&](int depth, json::parse_event_t ev, json& parsed) {
        if (ev == json::parse_event_t::key && depth == 1)
            top_key = parsed.is_string() ? parsed.get<std::string>() : "";
        // At a container's start `depth` is its parent's; its contents sit one level deeper.
        if ((ev == json::parse_event_t::object_start || ev == json::parse_event_t::array_start) &&
            depth + 1 > max_depth) {
            throw TooDeep{};
        }
        return true;
    };
    try {
        return json::parse(body, cb);
    } catch (const TooDeep&) {
    } catch (const json::exception&) {
        throw ApiError(400, "the body is not valid JSON", "", "invalid_json");
    }
    throw ApiError(
        400, "the JSON body is nested more than " + std::to_string(max_depth) + " levels deep",
        top_key.empty() ? "body" : top_key, "json_too_deep");
}

}  // namespace warden::server
