// StreamingDecoder: pieces are always complete, valid UTF-8; multi-byte characters split
// across tokens come out whole; ill-formed bytes become U+FFFD.
#include <gtest/gtest.h>

#include "formats/gguf_file.h"
#include "tok_test_util.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace warden::tokenizer {
namespace {

using testing::escaped;

bool valid_utf8(const std::string& s) {
    return detail::sanitize_utf8(s) == s;
}

std::unique_ptr<Tokenizer> load_vocab(const std::string& name) {
    formats::GGUFFile g(testing::shared_dir() + "/testdata/tokenizer/ggml-vocab-" + name + ".gguf");
    return Tokenizer::from_gguf(g);
}

const char* const kTexts[] = {
    "你好，世界！東京は日本の首都です。",
    "emoji 🚀👍🏽 family 👨‍👩‍👧‍👦 flag 🇯🇵 and text",
    " naïve café — «quotes» ½ ²",
    "Привет мир 안녕하세요 नमस्ते 🦀",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𠀀𠀁 ﷽",
};

void check_stream(const Tokenizer& tok, const std::string& name) {
    int split_chars = 0;
    for (const char* text : kTexts) {
        const auto ids = tok.encode(text, false, false);
        StreamingDecoder dec(tok);
        std::string got;
        for (int32_t id : ids) {
            if (!valid_utf8(tok.token_bytes(id))) ++split_chars;
            const std::string piece = dec.push(id);
            ASSERT_TRUE(valid_utf8(piece))
                << name << ": invalid UTF-8 piece '" << escaped(piece) << "'";
            got += piece;
        }
        got += dec.flush();
        EXPECT_EQ(got, text) << name;
    }
    EXPECT_GT(split_chars, 0) << name << ": no token split a character; the test proves nothing";
}

TEST(TokenizerStreaming, ByteLevelSplitCharacters) {
    check_stream(*load_vocab("gpt-2"), "gpt-2");
}
TEST(TokenizerStreaming, SentencePieceByteFallback) {
    check_stream(*load_vocab("llama-spm"), "llama-spm");
}
TEST(TokenizerStreaming, DeepseekCoder) {
    check_stream(*load_vocab("deepseek-coder"), "deepseek-coder");
}

TEST(TokenizerStreaming, HoldsBackPartialCodePoint) {
    auto tok = load_vocab("llama-spm");
    // <0xNN> byte tokens of the llama vocabulary are ids 3 + NN.
    ASSERT_EQ(tok->token_bytes(3 + 0xE4), std::string("\xE4"));
    StreamingDecoder dec(*tok);
    EXPECT_EQ(dec.push(3 + 0xE4), "");
    EXPECT_EQ(dec.push(3 + 0xBD), "");
    EXPECT_EQ(dec.push(3 + 0xA0), "你");
    EXPECT_EQ(dec.flush(), "");
}

TEST(TokenizerStreaming, InvalidBytesBecomeReplacementChar) {
    auto tok = load_vocab("llama-spm");
    const std::string fffd = "\xEF\xBF\xBD";
    StreamingDecoder dec(*tok);
    std::string out = dec.push(3 + 0xFF);  // never valid
    EXPECT_EQ(out, fffd);
    EXPECT_EQ(dec.push(3 + 0xE4), "");  // lead byte ...
    EXPECT_EQ(dec.push(3 + 0xBD), "");
    out = dec.push(3 + 'a');  // ... cut short by 'a': one U+FFFD for the maximal subpart, then 'a'
    EXPECT_EQ(out, fffd + "a");
    EXPECT_EQ(dec.push(3 + 0xC0), fffd);  // overlong lead
    EXPECT_EQ(dec.push(3 + 0x80), fffd);  // stray continuation
    EXPECT_EQ(dec.push(3 + 0xED), "");
    EXPECT_EQ(dec.push(3 + 0xA0), fffd + fffd);  // surrogate: ED then A0 are both ill-formed
    EXPECT_EQ(dec.push(3 + 0xF0), "");
    EXPECT_EQ(dec.flush(), fffd);  // truncated at the end
    EXPECT_EQ(dec.flush(), "");
}

TEST(TokenizerStreaming, ByteLevelInvalidBytes) {
    auto tok = load_vocab("gpt-2");
    // Byte-level BPE keeps arbitrary bytes: ill-formed input round-trips through decode() and
    // StreamingDecoder shows U+FFFD for it.
    const std::string bad = "ok \xFF\xC3( \xE4\xBD end\xF0\x9F";
    const auto ids = tok->encode(bad, false);
    EXPECT_EQ(tok->decode(ids), bad);
    StreamingDecoder dec(*tok);
    std::string got;
    for (int32_t id : ids) {
        const std::string p = dec.push(id);
        ASSERT_TRUE(valid_utf8(p));
        got += p;
    }
    got += dec.flush();
    EXPECT_EQ(got, detail::sanitize_utf8(bad));
    EXPECT_EQ(got, "ok \xEF\xBF\xBD\xEF\xBF\xBD( \xEF\xBF\xBD end\xEF\xBF\xBD");
}

TEST(TokenizerStreaming, SentencePieceLeadingSpace) {
    auto tok = load_vocab("llama-spm");
    for (const std::string text : {"Hello world", " Hello", "  two spaces", "\nnewline", ""}) {
        const auto ids = tok->encode(text, false);
        StreamingDecoder dec(*tok);
        std::string got;
        for (int32_t id : ids) got += dec.push(id);
        got += dec.flush();
        EXPECT_EQ(got, text);
        EXPECT_EQ(tok->decode(ids), text);
    }
    // With BOS: "<s>" renders as its text, the prefix space after it is dropped.
    const auto ids = tok->encode("Hello", true);
    ASSERT_EQ(ids.front(), tok->bos_id());
    EXPECT_EQ(tok->decode(ids), "<s>Hello");
}

TEST(TokenizerStreaming, SpecialTokensAndFlushResets) {
    auto tok = load_vocab("phi-3");
    const auto ids = tok->encode("<|user|>\nHi 你好<|end|>", false, true);
    StreamingDecoder dec(*tok);
    std::string got;
    for (int32_t id : ids) got += dec.push(id);
    got += dec.flush();
    // phi-3 strips whitespace after <|user|> (rstrip), so the newline is not encoded.
    EXPECT_EQ(got, "<|user|>Hi 你好<|end|>");
}

}  // namespace
}  // namespace warden::tokenizer
