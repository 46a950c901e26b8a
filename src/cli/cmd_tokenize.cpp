// `warden tokenize`: UTF-8 text on stdin -> token ids on one line (--decode: ids -> text).
// -m: a GGUF file or a Hugging Face directory; only the tokenizer is read, never the model.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.h"
#include "formats/gguf_file.h"
#include "launch/common.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/utf8.h"

namespace warden::cli {

namespace {
struct TokenizeOptions {
    launch::CommonOptions common;
    bool no_bos = false;
    bool decode = false;
    bool no_special = false;
    bool json = false;
};

// Only the tokenizer metadata is read (GGUF tokenizer.ggml.* keys, or tokenizer.json /
// tiktoken.model of a directory): vocab-only files and architectures warden cannot run
// tokenize all the same.
std::unique_ptr<tokenizer::Tokenizer> load_tokenizer(const std::string& path) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) return tokenizer::Tokenizer::from_hf_dir(path);
    return tokenizer::Tokenizer::from_gguf(formats::GGUFFile(path));
}

int tokenize(const TokenizeOptions& o) {
    const auto own = load_tokenizer(o.common.model_path);
    const tokenizer::Tokenizer& tok = *own;
    std::string text((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    if (o.decode) {  // ids (whitespace-separated) -> the raw bytes of their text
        std::vector<int32_t> in;
        std::istringstream ss(text);
        std::string word;
        while (ss >> word) {
            size_t used = 0;
            long long v = -1;
            try {
                v = std::stoll(word, &used);
            } catch (const std::exception&) {
                used = 0;
            }
            util::check(used == word.size() && v >= INT32_MIN && v <= INT32_MAX,
                        "--decode: '" + util::printable(word, 40) + "' is not a token id");
            in.push_back(static_cast<int32_t>(v));
        }
        const std::string out = tok.decode(in);
        std::fwrite(out.data(), 1, out.size(), stdout);
        return 0;
    }
    auto encode = [&](const std::string& t, const std::string& what) {
        const size_t bad = util::find_invalid_utf8(t);
        util::check(bad == std::string::npos,
                    what + " is not valid UTF-8 (byte " + std::to_string(bad) + ")");
        return tok.encode(t, !o.no_bos, !o.no_special);
    };
    if (o.json) {  // a JSON array of strings -> a JSON array of id arrays, one tokenizer load
        nlohmann::json in;
        try {
            in = nlohmann::json::parse(text);
        } catch (const nlohmann::json::exception& e) {
            throw util::Error("--json: input is not valid JSON: " + util::printable(e.what()));
        }
        util::check(in.is_array(), "--json: input must be a JSON array of strings");
        nlohmann::json out = nlohmann::json::array();
        for (size_t i = 0; i < in.size(); ++i) {
            util::check(in[i].is_string(),
                        "--json: element " + std::to_string(i) + " is not a string");
            out.push_back(encode(in[i].get<std::string>(), "--json: element " + std::to_string(i)));
        }
        std::puts(out.dump().c_str());
        return 0;
    }
    const auto ids = encode(text, "input");
    std::string line;
    for (size_t i = 0; i < ids.size(); ++i) line += (i ? " " : "") + std::to_string(ids[i]);
    std::puts(line.c_str());
    return 0;
}
// Every tokenizer.ggml.pre name with the regexes warden applies for it, or why it cannot.
int print_pretokenizers() {
    nlohmann::ordered_json out = nlohmann::ordered_json::object();
    for (const auto& name : tokenizer::pretokenizer_names()) {
        try {
            const auto info = tokenizer::pretokenizer_info(name);
            out[name] = {{"patterns", info.patterns},
                         {"ignore_merges", info.ignore_merges},
                         {"add_bos", info.add_bos}};
        } catch (const util::Error& e) {
            out[name] = {{"error", e.what()}};
        }
    }
    std::puts(out.dump(1).c_str());
    return 0;
}
}  // namespace

void register_pretokenizers(CLI::App& app, int& rc) {
    CLI::App* sub = app.add_subcommand(
        "pretokenizers",
        "print the GGUF pre-tokenizer table (tokenizer.ggml.pre names -> regexes) as JSON");
    sub->callback([&rc] { rc = print_pretokenizers(); });
}

void register_tokenize(CLI::App& app, int& rc) {
    auto o = std::make_shared<TokenizeOptions>();
    CLI::App* sub =
        app.add_subcommand("tokenize", "print the token ids of UTF-8 text read from stdin");
    launch::add_model_option(*sub, o->common);
    launch::add_threads_option(*sub, o->common);
    sub->add_flag("--no-bos", o->no_bos, "do not prepend BOS even if the model asks for it");
    sub->add_flag("--decode", o->decode,
                  "read token ids from stdin and write their text (raw bytes)");
    sub->add_flag("--no-special", o->no_special,
                  "encode special-token text (e.g. <|im_end|>) as plain text");
    sub->add_flag("--json", o->json,
                  "stdin is a JSON array of strings; print a JSON array of their id arrays");
    sub->callback([o, &rc] { rc = tokenize(*o); });
}

}  // namespace warden::cli
