// The tokenizer's endpoints, in vLLM's request and response shapes: POST /tokenize (a prompt,
// or chat messages rendered by the model's template), POST /detokenize and GET /tokenizer_info
// (what lm-evaluation-harness' remote tokenizer reads: the special tokens and the template).
#include <algorithm>

#include "server/api.h"
#include "server/field_allowlist.h"
#include "server/json_body.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/utf8.h"

namespace warden::server {

using json = nlohmann::json;

namespace {

[[noreturn]] void bad(const std::string& param, const std::string& msg) {
    throw ApiError(400, msg, param);
}

bool flag(const json& b, const char* k, bool dflt) {
    if (!b.contains(k) || b[k].is_null()) return dflt;
    if (!b[k].is_boolean()) bad(k, std::string("'") + k + "' must be a boolean");
    return b[k].get<bool>();
}

// "model" is optional here (as in vLLM); when given it must name the served model.
void check_model(const json& b, const ModelInfo& m) {
    if (!b.contains("model") || b["model"].is_null()) return;
    if (!b["model"].is_string()) bad("model", "'model' must be a string");
    const std::string id = b["model"].get<std::string>();
    if (id != m.id)
        throw ApiError(404,
                       "the model '" + util::printable(id, 100) +
                           "' does not exist (this server has '" + m.id + "')",
                       "model", "model_not_found");
}

json token_or_null(const tokenizer::Tokenizer& tok, int32_t id) {
    return id >= 0 ? json(tok.token_bytes(id)) : json(nullptr);
}

}  // namespace

std::string Api::tokenize_body(const std::string& text) const {
    const json b = parse_json_body(text);
    if (!b.is_object()) bad("", "the request body must be a JSON object");
    check_fields(b, Endpoint::Tokenize);
    check_model(b, model_);
    const bool has_prompt = b.contains("prompt") && !b["prompt"].is_null();
    const bool has_messages = b.contains("messages") && !b["messages"].is_null();
    if (has_prompt == has_messages) bad("prompt", "give exactly one of 'prompt' and 'messages'");
    std::vector<int32_t> ids;
    if (has_prompt) {
        if (!b["prompt"].is_string()) bad("prompt", "'prompt' must be a string");
        const std::string p = b["prompt"].get<std::string>();
        if (util::find_invalid_utf8(p) != std::string::npos)
            bad("prompt", "'prompt' is not valid UTF-8");
        if (b.contains("add_generation_prompt") && !b["add_generation_prompt"].is_null())
            bad("add_generation_prompt", "'add_generation_prompt' needs 'messages'");
        for (const char* k : {"tools", "chat_template_kwargs"})
            if (b.contains(k) && !b[k].is_null())
                bad(k, std::string("'") + k + "' needs 'messages'");
        ids = model_.tok->encode(p, flag(b, "add_special_tokens", true));
    } else {
        if (flag(b, "add_special_tokens", false))
            bad("add_special_tokens",
                "'add_special_tokens' is not implemented for messages (the template writes them)");
        json tools = nullptr;
        if (b.contains("tools") && !b["tools"].is_null()) {
            if (!b["tools"].is_array()) bad("tools", "'tools' must be an array");
            tools = b["tools"];
        }
        ids = model_.tok->encode(render_chat(b["messages"], tools, chat_template_kwargs(b),
                                             flag(b, "add_generation_prompt", true), model_),
                                 false, true);
    }
    json out{{"count", ids.size()},
             {"max_model_len", std::min(model_.max_ctx, model_.kv_tokens)},
             {"tokens", ids},
             {"token_strs", nullptr}};
    if (flag(b, "return_token_strs", false)) {
        json strs = json::array();
        for (int32_t id : ids) strs.push_back(model_.tok->token_bytes(id));
        out["token_strs"] = strs;
    }
    return dump_json(out);
}

std::string Api::detokenize_body(const std::string& text) const {
    const json b = parse_json_body(text);
    if (!b.is_object()) bad("", "the request body must be a JSON object");
    check_fields(b, Endpoint::Detokenize);
    check_model(b, model_);
    if (!b.contains("tokens") || !b["tokens"].is_array())
        bad("tokens", "'tokens' must be an array");
    std::vector<int32_t> ids;
    for (const json& t : b["tokens"]) {
        if (!t.is_number_integer() || t.get<int64_t>() < 0 ||
            t.get<int64_t>() >= model_.tok->vocab_size())
            bad("tokens", "'tokens' holds a token id outside the vocabulary");
        ids.push_back(t.get<int32_t>());
    }
    return dump_json(json{{"prompt", model_.tok->decode(ids)}});
}

std::string Api::tokenizer_info_body() const {
    const tokenizer::Tokenizer& tok = *model_.tok;
    return dump_json(json{
        {"tokenizer_class", tok.kind()},
        {"bos_token", token_or_null(tok, tok.bos_id())},
        {"eos_token", token_or_null(tok, tok.eos_id())},
        {"pad_token", nullptr},
        {"bos_token_id", tok.bos_id() >= 0 ? json(tok.bos_id()) : json(nullptr)},
        {"eos_token_id", tok.eos_id() >= 0 ? json(tok.eos_id()) : json(nullptr)},
        {"stop_token_ids", tok.stop_ids()},
        {"vocab_size", tok.vocab_size()},
        {"model_max_length", std::min(model_.max_ctx, model_.kv_tokens)},
        {"chat_template",
         model_.chat_template_source.empty() ? json(nullptr) : json(model_.chat_template_source)},
    });
}

}  // namespace warden::server
