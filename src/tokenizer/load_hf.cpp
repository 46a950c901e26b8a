// Tokenizer::from_hf_dir: Hugging Face tokenizer.json (+ tokenizer_config.json), or a
// tiktoken.model directory without tokenizer.json (Kimi; load_tiktoken.cpp).
// Supported: model.type "BPE" with either a ByteLevel pre-tokenizer/decoder (GPT-2 family,
// optionally preceded by Split/Digits pre-tokenizers) or SentencePiece conventions
// (Metaspace pre-tokenizer or Prepend/Replace "▁" normalizers, byte_fallback).
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tokenizer/regex_split.h"
#include "tokenizer/tiktoken.h"
#include "tokenizer/unicode.h"
#include "tokenizer/vocab.h"
#include "util/error.h"
#include "util/json_file.h"

namespace warden::tokenizer {

using detail::TokenType;
using nlohmann::json;

namespace {

std::string regex_escape(const std::string& s) {
    std::string out;
    for (char c : s) {
        if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) out += '\\';
        out += c;
    }
    return out;
}

struct PreTok {
    std::vector<std::string> patterns;
    bool byte_level = false;
    bool add_prefix_space = false;
    bool metaspace = false;
    bool metaspace_prefix = false;
};

void parse_pre(const json& j, PreTok& p, const std::string& src) {
    if (j.is_null()) return;
    util::check(j.is_object() && j.contains("type"), src + ": malformed pre_tokenizer");
    const std::string type = j.at("type").get<std::string>();
    if (type == "Sequence") {
        for (const auto& e : j.at("pretokenizers")) parse_pre(e, p, src);
    } else if (type == "ByteLevel") {
        p.byte_level = true;
        p.add_prefix_space = j.value("add_prefix_space", false);
        if (j.value("use_regex", true)) p.patterns.push_back(detail::gpt2_pattern());
    } else if (type == "Digits") {
        p.patterns.push_back(j.value("individual_digits", false) ? R"(\p{N})" : R"(\p{N}+)");
    } else if (type == "Split") {
        const std::string behavior = j.value("behavior", "Isolated");
        util::check(
            behavior == "Isolated" && !j.value("invert", false),
            src + ": unsupported Split pre-tokenizer (behavior '" + behavior + "', invert)");
        const json& pat = j.at("pattern");
        if (pat.contains("Regex")) {
            p.patterns.push_back(pat.at("Regex").get<std::string>());
        } else if (pat.contains("String")) {
            p.patterns.push_back(regex_escape(pat.at("String").get<std::string>()));
        } else {
            throw util::Error(src + ": Split pre-tokenizer without a Regex/String pattern");
        }
    } else if (type == "Metaspace") {
        p.metaspace = true;
        const std::string scheme =
            j.value("prepend_scheme", j.value("add_prefix_space", true) ? "always" : "never");
        p.metaspace_prefix = scheme != "never";
    } else {
        throw util::Error(src + ": unsupported pre_tokenizer type '" + type + "'");
    }
}

bool contains_type(const json& j, const std::string& type) {
    if (j.is_object()) {
        if (j.contains("type") && j["type"] == type) return true;
        for (const auto& [k, v] : j.items())
            if (contains_type(v, type)) return true;
    } else if (j.is_array()) {
        for (const auto& v : j)
            if (contains_type(v, type)) return true;
    }
    return false;
}

// Normalizers: none, an empty Sequence, or the SentencePiece pair Prepend("▁") + Replace(" ",
// "▁"). Returns whether a "▁" is prepended.
bool parse_normalizer(const json& j, const std::string& src, std::string& note) {
    if (j.is_null()) return false;
    const std::string type = j.value("type", "");
    if (type == "Sequence") {
        bool prepend = false;
        for (const auto& e : j.at("normalizers"))
            prepend = parse_normalizer(e, src, note) || prepend;
        return prepend;
    }
    if (type == "Prepend") return true;
    if (type == "Replace") return false;  // " " -> "▁" is what SentencePiece mode does anyway
    if (type == "NFC") {
        note = ", NFC normalizer not applied";
        return false;
    }
    throw util::Error(src + ": unsupported normalizer type '" + type + "'");
}

std::string token_text(const json& j) {
    if (j.is_string()) return j.get<std::string>();
    if (j.is_object() && j.contains("content")) return j.at("content").get<std::string>();
    return {};
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::from_hf_dir(const std::string& dir) {
    const std::filesystem::path base(dir);
    const std::filesystem::path tj_path = base / "tokenizer.json";
    // Kimi K2 / Moonlight ship tiktoken.model (+ tokenization_kimi.py) instead of tokenizer.json.
    if (!std::filesystem::exists(tj_path) && std::filesystem::exists(base / "tiktoken.model"))
        return detail::load_tiktoken_dir(dir);
    util::check(std::filesystem::exists(tj_path),
                "tokenizer: " + tj_path.string() + " not found (nor a tiktoken.model)");
    const std::string src = tj_path.string();
    const json tj = util::read_json_file(tj_path.string());
    json cfg = json::object();
    if (std::filesystem::exists(base / "tokenizer_config.json"))
        cfg = util::read_json_file((base / "tokenizer_config.json").string());

    try {
        util::check(tj.is_object() && tj.contains("model"), src + ": no \"model\" section");
        const json& m = tj.at("model");
        const std::string mtype = m.value("type", "");
        util::check(mtype == "BPE",
                    src + ": unsupported model type '" + mtype + "' (only BPE is supported)");
        util::check(m.contains("vocab") && m["vocab"].is_object(), src + ": model.vocab missing");
        util::check(m.contains("merges") && m["merges"].is_array(), src + ": model.merges missing");

        // Vocabulary: model.vocab plus added_tokens (which may repeat vocab entries).
        int64_t max_id = -1;
        for (const auto& [text, id] : m["vocab"].items())
            max_id = std::max<int64_t>(max_id, id.get<int64_t>());
        const json added = tj.value("added_tokens", json::array());
        for (const auto& a : added) max_id = std::max<int64_t>(max_id, a.at("id").get<int64_t>());
        util::check(max_id >= 0 && max_id < (int64_t{1} << 24),
                    src + ": vocabulary is empty or ids are implausible");

        detail::Vocab v;
        v.tokens.assign(static_cast<size_t>(max_id + 1), std::string());
        v.types.assign(static_cast<size_t>(max_id + 1), TokenType::Unused);
        for (const auto& [text, id] : m["vocab"].items()) {
            const auto i = id.get<int64_t>();
            util::check(i >= 0, src + ": negative token id for '" + text + "'");
            v.tokens[i] = text;
            v.types[i] = TokenType::Normal;
        }
        v.lstrip.assign(v.tokens.size(), 0);
        v.rstrip.assign(v.tokens.size(), 0);
        for (const auto& a : added) {
            const auto i = a.at("id").get<int64_t>();
            util::check(i >= 0, src + ": negative added token id");
            v.tokens[i] = a.at("content").get<std::string>();
            v.types[i] = a.value("special", false) ? TokenType::Control : TokenType::UserDefined;
            v.lstrip[i] = a.value("lstrip", false);
            v.rstrip[i] = a.value("rstrip", false);
        }

        std::vector<std::pair<std::string, std::string>> merges;
        merges.reserve(m["merges"].size());
        size_t idx = 0;
        for (const auto& e : m["merges"]) {
            if (e.is_string()) {
                merges.push_back(detail::split_merge(e.get<std::string>(), idx, src));
            } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
                merges.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
            } else {
                throw util::Error(src + ": malformed merge #" + std::to_string(idx));
            }
            ++idx;
        }

        PreTok pre;
        parse_pre(tj.value("pre_tokenizer", json()), pre, src);
        std::string note;
        const bool norm_prepend = parse_normalizer(tj.value("normalizer", json()), src, note);
        const bool byte_level =
            !pre.metaspace &&
            (pre.byte_level || contains_type(tj.value("decoder", json()), "ByteLevel"));

        // Special ids and add_bos/add_eos from tokenizer_config.json.
        auto find_id = [&](const std::string& key) -> int32_t {
            if (!cfg.contains(key)) return -1;
            const std::string t = token_text(cfg[key]);
            if (t.empty()) return -1;
            for (int32_t i = 0; i < static_cast<int32_t>(v.tokens.size()); ++i)
                if (v.tokens[i] == t) return i;
            throw util::Error("tokenizer: " + key + " '" + t +
                              "' of tokenizer_config.json is not in the vocabulary");
        };
        v.bos = find_id("bos_token");
        v.eos = find_id("eos_token");
        v.unk = find_id("unk_token");
        if (v.unk < 0 && m.contains("unk_token") && m["unk_token"].is_string()) {
            const std::string u = m["unk_token"].get<std::string>();
            for (int32_t i = 0; i < static_cast<int32_t>(v.tokens.size()); ++i)
                if (v.tokens[i] == u) v.unk = i;
        }
        const json& ab = cfg.contains("add_bos_token") ? cfg["add_bos_token"] : json();
        v.add_bos = ab.is_boolean() ? ab.get<bool>() : !byte_level && v.bos >= 0;
        const json& ae = cfg.contains("add_eos_token") ? cfg["add_eos_token"] : json();
        v.add_eos = ae.is_boolean() && ae.get<bool>();
        if (v.add_bos && v.bos < 0) v.add_bos = false;
        if (v.add_eos && v.eos < 0) v.add_eos = false;
        for (int32_t id = 0; id < static_cast<int32_t>(v.tokens.size()); ++id)
            if (detail::is_eog_text(v.tokens[id]) && v.types[id] == TokenType::Normal)
                v.types[id] = TokenType::Control;
        v.finalize(src);

        if (byte_level) {
            util::check(!merges.empty(), src + ": byte-level BPE without merges");
            std::string kind = "byte-level BPE (hf";
            for (const auto& p : pre.patterns)
                kind += p == detail::gpt2_pattern() ? ", gpt2 regex" : ", /" + p + "/";
            return detail::make_byte_level_bpe(std::move(v), merges, std::move(pre.patterns),
                                               m.value("ignore_merges", false),
                                               pre.add_prefix_space, kind + note + ")");
        }
        const bool prefix = pre.metaspace ? pre.metaspace_prefix : norm_prepend;
        util::check(
            pre.patterns.empty(),
            src + ": Split/Digits pre-tokenizers with SentencePiece-style BPE are not supported");
        util::check(pre.metaspace || norm_prepend || m.value("byte_fallback", false),
                    src +
                        ": BPE model is neither byte-level nor SentencePiece-style (no ByteLevel, "
                        "Metaspace or byte_fallback)");
        return detail::make_spm(std::move(v), merges, prefix,
                                "SentencePiece BPE (hf merges" + note + ")");
    } catch (const json::exception& e) {
        throw util::Error(src + ": unexpected structure: " + e.what());
    }
}

}  // namespace warden::tokenizer
