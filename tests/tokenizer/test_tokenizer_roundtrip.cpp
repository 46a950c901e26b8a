// Lossless round trip on arbitrary bytes (including ill-formed UTF-8 and embedded special
// token texts) for every test vocabulary: decode(encode(x)) == x, and encode is stable.
#include <gtest/gtest.h>

#include <random>

#include "formats/gguf_file.h"
#include "tok_test_util.h"
#include "tokenizer/tokenizer.h"

namespace warden::tokenizer {
namespace {

std::string random_text(std::mt19937& rng) {
    static const char* const kBits[] = {" ",
                                        "  ",
                                        "\n",
                                        "\t",
                                        "a",
                                        "Hello",
                                        "123",
                                        "'s",
                                        "你好",
                                        "🚀",
                                        "é",
                                        "\xFF",
                                        "\xE4\xBD",
                                        "\xC3",
                                        "\x80",
                                        "<|im_start|>",
                                        "<s>",
                                        "</s>",
                                        "<|endoftext|>",
                                        "   ",
                                        "\r\n",
                                        "ü",
                                        "$x",
                                        "..."};
    std::uniform_int_distribution<int> len(0, 24), pick(0, static_cast<int>(std::size(kBits)) - 1),
        byte(0, 255), coin(0, 3);
    std::string s;
    for (int i = len(rng); i > 0; --i) {
        if (coin(rng) == 0) {
            s += static_cast<char>(byte(rng));
        } else {
            s += kBits[pick(rng)];
        }
    }
    return s;
}

class TokenizerRoundTrip : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenizerRoundTrip, RandomBytes) {
    formats::GGUFFile g(testing::shared_dir() + "/testdata/tokenizer/ggml-vocab-" + GetParam() +
                        ".gguf");
    auto tok = Tokenizer::from_gguf(g);
    std::mt19937 rng(1234);
    for (int i = 0; i < 300; ++i) {
        const std::string text = random_text(rng);
        if (text.find("\xE2\x96\x81") != std::string::npos)
            continue;  // "▁" is a space in SentencePiece
        for (bool parse_special : {false, true}) {
            const auto ids = tok->encode(text, false, parse_special);
            for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < tok->vocab_size());
            // phi-3's special tokens and </s> eat the whitespace after them (rstrip, as in
            // llama.cpp), so there the exact round trip holds only without them.
            bool stripped = false;
            for (int32_t id : ids)
                stripped = stripped || (GetParam() == "phi-3" && tok->is_special_or_added(id));
            // Byte-level vocabularies may lack rare bytes (falcon: some C0 controls, 0xF5..;
            // they are dropped like llama.cpp does) or map bytes that never occur in valid
            // UTF-8 to added tokens (deepseek-coder: 0xC0, 0xF5.. are user-defined "À", "õ"),
            // so the exact round trip needs every byte to round-trip on its own.
            bool representable = true;
            for (char c : text) {
                const std::string one(1, c);
                representable = representable && tok->decode(tok->encode(one, false, false)) == one;
            }
            if (!stripped && representable) {
                EXPECT_EQ(tok->decode(ids), text)
                    << GetParam() << " '" << testing::escaped(text) << "'";
            }
        }
    }
}

INSTANTIATE_TEST_SUITE_P(TokenizerAllVocabs, TokenizerRoundTrip,
                         ::testing::Values("llama-spm", "phi-3", "gpt-2", "falcon", "mpt", "refact",
                                           "deepseek-coder"),
                         [](const ::testing::TestParamInfo<std::string>& p) {
                             std::string n = p.param;
                             for (char& ch : n)
                                 if (ch == '-') ch = '_';
                             return n;
                         });

}  // namespace
}  // namespace warden::tokenizer
