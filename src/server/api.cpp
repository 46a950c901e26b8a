#include "server/api.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <future>

#include "chat_output/chat_output.h"
#include "constrain/constraint.h"
#include "server/json_body.h"
#include "server/request_id.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/thread_priority.h"

namespace warden::server {

using json = nlohmann::json;

namespace {

int64_t now_s() {
    return std::chrono::duration_cast<std::chrono::seconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

std::unique_ptr<chat_output::ChatOutputParser> make_output_parser(const ChatOutputOptions& o) {
    return std::make_unique<chat_output::ChatOutputParser>(
        o.reasoning_parser.empty()
            ? nullptr
            : chat_output::make_reasoning_parser(o.reasoning_parser, o.reasoning_starts_inside),
        o.tool_parser.empty() ? nullptr : chat_output::make_tool_parser(o.tool_parser, o.tools),
        o.parallel_tool_calls);
}

}  // namespace

namespace {

constexpr RouteInfo kRoutes[] = {
    {Route::Completions, "/v1/completions"},
    {Route::ChatCompletions, "/v1/chat/completions"},
    {Route::Models, "/v1/models"},
    {Route::Model, "/v1/models/{model}"},
    {Route::Health, "/health"},
    {Route::Metrics, "/metrics"},
    {Route::Tokenize, "/tokenize"},
    {Route::Detokenize, "/detokenize"},
    {Route::TokenizerInfo, "/tokenizer_info"},
    {Route::Version, "/version"},
    {Route::OpenApi, "/openapi.json"},
};

constexpr std::string_view kModelPrefix = "/v1/models/";

}  // namespace

std::span<const RouteInfo> all_routes() {
    return kRoutes;
}

Route find_route(std::string_view target) {
    const std::string_view path = target.substr(0, target.find('?'));
    for (const RouteInfo& r : kRoutes)
        if (path == r.path) return r.route;
    if (path.size() > kModelPrefix.size() && path.substr(0, kModelPrefix.size()) == kModelPrefix)
        return Route::Model;
    return Route::None;
}

const char* route_method(Route r) {
    return r == Route::Completions || r == Route::ChatCompletions || r == Route::Tokenize ||
                   r == Route::Detokenize
               ? "POST"
               : "GET";
}

Api::Api(engine::Engine& eng, ModelInfo model,
         std::unordered_map<std::string, std::string> api_keys, int tenant_max_concurrency)
    : eng_(eng),
      model_(std::move(model)),
      api_keys_(std::move(api_keys)),
      tenant_max_concurrency_(tenant_max_concurrency) {
    if (!model_.vocab.valid() && model_.tok) {
        // Indexing the token bytes takes tens of milliseconds on a 50k-token vocabulary: done on
        // a thread of its own, at a lower priority than the first requests' own work, so the
        // server is ready without it (ModelInfo::vocabulary waits for it).
        const tokenizer::Tokenizer* tok = model_.tok;
        model_.vocab = std::async(std::launch::async, [tok] {
                           (void)util::lower_this_thread_priority(10);
                           return std::shared_ptr<const constrain::Vocabulary>(
                               std::make_shared<const constrain::Vocabulary>(*tok));
                       }).share();
    }
}

bool Api::needs_key(Route r) const {
    return !api_keys_.empty() && r != Route::Health && r != Route::Version && r != Route::OpenApi &&
           r != Route::None;
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

namespace {

json model_json(const ModelInfo& m) {
    return json{{"id", m.id},
                {"object", "model"},
                {"created", now_s()},
                {"owned_by", "warden"},
                {"max_model_len", std::min(m.max_ctx, m.kv_tokens)}};
}

// %XX escapes of a path segment decoded (the SDK quotes ids such as "org/name").
std::string percent_decoded(std::string_view s) {
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '%' && i + 2 < s.size() &&
            std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
            std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
            out += static_cast<char>(std::stoi(std::string(s.substr(i + 1, 2)), nullptr, 16));
            i += 2;
        } else {
            out += s[i];
        }
    }
    return out;
}

}  // namespace

std::string Api::models_body() const {
    return dump_json(json{{"object", "list"}, {"data", json::array({model_json(model_)})}});
}

std::string Api::model_body(std::string_view target) const {
    const std::string_view path = target.substr(0, target.find('?'));
    const std::string id = percent_decoded(path.substr(kModelPrefix.size()));
    if (id != model_.id)
        throw ApiError(404,
                       "the model '" + util::printable(id, 100) +
                           "' does not exist (this server has '" + model_.id + "')",
                       "model", "model_not_found");
    return dump_json(model_json(model_));
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
                                                  const std::string& tenant,
                                                  const std::string& prefill_hint) {
    if (draining_) throw ApiError(503, "the server is shutting down", "", "draining");
    if (!prefill_hint.empty() && !eng_.knows_prefill_server(prefill_hint))
        throw ApiError(400, "X-Warden-Prefill names no prefill server of this decode server", "",
                       "invalid_prefill_server");
    const json body = parse_json_body(body_text);
    auto g = std::make_shared<Generation>();
    g->chat = chat;
    g->req = parse_request(body, chat, model_);
    g->model = model_.id;
    g->created = now_s();
    g->id = random_id(chat ? "chatcmpl-" : "cmpl-");
    g->tenant_slot = claim_tenant_slot(tenant);
    const CompletionRequest& q = g->req;
    std::vector<int32_t> stop_ids = q.ignore_eos ? std::vector<int32_t>{} : model_.tok->stop_ids();
    stop_ids.insert(stop_ids.end(), q.stop_token_ids.begin(), q.stop_token_ids.end());
    int index = 0;
    for (size_t pi = 0; pi < q.prompts.size(); ++pi) {
        g->prompt_tokens += static_cast<int64_t>(q.prompts[pi].size());
        ChoiceOptions co;
        co.stop_ids = stop_ids;
        co.stop = q.stop;
        co.chat = chat;
        co.top_logprobs = q.top_logprobs;
        co.max_tokens = q.max_tokens;
        co.include_stop_str = q.include_stop_str_in_output;
        co.skip_special = q.skip_special_tokens;
        co.echo = q.echo;
        if (q.echo || q.prompt_logprobs >= 0) co.prompt = q.prompts[pi];
        if (q.echo)
            co.echo_text =
                q.prompt_texts[pi].empty() ? model_.tok->decode(q.prompts[pi]) : q.prompt_texts[pi];
        co.prompt_logprobs = q.prompt_logprobs;
        for (int j = 0; j < g->per_prompt(); ++j) {
            engine::Request er;
            er.prompt = q.prompts[pi];
            er.max_new_tokens = std::max<int64_t>(q.max_tokens, 1);
            er.sampling = q.sampling;
            er.sampling.seed += static_cast<uint64_t>(j);
            er.stop_ids = stop_ids;
            // best_of ranks the choices by their tokens' logprobs
            er.top_logprobs = q.best_of > q.n ? std::max(q.top_logprobs, 0) : q.top_logprobs;
            er.prompt_logprobs = q.engine_prompt_logprobs();
            er.logit_bias = q.logit_bias;
            er.min_tokens = q.min_tokens;
            er.tenant = tenant;
            er.cache_salt = q.cache_salt;
            er.prefill_hint = prefill_hint;
            if (q.grammar) er.constraint = std::make_shared<constrain::Constraint>(q.grammar);
            auto sub = eng_.submit(std::move(er));
            if (sub.status != engine::SubmitStatus::Ok) {
                g->cancel_all();  // the choices submitted so far (all or nothing)
                if (sub.status == engine::SubmitStatus::QueueFull)
                    throw ApiError(429, "the request queue is full; retry later", "", "queue_full");
                throw ApiError(503, "the server is shutting down", "", "draining");
            }
            g->choices.emplace_back(index++, *model_.tok, sub.stream, co);
            if (chat && g->req.chat_output.active())
                g->choices.back().output_parser = make_output_parser(g->req.chat_output);
        }
    }
    return g;
}

}  // namespace warden::server
