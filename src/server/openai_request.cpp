#include "server/openai_request.h"

#include <cmath>
#include <random>

#include "chat_output/reasoning_parser.h"
#include "chat_template/chat_template.h"
#include "constrain/constraint.h"
#include "server/field_allowlist.h"
#include "server/reasoning_effort.h"
#include "server/structured_output.h"
#include "server/tool_grammar.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/utf8.h"

namespace warden::server {

std::shared_ptr<const constrain::Vocabulary> ModelInfo::vocabulary() const {
    if (vocab.valid()) return vocab.get();
    return std::make_shared<const constrain::Vocabulary>(*tok);
}

namespace {

using json = nlohmann::json;

[[noreturn]] void bad(const std::string& param, const std::string& msg) {
    throw ApiError(400, msg, param);
}

bool present(const json& b, const char* k) {
    return b.contains(k) && !b[k].is_null();
}

double number(const json& b, const char* k, double lo, double hi) {
    const json& v = b[k];
    if (!v.is_number()) bad(k, std::string("'") + k + "' must be a number");
    const double d = v.get<double>();
    if (!std::isfinite(d) || d < lo || d > hi)
        bad(k, std::string("'") + k + "' must be in [" + std::to_string(lo) + ", " +
                   std::to_string(hi) + "]");
    return d;
}

int64_t integer(const json& b, const char* k, int64_t lo, int64_t hi) {
    const json& v = b[k];
    if (!v.is_number_integer()) bad(k, std::string("'") + k + "' must be an integer");
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
        bad(k, std::string("'") + k + "' is out of range");
    const int64_t i = v.get<int64_t>();
    if (i < lo || i > hi)
        bad(k, std::string("'") + k + "' must be in [" + std::to_string(lo) + ", " +
                   std::to_string(hi) + "]");
    return i;
}

bool boolean(const json& b, const char* k) {
    if (!b[k].is_boolean()) bad(k, std::string("'") + k + "' must be a boolean");
    return b[k].get<bool>();
}

std::string text(const json& v, const std::string& param) {
    if (!v.is_string()) bad(param, "'" + param + "' must be a string");
    std::string s = v.get<std::string>();
    if (util::find_invalid_utf8(s) != std::string::npos)
        bad(param, "'" + param + "' is not valid UTF-8");
    return s;
}

std::vector<int32_t> token_ids(const json& a, const ModelInfo& m, const std::string& param) {
    std::vector<int32_t> ids;
    for (const json& t : a) {
        if (!t.is_number_integer() || t.get<int64_t>() < 0 ||
            t.get<int64_t>() >= m.tok->vocab_size())
            bad(param, "'" + param + "' holds a token id outside the vocabulary");
        ids.push_back(t.get<int32_t>());
    }
    return ids;
}

// Chat messages -> the template's input: content parts of type "text" are joined; null content
// (an assistant message with tool calls) renders as "", as in vLLM; tool call arguments as
// message_tool_calls gives them.
json chat_messages(const json& msgs, bool args_as_objects) {
    if (!msgs.is_array() || msgs.empty()) bad("messages", "'messages' must be a non-empty array");
    if (msgs.size() > 4096) bad("messages", "too many messages");
    json out = json::array();
    for (size_t i = 0; i < msgs.size(); ++i) {
        const json& m = msgs[i];
        const std::string p = "messages[" + std::to_string(i) + "]";
        if (!m.is_object()) bad(p, "'" + p + "' must be an object");
        if (!m.contains("role")) bad(p + ".role", "'" + p + ".role' is required");
        const std::string role = text(m["role"], p + ".role");
        if (role != "system" && role != "user" && role != "assistant" && role != "tool" &&
            role != "developer")
            bad(p + ".role", "unknown role '" + util::printable(role, 40) + "'");
        json o = json::object();
        o["role"] = role == "developer" ? "system" : role;
        const json c = m.contains("content") ? m["content"] : json(nullptr);
        if (c.is_string()) {
            o["content"] = text(c, p + ".content");
        } else if (c.is_array()) {
            std::string joined;
            for (const json& part : c) {
                if (!part.is_object() || !part.contains("type") || part["type"] != "text" ||
                    !part.contains("text"))
                    bad(p + ".content", "only text content parts are supported");
                joined += text(part["text"], p + ".content.text");
            }
            o["content"] = joined;
        } else if (c.is_null() && role == "assistant") {
            o["content"] = "";
        } else {
            bad(p + ".content", "'" + p + ".content' must be a string or an array of text parts");
        }
        for (const char* k : {"name", "tool_call_id", "reasoning_content"})
            if (m.contains(k) && !m[k].is_null()) o[k] = text(m[k], p + "." + k);
        if (m.contains("tool_calls") && !m["tool_calls"].is_null()) {
            if (role != "assistant")
                bad(p + ".tool_calls", "only assistant messages have tool_calls");
            o["tool_calls"] =
                message_tool_calls(m["tool_calls"], p + ".tool_calls", args_as_objects);
        }
        out.push_back(o);
    }
    return out;
}

// echo, prompt_logprobs, best_of, logit_bias, min_tokens, stop_token_ids,
// include_stop_str_in_output, skip_special_tokens (after n, stream and logprobs are known).
void parse_output_controls(const json& b, bool chat, const ModelInfo& m, CompletionRequest& r) {
    if (!chat && present(b, "echo")) r.echo = boolean(b, "echo");
    if (present(b, "prompt_logprobs")) {
        r.prompt_logprobs = static_cast<int32_t>(integer(b, "prompt_logprobs", 0, 20));
        if (r.stream)
            bad("prompt_logprobs", "'prompt_logprobs' is not implemented with 'stream' (use echo)");
    }
    if (present(b, "best_of")) {
        r.best_of = static_cast<int>(integer(b, "best_of", 1, 16));
        if (r.best_of < r.n) bad("best_of", "'best_of' must be at least 'n'");
        if (r.best_of > r.n && r.stream)
            bad("best_of", "'best_of' greater than 'n' cannot be streamed");
        if (r.best_of * r.prompts.size() > 64) bad("best_of", "at most 64 choices per request");
    }
    if (present(b, "logit_bias")) {
        const json& lb = b["logit_bias"];
        if (!lb.is_object()) bad("logit_bias", "'logit_bias' must be an object");
        if (lb.size() > 1024) bad("logit_bias", "at most 1024 entries in 'logit_bias'");
        for (const auto& [k, v] : lb.items()) {
            int64_t id = -1;
            try {
                size_t used = 0;
                id = std::stoll(k, &used);
                if (used != k.size()) id = -1;
            } catch (const std::exception&) {
                id = -1;
            }
            if (id < 0 || id >= m.tok->vocab_size())
                bad("logit_bias", "'logit_bias' keys must be token ids in the vocabulary");
            if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < -100 ||
                v.get<double>() > 100)
                bad("logit_bias", "'logit_bias' values must be numbers in [-100, 100]");
            r.logit_bias.emplace_back(static_cast<int32_t>(id), v.get<float>());
        }
    }
    if (present(b, "min_tokens")) r.min_tokens = integer(b, "min_tokens", 0, INT64_MAX);
    if (present(b, "stop_token_ids")) {
        const json& s = b["stop_token_ids"];
        if (!s.is_array() || s.size() > 64)
            bad("stop_token_ids", "'stop_token_ids' must be an array of at most 64 token ids");
        r.stop_token_ids = token_ids(s, m, "stop_token_ids");
    }
    if (present(b, "include_stop_str_in_output"))
        r.include_stop_str_in_output = boolean(b, "include_stop_str_in_output");
    if (present(b, "skip_special_tokens"))
        r.skip_special_tokens = boolean(b, "skip_special_tokens");
}

}  // namespace

std::string render_chat(const json& messages, const json& tools, const json& kwargs,
                        bool add_generation_prompt, const ModelInfo& m) {
    if (!m.chat)
        throw ApiError(400, "this model has no chat template; use /v1/completions", "messages");
    const json msgs = chat_messages(messages, true);
    json extra = json::object();
    extra["bos_token"] = m.tok->bos_id() >= 0 ? m.tok->token_bytes(m.tok->bos_id()) : "";
    extra["eos_token"] = m.tok->eos_id() >= 0 ? m.tok->token_bytes(m.tok->eos_id()) : "";
    if (kwargs.is_object()) extra.update(kwargs);
    try {
        return m.chat->render(msgs, tools, add_generation_prompt, extra);
    } catch (const util::Error& e) {
        // Templates that concatenate tool-call arguments as text (DeepSeek-V3.1) need them as
        // the JSON strings the client sent.
        const std::string first_error = e.what();
        const json as_text = chat_messages(messages, false);
        if (as_text == msgs) bad("messages", "chat template: " + first_error);
        try {
            return m.chat->render(as_text, tools, add_generation_prompt, extra);
        } catch (const util::Error&) {
            bad("messages", "chat template: " + first_error);
        }
    }
}

std::vector<int32_t> chat_prompt(const json& messages, bool add_generation_prompt,
                                 const ModelInfo& m) {
    return m.tok->encode(render_chat(messages, nullptr, json::object(), add_generation_prompt, m),
                         false, true);
}

CompletionRequest parse_request(const json& b, bool chat, const ModelInfo& m) {
    if (!b.is_object()) bad("", "the request body must be a JSON object");
    check_fields(b, chat ? Endpoint::ChatCompletions : Endpoint::Completions);
    CompletionRequest r;
    r.chat = chat;
    if (!b.contains("model")) bad("model", "'model' is required");
    const std::string model = text(b["model"], "model");
    if (model != m.id)
        throw ApiError(404,
                       "the model '" + util::printable(model, 100) +
                           "' does not exist (this server has '" + m.id + "')",
                       "model", "model_not_found");

    if (chat) {
        if (!m.chat)
            throw ApiError(400, "this model has no chat template; use /v1/completions", "messages");
        if (!b.contains("messages")) bad("messages", "'messages' is required");
        parse_tool_fields(b, m, r.chat_output);
        if (r.chat_output.tool_required) {
            auto vocab = m.vocabulary();
            r.grammar =
                constrain::compile(tool_call_grammar(r.chat_output.tool_parser, r.chat_output.tools,
                                                     r.chat_output.tool_choice_name,
                                                     r.chat_output.parallel_tool_calls),
                                   vocab);
        }
        json kwargs = chat_template_kwargs(b);
        apply_reasoning_effort(b, m.chat_template_source, kwargs);
        const std::string rendered =
            render_chat(b["messages"], r.chat_output.tools, kwargs, true, m);
        r.chat_output.reasoning_starts_inside = !r.chat_output.reasoning_parser.empty() &&
                                                chat_output::prompt_opens_reasoning(rendered);
        r.prompts.push_back(m.tok->encode(rendered, false, true));
        r.prompt_texts.emplace_back();
    } else {
        if (!b.contains("prompt")) bad("prompt", "'prompt' is required");
        const json& p = b["prompt"];
        if (p.is_string()) {
            r.prompt_texts.push_back(text(p, "prompt"));
            r.prompts.push_back(m.tok->encode(r.prompt_texts.back(), true));
        } else if (p.is_array() && !p.empty() && p[0].is_number_integer()) {
            r.prompt_texts.emplace_back();
            r.prompts.push_back(token_ids(p, m, "prompt"));
        } else if (p.is_array() && !p.empty() && p.size() <= 64) {
            for (const json& e : p) {
                if (e.is_string()) {
                    r.prompt_texts.push_back(text(e, "prompt"));
                    r.prompts.push_back(m.tok->encode(r.prompt_texts.back(), true));
                } else if (e.is_array()) {
                    r.prompt_texts.emplace_back();
                    r.prompts.push_back(token_ids(e, m, "prompt"));
                } else
                    bad("prompt", "'prompt' must be a string, an array of strings or token ids");
            }
        } else {
            bad("prompt",
                "'prompt' must be a string, an array of strings or token ids (at most 64)");
        }
    }
    for (const auto& p : r.prompts)
        if (p.empty()) bad(chat ? "messages" : "prompt", "the prompt is empty");

    // Sampling: OpenAI defaults (temperature 1, top_p 1, no top-k/min-p).
    r.sampling.temperature = 1.0f;
    r.sampling.top_k = 0;
    r.sampling.top_p = 1.0f;
    r.sampling.min_p = 0.0f;
    if (present(b, "temperature"))
        r.sampling.temperature = static_cast<float>(number(b, "temperature", 0, 2));
    if (present(b, "top_p")) {
        r.sampling.top_p = static_cast<float>(number(b, "top_p", 0, 1));
        if (r.sampling.top_p <= 0.0f) bad("top_p", "'top_p' must be in (0, 1]");
    }
    if (present(b, "top_k"))
        r.sampling.top_k = static_cast<int32_t>(integer(b, "top_k", -1, 1 << 20));
    if (r.sampling.top_k < 0) r.sampling.top_k = 0;
    if (present(b, "min_p")) r.sampling.min_p = static_cast<float>(number(b, "min_p", 0, 1));
    if (present(b, "frequency_penalty"))
        r.sampling.frequency_penalty = static_cast<float>(number(b, "frequency_penalty", -2, 2));
    if (present(b, "presence_penalty"))
        r.sampling.presence_penalty = static_cast<float>(number(b, "presence_penalty", -2, 2));
    if (present(b, "repetition_penalty"))
        r.sampling.repetition_penalty =
            static_cast<float>(number(b, "repetition_penalty", 0.01, 10));
    if (present(b, "seed"))
        r.sampling.seed = static_cast<uint64_t>(integer(b, "seed", INT64_MIN, INT64_MAX));
    else
        r.sampling.seed = std::random_device{}();
    if (present(b, "n")) r.n = static_cast<int>(integer(b, "n", 1, 16));
    if (r.n * r.prompts.size() > 64) bad("n", "at most 64 choices per request");
    if (present(b, "stream")) r.stream = boolean(b, "stream");
    if (present(b, "stream_options")) {
        const json& so = b["stream_options"];
        if (!so.is_object()) bad("stream_options", "'stream_options' must be an object");
        if (!r.stream)
            bad("stream_options", "'stream_options' is only allowed when 'stream' is true");
        if (present(so, "include_usage")) {
            if (!so["include_usage"].is_boolean())
                bad("stream_options.include_usage", "'include_usage' must be a boolean");
            r.include_usage = so["include_usage"].get<bool>();
        }
    }
    if (present(b, "user")) text(b["user"], "user");  // the caller's end-user id: not used
    if (present(b, "ignore_eos")) r.ignore_eos = boolean(b, "ignore_eos");
    if (present(b, "cache_salt")) {
        r.cache_salt = text(b["cache_salt"], "cache_salt");
        if (r.cache_salt.empty() || r.cache_salt.size() > 256)
            bad("cache_salt", "'cache_salt' must have 1 to 256 bytes");
    }
    if (present(b, "stop")) {
        const json& s = b["stop"];
        if (s.is_string()) {
            r.stop.push_back(text(s, "stop"));
        } else if (s.is_array()) {
            if (s.size() > 16) bad("stop", "at most 16 stop sequences");
            for (const json& e : s) r.stop.push_back(text(e, "stop"));
        } else {
            bad("stop", "'stop' must be a string or an array of strings");
        }
        for (const auto& s1 : r.stop)
            if (s1.empty() || s1.size() > 256)
                bad("stop", "stop sequences must have 1 to 256 bytes");
    }
    if (chat) {
        bool lp = false;
        if (present(b, "logprobs")) lp = boolean(b, "logprobs");
        if (present(b, "top_logprobs")) {
            const int64_t k = integer(b, "top_logprobs", 0, 20);
            if (!lp) bad("top_logprobs", "'top_logprobs' requires 'logprobs': true");
            r.top_logprobs = static_cast<int32_t>(k);
        } else if (lp) {
            r.top_logprobs = 0;
        }
    } else if (present(b, "logprobs")) {
        r.top_logprobs = static_cast<int32_t>(integer(b, "logprobs", 0, 5));
    }

    parse_output_controls(b, chat, m, r);
    if (r.skip_special_tokens && !r.chat_output.tool_parser.empty())
        bad("skip_special_tokens",
            "'skip_special_tokens' would drop the markers tool calls are read from; leave it false "
            "with 'tools'");
    const auto structured = parse_structured_output(b, m);
    if (structured) {
        if (r.grammar)
            bad("tool_choice",
                "'tool_choice' required or named cannot be combined with a "
                "structured-output field (response_format, guided_*)");
        r.grammar = structured;
    }

    const int64_t limit = std::min(m.max_ctx, m.kv_tokens);
    size_t longest = 0;
    for (const auto& p : r.prompts) longest = std::max(longest, p.size());
    const auto room = limit - static_cast<int64_t>(longest);
    const char* mt = present(b, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
    // max_tokens 0 asks for the prompt's logprobs alone (as vLLM).
    const bool prompt_only_ok = r.engine_prompt_logprobs() >= 0;
    if (present(b, mt)) {
        r.max_tokens = integer(b, mt, prompt_only_ok ? 0 : 1, INT64_MAX);
    } else {
        r.max_tokens = chat ? std::max<int64_t>(room, 1) : 16;
    }
    if (r.min_tokens > r.max_tokens)
        bad("min_tokens", "'min_tokens' must not exceed '" + std::string(mt) + "'");
    if (room < 1 || std::max<int64_t>(r.max_tokens, 1) > room)
        throw ApiError(400,
                       "this model's maximum context is " + std::to_string(limit) +
                           " tokens; the prompt has " + std::to_string(longest) + " and " +
                           std::to_string(r.max_tokens) + " more were requested",
                       mt, "context_length_exceeded");
    return r;
}

}  // namespace warden::server
