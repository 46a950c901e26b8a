#include "server/api.h"

#include <algorithm>
#include <chrono>

#include "constrain/constraint.h"
#include "server/json_body.h"
#include "server/request_id.h"
#include "tokenizer/tokenizer.h"

namespace warden::server {

using json = nlohmann::json;

namespace {

int64_t now_s() {
    return std::chrono::duration_cast<std::chrono::seconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

}  // namespace

Route find_route(std::string_view target) {
    const std::string_view path = target.substr(0, target.find('?'));
    if (path == "/v1/completions") return Route::Completions;
    if (path == "/v1/chat/completions") return Route::ChatCompletions;
    if (path == "/v1/models") return Route::Models;
    if (path == "/health") return Route::Health;
    if (path == "/metrics") return Route::Metrics;
    return Route::None;
}

const char* route_method(Route r) {
    return r == Route::Completions || r == Route::ChatCompletions ? "POST" : "GET";
}

Api::Api(engine::Engine& eng, ModelInfo model,
         std::unordered_map<std::string, std::string> api_keys, int tenant_max_concurrency)
    : eng_(eng),
      model_(std::move(model)),
      api_keys_(std::move(api_keys)),
      tenant_max_concurrency_(tenant_max_concurrency) {
    if (!model_.vocab && model_.tok)
        model_.vocab = std::make_shared<const constrain::Vocabulary>(*model_.tok);
}

bool Api::needs_key(Route r) const {
    return !api_keys_.empty() && r != Route::Health && r != Route::None;
}

std::string Api::authenticate(std::string_view authorization) const {
    if (api_keys_.empty()) return "default";
    constexpr std::string_view prefix = "Bearer ";
    if (authorization.size() <= prefix.size() || authorization.substr(0, prefix.size()) != prefix)
        throw ApiError(401, "missing bearer API key (Authorization: Bearer KEY)", "",
                       "invalid_api_key");
    auto it = api_keys_.find(std::string(authorization.substr(prefix.size())));
    if (it == api_keys_.end()) throw ApiError(401, "invalid API key", "", "invalid_api_key");
    return it->second;
}

std::string Api::models_body() const {
    json m{{"id", model_.id},
           {"object", "model"},
           {"created", now_s()},
           {"owned_by", "warden"},
           {"max_model_len", std::min(model_.max_ctx, model_.kv_tokens)}};
    return dump_json(json{{"object", "list"}, {"data", json::array({m})}});
}

void Api::count_refusal(const std::string& tenant, const ApiError& e) {
    if (e.status == 429 || e.status == 401 || e.status == 503)
        eng_.metrics().count_abort(tenant, e.code.empty() ? std::to_string(e.status) : e.code);
}

std::shared_ptr<void> Api::busy_token() {
    ++busy_;
    return std::shared_ptr<void>(nullptr, [this](void*) { --busy_; });
}

std::shared_ptr<void> Api::claim_tenant_slot(const std::string& tenant) {
    {
        std::lock_guard lk(tenants_mu_);
        int& n = tenant_in_flight_[tenant];
        if (n >= tenant_max_concurrency_)
            throw ApiError(429, "too many concurrent requests for tenant '" + tenant + "'", "",
                           "tenant_concurrency_limit");
        ++n;
    }
    return std::shared_ptr<void>(nullptr, [this, tenant](void*) {
        std::lock_guard lk(tenants_mu_);
        if (--tenant_in_flight_[tenant] == 0) tenant_in_flight_.erase(tenant);
    });
}

std::shared_ptr<Generation> Api::start_generation(const std::string& body_text, bool chat,
                                                  const std::string& tenant) {
    if (draining_) throw ApiError(503, "the server is shutting down", "", "draining");
    const json body = parse_json_body(body_text);
    auto g = std::make_shared<Generation>();
    g->chat = chat;
    g->req = parse_request(body, chat, model_);
    g->model = model_.id;
    g->created = now_s();
    g->id = random_id(chat ? "chatcmpl-" : "cmpl-");
    g->tenant_slot = claim_tenant_slot(tenant);
    const auto stop_ids = model_.tok->stop_ids();
    int index = 0;
    for (size_t pi = 0; pi < g->req.prompts.size(); ++pi) {
        g->prompt_tokens += static_cast<int64_t>(g->req.prompts[pi].size());
        for (int j = 0; j < g->req.n; ++j) {
            engine::Request er;
            er.prompt = g->req.prompts[pi];
            er.max_new_tokens = g->req.max_tokens;
            er.sampling = g->req.sampling;
            er.sampling.seed += static_cast<uint64_t>(j);
            if (!g->req.ignore_eos) er.stop_ids = stop_ids;
            er.top_logprobs = g->req.top_logprobs;
            er.tenant = tenant;
            er.cache_salt = g->req.cache_salt;
            if (g->req.grammar)
                er.constraint = std::make_shared<constrain::Constraint>(g->req.grammar);
            auto sub = eng_.submit(std::move(er));
            if (sub.status != engine::SubmitStatus::Ok) {
                g->cancel_all();  // the choices submitted so far (all or nothing)
                if (sub.status == engine::SubmitStatus::QueueFull)
                    throw ApiError(429, "the request queue is full; retry later", "", "queue_full");
                throw ApiError(503, "the server is shutting down", "", "draining");
            }
            g->choices.emplace_back(index++, *model_.tok, sub.stream, stop_ids, g->req.stop,
                                    g->req.ignore_eos, chat, g->req.top_logprobs);
        }
    }
    return g;
}

}  // namespace warden::server
