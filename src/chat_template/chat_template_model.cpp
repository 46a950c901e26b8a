// Finding a model's chat template and special-token variables (GGUF metadata or HF directory).
#include <filesystem>
#include <fstream>
#include <sstream>

#include "chat_template/chat_template.h"
#include "formats/gguf_file.h"
#include "util/error.h"

namespace warden::chat_template {

ModelChatTemplate chat_template_from_gguf(const formats::GGUFFile& gguf) {
    ModelChatTemplate out;
    util::check(gguf.has("tokenizer.chat_template"),
                "model '" + gguf.path() + "' has no chat template (tokenizer.chat_template)");
    out.source = gguf.get_string("tokenizer.chat_template");
    if (gguf.has("tokenizer.ggml.tokens")) {
        const auto tokens = gguf.get_string_array("tokenizer.ggml.tokens");
        const std::pair<const char*, const char*> keys[] = {
            {"tokenizer.ggml.bos_token_id", "bos_token"},
            {"tokenizer.ggml.eos_token_id", "eos_token"},
            {"tokenizer.ggml.unknown_token_id", "unk_token"},
            {"tokenizer.ggml.padding_token_id", "pad_token"}};
        for (const auto& [key, var] : keys) {
            const auto id = gguf.get_int_opt(key);
            if (id && *id >= 0 && *id < static_cast<int64_t>(tokens.size()))
                out.special_tokens[var] = tokens[static_cast<size_t>(*id)];
        }
    }
    return out;
}

namespace {
std::string read_text(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    util::check(in.good(), "cannot open '" + p.string() + "'");
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}
}  // namespace

ModelChatTemplate chat_template_from_hf_dir(const std::string& dir) {
    namespace fs = std::filesystem;
    ModelChatTemplate out;
    const fs::path base(dir);
    nlohmann::json cfg = nlohmann::json::object();
    if (fs::exists(base / "tokenizer_config.json")) {
        try {
            cfg = nlohmann::json::parse(read_text(base / "tokenizer_config.json"));
        } catch (const nlohmann::json::exception& e) {
            throw util::Error("tokenizer_config.json in '" + dir +
                              "' is not valid JSON: " + e.what());
        }
    }
    if (fs::exists(base / "chat_template.jinja")) {
        out.source = read_text(base / "chat_template.jinja");
    } else if (cfg.is_object() && cfg.contains("chat_template")) {
        const auto& ct = cfg["chat_template"];
        if (ct.is_string())
            out.source = ct.get<std::string>();
        else if (ct.is_array())
            for (const auto& e : ct)
                if (e.is_object() && e.value("name", "") == "default" && e.contains("template") &&
                    e["template"].is_string())
                    out.source = e["template"].get<std::string>();
    }
    util::check(!out.source.empty(), "model directory '" + dir + "' has no chat template");
    for (const char* var : {"bos_token", "eos_token", "unk_token", "pad_token"}) {
        if (!cfg.is_object() || !cfg.contains(var)) continue;
        const auto& t = cfg[var];
        if (t.is_string())
            out.special_tokens[var] = t;
        else if (t.is_object() && t.contains("content") && t["content"].is_string())
            out.special_tokens[var] = t["content"];
    }
    return out;
}

}  // namespace warden::chat_template
