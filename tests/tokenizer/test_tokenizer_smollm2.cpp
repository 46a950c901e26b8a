// SmolLM2 (the default model) against Hugging Face `tokenizers` on the generated strings of
// tests/golden/tokenizer/smollm2_strings.jsonl (scripts/make_tokenizer_golden.py). The
// reference encodes with add_special_tokens=False, i.e. no BOS/EOS added but special tokens
// in the text matched -- the same as encode(text, add_bos=false, parse_special=true).
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "formats/gguf_file.h"
#include "tok_test_util.h"
#include "tokenizer/tokenizer.h"

namespace warden::tokenizer {
namespace {

using testing::escaped;

struct Golden {
    std::string text;
    std::vector<int32_t> ids;
};

std::vector<Golden> load_golden() {
    std::vector<Golden> out;
    std::ifstream in(testing::source_dir() + "/tests/golden/tokenizer/smollm2_strings.jsonl");
    for (std::string line; std::getline(in, line);) {
        const auto j = nlohmann::json::parse(line);
        if (j.contains("meta")) continue;
        out.push_back({j.at("text").get<std::string>(), j.at("ids").get<std::vector<int32_t>>()});
    }
    return out;
}

const std::string kModel = testing::source_dir() + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";

void check_all(const Tokenizer& tok, const std::vector<Golden>& golden, const char* what) {
    int enc_fail = 0, dec_fail = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (const auto& g : golden) {
        const auto ids = tok.encode(g.text, /*add_bos=*/false, /*parse_special=*/true);
        if (ids != g.ids && ++enc_fail <= 10)
            ADD_FAILURE() << what << ": encode differs for '" << escaped(g.text) << "'";
        const std::string back = tok.decode(g.ids);
        if (back != g.text && ++dec_fail <= 10)
            ADD_FAILURE() << what << ": decode gives '" << escaped(back) << "' for '"
                          << escaped(g.text) << "'";
    }
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(enc_fail, 0) << what << ": " << enc_fail << " of " << golden.size()
                           << " strings encode differently";
    EXPECT_EQ(dec_fail, 0) << what << ": " << dec_fail << " of " << golden.size()
                           << " strings decode differently";
    std::printf("[ info     ] %s: %zu strings encoded+decoded in %.1f ms\n", what, golden.size(),
                ms);
}

TEST(TokenizerSmolLM2, GoldenHasEnoughStrings) {
    EXPECT_GE(load_golden().size(), 2000u) << "regenerate with scripts/make_tokenizer_golden.py";
}

TEST(TokenizerSmolLM2, FromGgufMatchesHuggingFace) {
    if (!std::filesystem::exists(kModel))
        GTEST_SKIP() << "model file " << kModel << " absent (scripts/fetch_model.sh)";
    const auto golden = load_golden();
    ASSERT_FALSE(golden.empty());
    formats::GGUFFile gguf(kModel);
    auto tok = Tokenizer::from_gguf(gguf);
    EXPECT_EQ(tok->kind(), "byte-level BPE (pre: smollm)");
    EXPECT_EQ(tok->vocab_size(), 49152);
    EXPECT_FALSE(tok->add_bos_default());
    EXPECT_EQ(tok->bos_id(), 1);
    EXPECT_EQ(tok->eos_id(), 2);
    const auto stops = tok->stop_ids();
    EXPECT_NE(std::find(stops.begin(), stops.end(), 2), stops.end());  // <|im_end|>
    EXPECT_NE(std::find(stops.begin(), stops.end(), 0), stops.end());  // <|endoftext|>
    check_all(*tok, golden, "from_gguf");
}

TEST(TokenizerSmolLM2, FromHfDirMatchesHuggingFace) {
    const auto golden = load_golden();
    ASSERT_FALSE(golden.empty());
    auto tok = Tokenizer::from_hf_dir(testing::source_dir() + "/tests/golden/tokenizer/smollm2");
    EXPECT_EQ(tok->vocab_size(), 49152);
    EXPECT_FALSE(tok->add_bos_default());
    EXPECT_EQ(tok->bos_id(), 1);
    EXPECT_EQ(tok->eos_id(), 2);
    EXPECT_TRUE(tok->is_special(1));
    check_all(*tok, golden, "from_hf_dir");
}

TEST(TokenizerSmolLM2, GgufAndHfAgreeOnSpecialsAndBytes) {
    if (!std::filesystem::exists(kModel)) GTEST_SKIP() << "model file " << kModel << " absent";
    formats::GGUFFile gguf(kModel);
    auto a = Tokenizer::from_gguf(gguf);
    auto b = Tokenizer::from_hf_dir(testing::source_dir() + "/tests/golden/tokenizer/smollm2");
    ASSERT_EQ(a->vocab_size(), b->vocab_size());
    for (int32_t id = 0; id < a->vocab_size(); ++id) {
        ASSERT_EQ(a->token_bytes(id), b->token_bytes(id)) << "token " << id;
        ASSERT_EQ(a->is_special(id), b->is_special(id)) << "token " << id;
    }
    EXPECT_EQ(a->special_tokens(), b->special_tokens());
    // parse_special=false: control tokens are plain text.
    const auto ids = a->encode("<|im_start|>", false, false);
    EXPECT_GT(ids.size(), 1u);
    EXPECT_EQ(a->decode(ids), "<|im_start|>");
    // add_bos follows the model (SmolLM2 adds none).
    EXPECT_EQ(a->encode("hi", true), a->encode("hi", false));
}

TEST(TokenizerSmolLM2, ThousandsOfStringsAreFast) {
    if (!std::filesystem::exists(kModel)) GTEST_SKIP() << "model file " << kModel << " absent";
    formats::GGUFFile gguf(kModel);
    auto tok = Tokenizer::from_gguf(gguf);
    const auto golden = load_golden();
    std::string big;
    for (const auto& g : golden) big += g.text;
    const auto t0 = std::chrono::steady_clock::now();
    size_t n = 0;
    for (const auto& g : golden) n += tok->encode(g.text, false).size();
    const auto ids = tok->encode(big, false);  // one long document (~200 KB)
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf(
        "[ info     ] %zu strings (%zu tokens) + one %zu-byte document (%zu tokens) in %.3f s\n",
        golden.size(), n, big.size(), ids.size(), s);
    EXPECT_EQ(tok->decode(ids), big);
}

}  // namespace
}  // namespace warden::tokenizer
