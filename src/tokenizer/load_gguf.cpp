// Tokenizer::from_gguf: tokenizer.ggml.* metadata -> a concrete tokenizer.
#include <algorithm>
#include <cctype>

#include "formats/gguf_file.h"
#include "tokenizer/regex_split.h"
#include "tokenizer/vocab.h"
#include "util/error.h"

namespace warden::tokenizer {

using detail::TokenType;

namespace {

int32_t optional_id(const formats::GGUFFile& g, const std::string& key) {
    const auto v = g.get_int_opt(key);
    if (!v) return -1;
    if (*v < -1 || *v > INT32_MAX)
        throw util::Error(g.path() + ": " + key + " = " + std::to_string(*v) +
                          " is not a token id");
    return static_cast<int32_t>(*v);
}

std::string lower(std::string s) {
    std::transform(s.begin(), s.end(), s.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return s;
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const formats::GGUFFile& g) {
    const std::string src = g.path();
    util::check(g.has("tokenizer.ggml.model"),
                src + ": no tokenizer in this GGUF (tokenizer.ggml.model missing)");
    const std::string model = g.get_string("tokenizer.ggml.model");
    util::check(model == "llama" || model == "gpt2",
                src + ": unsupported tokenizer model '" + model +
                    "' (tokenizer.ggml.model); supported: 'llama' (SentencePiece BPE), 'gpt2' "
                    "(byte-level BPE)");
    util::check(g.has("tokenizer.ggml.tokens"), src + ": tokenizer.ggml.tokens missing");

    detail::Vocab v;
    v.tokens = g.get_string_array("tokenizer.ggml.tokens");
    if (g.has("tokenizer.ggml.token_type")) {
        const auto types = g.get_int_array("tokenizer.ggml.token_type");
        v.types.reserve(types.size());
        for (size_t i = 0; i < types.size(); ++i) {
            if (types[i] < 0 || types[i] > 6) {
                throw util::Error(src + ": token " + std::to_string(i) +
                                  " has unknown token_type " + std::to_string(types[i]));
            }
            v.types.push_back(static_cast<TokenType>(types[i]));
        }
    }
    if (g.has("tokenizer.ggml.scores")) {
        const auto scores = g.get_float_array("tokenizer.ggml.scores");
        v.scores.assign(scores.begin(), scores.end());
    }
    v.bos = optional_id(g, "tokenizer.ggml.bos_token_id");
    v.eos = optional_id(g, "tokenizer.ggml.eos_token_id");
    v.eot = optional_id(g, "tokenizer.ggml.eot_token_id");
    v.eom = optional_id(g, "tokenizer.ggml.eom_token_id");
    v.unk = optional_id(g, "tokenizer.ggml.unknown_token_id");
    v.finalize(src);

    const bool spm = model == "llama";
    util::check(!spm || !v.scores.empty(),
                src + ": SentencePiece tokenizer without tokenizer.ggml.scores");
    std::string pre = spm ? "default" : "";
    detail::PreTokenizerSpec spec;
    if (!spm) {
        pre = g.has("tokenizer.ggml.pre") ? g.get_string("tokenizer.ggml.pre") : "default";
        spec = detail::pretokenizer_for(pre);
    }
    // Defaults as llama.cpp, then the explicit metadata wins.
    v.add_bos = spm ? true : spec.add_bos;
    v.add_eos = false;
    bool add_space_prefix = spm;
    if (auto b = g.get_bool_opt("tokenizer.ggml.add_bos_token")) v.add_bos = *b;
    if (auto b = g.get_bool_opt("tokenizer.ggml.add_eos_token")) v.add_eos = *b;
    if (auto b = g.get_bool_opt("tokenizer.ggml.add_space_prefix")) add_space_prefix = *b;
    if (v.add_bos && v.bos < 0)
        throw util::Error(src + ": add_bos_token is set but there is no bos_token_id");

    // Token texts that always end generation are control tokens (llama.cpp does the same).
    for (int32_t id = 0; id < v.size(); ++id)
        if (detail::is_eog_text(v.tokens[id]) && v.types[id] == TokenType::Normal)
            v.types[id] = TokenType::Control;

    if (spm) {
        // Phi-3 strips whitespace after its chat control tokens (llama.cpp sets this by model
        // name).
        const std::string name = g.has("general.name") ? lower(g.get_string("general.name")) : "";
        if (name.find("phi-3") != std::string::npos || name.find("phi3") != std::string::npos) {
            for (int32_t id = 0; id < v.size(); ++id) {
                const std::string& t = v.tokens[id];
                const bool special = v.types[id] == TokenType::Control ||
                                     v.types[id] == TokenType::UserDefined ||
                                     v.types[id] == TokenType::Unknown;
                if ((special || t == "</s>") && t != "<unk>" && t != "<s>" && t != "<|endoftext|>")
                    v.rstrip[id] = 1;
            }
        }
        return detail::make_spm(std::move(v), {}, add_space_prefix, "SentencePiece BPE");
    }

    util::check(g.has("tokenizer.ggml.merges"),
                src + ": byte-level BPE tokenizer without tokenizer.ggml.merges");
    const auto merge_strings = g.get_string_array("tokenizer.ggml.merges");
    util::check(!merge_strings.empty(), src + ": tokenizer.ggml.merges is empty");
    std::vector<std::pair<std::string, std::string>> merges;
    merges.reserve(merge_strings.size());
    for (size_t i = 0; i < merge_strings.size(); ++i)
        merges.push_back(detail::split_merge(merge_strings[i], i, src));
    return detail::make_byte_level_bpe(std::move(v), merges, std::move(spec.patterns),
                                       spec.ignore_merges, false,
                                       "byte-level BPE (pre: " + pre + ")");
}

}  // namespace warden::tokenizer
