// ChatTemplate: parse once, render many times (see chat_template.h).
#include "chat_template/chat_template.h"

#include "chat_template/jinja_ast.h"
#include "util/error.h"

namespace warden::chat_template {

ChatTemplate ChatTemplate::parse(const std::string& source) {
    ChatTemplate t;
    t.tpl_ = std::make_shared<jinja::Template>(jinja::parse(jinja::lex(source)));
    return t;
}

namespace {

// The variables transformers' apply_chat_template passes: messages, tools (None without tools),
// documents (None), add_generation_prompt, then the extra keyword arguments (special tokens,
// enable_thinking, ...), which may override the others.
template <class J>
std::string render_impl(const jinja::Template& tpl, const J& messages, const J& tools,
                        bool add_generation_prompt, const J& extra) {
    util::check(messages.is_array(), "chat template: messages must be a JSON array");
    util::check(tools.is_null() || tools.is_array(),
                "chat template: tools must be a JSON array or null");
    util::check(extra.is_null() || extra.is_object(),
                "chat template: extra variables must be a JSON object");
    jinja::Value globals = jinja::Value::make_dict();
    globals.dict->set("messages", jinja::from_json(messages));
    globals.dict->set("tools", jinja::from_json(tools));
    globals.dict->set("documents", jinja::Value::none());
    globals.dict->set("add_generation_prompt", jinja::Value::boolean(add_generation_prompt));
    if (extra.is_object())
        for (auto it = extra.begin(); it != extra.end(); ++it)
            globals.dict->set(it.key(), jinja::from_json(it.value()));
    return jinja::render(tpl, globals);
}

}  // namespace

std::string ChatTemplate::render(const nlohmann::json& messages, const nlohmann::json& tools,
                                 bool add_generation_prompt, const nlohmann::json& extra) const {
    util::check(tpl_ != nullptr, "chat template: render() on an empty template");
    return render_impl(*tpl_, messages, tools, add_generation_prompt, extra);
}

std::string ChatTemplate::render(const nlohmann::ordered_json& messages,
                                 const nlohmann::ordered_json& tools, bool add_generation_prompt,
                                 const nlohmann::ordered_json& extra) const {
    util::check(tpl_ != nullptr, "chat template: render() on an empty template");
    return render_impl(*tpl_, messages, tools, add_generation_prompt, extra);
}

}  // namespace warden::chat_template
