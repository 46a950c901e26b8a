// `warden tokenize`: UTF-8 text on stdin -> token ids on one line (--decode: ids -> text).
// -m may also name a tokenizer-only directory (no config.json).
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <sstream>

#include "cli/common.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/utf8.h"

namespace warden::cli {

namespace {
struct TokenizeOptions {
    CommonOptions common;
    bool no_bos = false;
    bool decode = false;
};

int tokenize(const TokenizeOptions& o) {
    util::ThreadPool pool(1);
    // A directory without config.json is a tokenizer-only directory (tokenizer.json or a Kimi
    // tiktoken.model): no model is loaded.
    std::unique_ptr<model::Model> model;
    std::unique_ptr<tokenizer::Tokenizer> own;
    std::error_code ec;
    if (std::filesystem::is_directory(o.common.model_path, ec) &&
        !std::filesystem::exists(std::filesystem::path(o.common.model_path) / "config.json", ec)) {
        own = tokenizer::Tokenizer::from_hf_dir(o.common.model_path);
    } else {
        model = load(o.common, false, pool);
        util::check(model->tokenizer != nullptr, "model '" + o.common.model_path + "' has no tokenizer");
    }
    const tokenizer::Tokenizer& tok = own ? *own : *model->tokenizer;
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
    const size_t bad = util::find_invalid_utf8(text);
    util::check(bad == std::string::npos, "input is not valid UTF-8 (byte " + std::to_string(bad) + ")");
    const auto ids = tok.encode(text, !o.no_bos);
    std::string line;
    for (size_t i = 0; i < ids.size(); ++i) line += (i ? " " : "") + std::to_string(ids[i]);
    std::puts(line.c_str());
    return 0;
}
}  // namespace

void register_tokenize(CLI::App& app, int& rc) {
    auto o = std::make_shared<TokenizeOptions>();
    CLI::App* sub = app.add_subcommand("tokenize", "print the token ids of UTF-8 text read from stdin");
    add_model_option(*sub, o->common);
    add_threads_option(*sub, o->common);
    sub->add_flag("--no-bos", o->no_bos, "do not prepend BOS even if the model asks for it");
    sub->add_flag("--decode", o->decode, "read token ids from stdin and write their text (raw bytes)");
    sub->callback([o, &rc] { rc = tokenize(*o); });
}

}  // namespace warden::cli
