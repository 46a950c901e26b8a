#pragma once
// Chat templates: a hand-written renderer for the subset of Jinja2 that Hugging Face chat
// templates use, rendering byte-for-byte as transformers' apply_chat_template does (jinja2 with
// trim_blocks=True, lstrip_blocks=True, the loopcontrols extension, a tojson filter equal to
// json.dumps(ensure_ascii=False, indent=..., separators as Python), raise_exception and
// strftime_now globals).
// Implementation: jinja_lexer.cpp (tokens), jinja_parser.cpp (AST), jinja_value.cpp (values,
// filters, methods), jinja_eval.cpp (evaluation), chat_template.cpp (this API).
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

namespace warden::formats {
class GGUFFile;
}

namespace warden::chat_template {

namespace jinja {
struct Template;
}

class ChatTemplate {
  public:
    // Parses a Jinja chat template; throws util::Error with line/column on syntax errors.
    static ChatTemplate parse(const std::string& source);
    // messages: JSON array of {"role","content", optional "tool_calls","name","tool_call_id"}.
    // tools: JSON array or null. extra: other variables (bos_token, eos_token, enable_thinking,
    // ...). Throws util::Error on runtime errors (raise_exception, type errors, limits exceeded).
    std::string render(const nlohmann::json& messages, const nlohmann::json& tools,
                       bool add_generation_prompt,
                       const nlohmann::json& extra = nlohmann::json::object()) const;
    // Same with key-order-preserving JSON: Python dicts keep insertion order, so templates that
    // print tool schemas with tojson match Hugging Face byte for byte only when the caller keeps
    // the request's key order (nlohmann::json sorts object keys).
    std::string render(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                       bool add_generation_prompt, const nlohmann::ordered_json& extra) const;

  private:
    std::shared_ptr<const jinja::Template> tpl_;
};

// The model's template source and the variables HF passes with it (bos_token, eos_token, ...
// as strings). From GGUF metadata tokenizer.chat_template (+ tokenizer.ggml.tokens/bos/eos ids),
// or from a Hugging Face directory (chat_template.jinja, else tokenizer_config.json
// "chat_template": a string, or a list of {name, template} where "default" is used).
// Throws util::Error when the model has no chat template.
struct ModelChatTemplate {
    std::string source;
    nlohmann::json special_tokens = nlohmann::json::object();  // {"bos_token": "...", ...}
};
ModelChatTemplate chat_template_from_gguf(const formats::GGUFFile& gguf);
ModelChatTemplate chat_template_from_hf_dir(const std::string& dir);

}  // namespace warden::chat_template
