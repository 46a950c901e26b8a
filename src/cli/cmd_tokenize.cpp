// `warden tokenize`: UTF-8 text on stdin -> token ids on one line.
#include <cstdio>
#include <iostream>
#include <iterator>

#include "cli/common.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/utf8.h"

namespace warden::cli {

namespace {
struct TokenizeOptions {
    CommonOptions common;
    bool no_bos = false;
};

int tokenize(const TokenizeOptions& o) {
    util::ThreadPool pool(1);
    auto model = load(o.common, false, pool);
    util::check(model->tokenizer != nullptr, "model '" + o.common.model_path + "' has no tokenizer");
    std::string text((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    const size_t bad = util::find_invalid_utf8(text);
    util::check(bad == std::string::npos, "input is not valid UTF-8 (byte " + std::to_string(bad) + ")");
    const auto ids = model->tokenizer->encode(text, !o.no_bos);
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
    sub->callback([o, &rc] { rc = tokenize(*o); });
}

}  // namespace warden::cli
