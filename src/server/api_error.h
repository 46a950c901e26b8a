#pragma once
// The one error type of the HTTP layer: an HTTP status plus OpenAI's error object
// {"error": {"message", "type", "param", "code"}}.
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

namespace warden::server {

struct ApiError : std::runtime_error {
    int status;
    std::string type, param, code;
    ApiError(int st, std::string msg, std::string param_ = "", std::string code_ = "")
        : std::runtime_error(std::move(msg)),
          status(st),
          param(std::move(param_)),
          code(std::move(code_)) {
        type = st == 401   ? "authentication_error"
               : st == 404 ? "not_found_error"
               : st == 429 ? "rate_limit_error"
               : st >= 500 ? (st == 503 ? "service_unavailable" : "server_error")
                           : "invalid_request_error";
    }
    nlohmann::json body() const {
        nlohmann::json e;
        e["message"] = what();
        e["type"] = type;
        e["param"] = param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param);
        e["code"] = code.empty() ? nlohmann::json(nullptr) : nlohmann::json(code);
        return nlohmann::json{{"error", e}};
    }
};

}  // namespace warden::server
