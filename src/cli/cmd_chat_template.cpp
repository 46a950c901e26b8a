// `warden chat-template`: renders a chat template for a JSON conversation and prints the text
// exactly (no newline added). Used by tests/python/test_chat_templates.py to compare with
// Python jinja2 / transformers.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "chat_template/chat_template.h"
#include "cli/commands.h"
#include "formats/gguf_file.h"
#include "launch/common.h"
#include "util/error.h"

namespace warden::cli {

namespace {
struct ChatTemplateOptions {
    std::string template_path;
    std::string model_path;
    std::string messages_path;
    std::string tools_path;
    std::string extra;
    bool add_generation_prompt = false;
};

nlohmann::ordered_json parse_json(const std::string& text, const std::string& what) {
    try {
        return nlohmann::ordered_json::parse(text);
    } catch (const nlohmann::json::exception& e) {
        throw util::Error(what + " is not valid JSON: " + util::printable(e.what()));
    }
}

int chat_template(const ChatTemplateOptions& o) {
    util::check(o.template_path.empty() != o.model_path.empty(),
                "give exactly one of --template or --model");
    chat_template::ModelChatTemplate src;
    if (!o.template_path.empty()) {
        src.source = launch::read_text_file(o.template_path);
    } else if (std::filesystem::is_directory(o.model_path)) {
        src = chat_template::chat_template_from_hf_dir(o.model_path);
    } else {
        src = chat_template::chat_template_from_gguf(formats::GGUFFile(o.model_path));
    }
    const auto messages = parse_json(launch::read_text_file(o.messages_path),
                                     "--messages file '" + o.messages_path + "'");
    const auto tools = o.tools_path.empty() ? nlohmann::ordered_json()
                                            : parse_json(launch::read_text_file(o.tools_path),
                                                         "--tools file '" + o.tools_path + "'");
    nlohmann::ordered_json extra = nlohmann::ordered_json::object();
    for (auto it = src.special_tokens.begin(); it != src.special_tokens.end(); ++it)
        extra[it.key()] = it.value();
    if (!o.extra.empty()) {
        const auto e = parse_json(o.extra, "--extra");
        util::check(e.is_object(), "--extra must be a JSON object");
        for (auto it = e.begin(); it != e.end(); ++it) extra[it.key()] = it.value();
    }
    const auto tpl = chat_template::ChatTemplate::parse(src.source);
    const std::string text = tpl.render(messages, tools, o.add_generation_prompt, extra);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    return 0;
}
}  // namespace

void register_chat_template(CLI::App& app, int& rc) {
    auto o = std::make_shared<ChatTemplateOptions>();
    CLI::App* sub =
        app.add_subcommand("chat-template", "render a chat template for a JSON list of messages");
    sub->add_option("--template", o->template_path, "Jinja template file");
    sub->add_option("-m,--model", o->model_path,
                    "GGUF file or Hugging Face model directory whose template to use");
    sub->add_option("--messages", o->messages_path, "JSON file: array of {role, content, ...}")
        ->required();
    sub->add_option("--tools", o->tools_path, "JSON file: array of tool definitions");
    sub->add_flag("--add-generation-prompt", o->add_generation_prompt,
                  "end with the assistant turn header");
    sub->add_option("--extra", o->extra,
                    "JSON object of extra template variables (bos_token, enable_thinking, ...)");
    sub->callback([o, &rc] { rc = chat_template(*o); });
}

}  // namespace warden::cli
