// Bad input: every problem is a util::Error whose message names it; nothing crashes.
#include <gtest/gtest.h>

#include "formats/gguf_file.h"
#include "tok_test_util.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace warden::tokenizer {
namespace {

using testing::expect_error;
using testing::GgufBuilder;
using testing::TempDir;

GgufBuilder tiny_bpe(const std::string& pre = "gpt-2") {
    GgufBuilder b;
    b.str("tokenizer.ggml.model", "gpt2")
        .str("tokenizer.ggml.pre", pre)
        .strs("tokenizer.ggml.tokens", {"a", "b", "ab", "<|end|>"})
        .i32s("tokenizer.ggml.token_type", {1, 1, 1, 3});
    return b;
}

std::unique_ptr<Tokenizer> from_builder(const GgufBuilder& b) {
    const auto bytes = b.bytes();
    formats::GGUFFile g(bytes.data(), bytes.size(), "test.gguf");
    return Tokenizer::from_gguf(g);
}

TEST(TokenizerErrors, TinyVocabularyWorks) {
    auto tok = from_builder(
        tiny_bpe().strs("tokenizer.ggml.merges", {"a b"}).i32("tokenizer.ggml.eos_token_id", 3));
    EXPECT_EQ(tok->encode("abab", false), (std::vector<int32_t>{2, 2}));
    EXPECT_EQ(tok->encode("ab<|end|>a", false), (std::vector<int32_t>{2, 3, 0}));
    EXPECT_EQ(tok->stop_ids(), std::vector<int32_t>{3});
    EXPECT_EQ(tok->decode(std::vector<int32_t>{2, 3, 0}), "ab<|end|>a");
}

TEST(TokenizerErrors, ByteWithoutTokenIsDropped) {
    // Like llama.cpp and HF (BPE without unk_token): a byte the vocabulary cannot express is
    // dropped rather than mapped to <unk> (often EOS in byte-level vocabularies).
    auto tok = from_builder(tiny_bpe()
                                .strs("tokenizer.ggml.merges", {"a b"})
                                .u32("tokenizer.ggml.unknown_token_id", 3));
    EXPECT_EQ(tok->encode("abcab", false), (std::vector<int32_t>{2, 2}));
    EXPECT_EQ(tok->encode("<|end|>", false, false), std::vector<int32_t>{});
    EXPECT_EQ(tok->encode("<|end|>", false, true), std::vector<int32_t>{3});
}

TEST(TokenizerErrors, MissingOrUnknownMetadata) {
    expect_error([] { from_builder(GgufBuilder().str("general.name", "x")); },
                 "tokenizer.ggml.model");
    expect_error([] { from_builder(GgufBuilder().str("tokenizer.ggml.model", "t5")); },
                 "unsupported tokenizer model 't5'");
    expect_error([] { from_builder(GgufBuilder().str("tokenizer.ggml.model", "gpt2")); },
                 "tokenizer.ggml.tokens");
    expect_error([] { from_builder(tiny_bpe()); }, "merges");
    expect_error([] { from_builder(tiny_bpe().strs("tokenizer.ggml.merges", {})); }, "merges");
    expect_error([] { from_builder(tiny_bpe().strs("tokenizer.ggml.merges", {"ab"})); },
                 "malformed merge #0");
    expect_error([] { from_builder(tiny_bpe("nope").strs("tokenizer.ggml.merges", {"a b"})); },
                 "unknown pre-tokenizer 'nope'");
}

TEST(TokenizerErrors, InconsistentArraysAndIds) {
    GgufBuilder b;
    b.str("tokenizer.ggml.model", "gpt2")
        .strs("tokenizer.ggml.tokens", {"a", "b"})
        .i32s("tokenizer.ggml.token_type", {1});
    expect_error([&] { from_builder(b.strs("tokenizer.ggml.merges", {"a b"})); },
                 "token_type has 1 entries");
    expect_error(
        [] {
            from_builder(tiny_bpe()
                             .strs("tokenizer.ggml.merges", {"a b"})
                             .u32("tokenizer.ggml.bos_token_id", 99));
        },
        "BOS token id 99");
    GgufBuilder t;
    t.str("tokenizer.ggml.model", "gpt2")
        .strs("tokenizer.ggml.tokens", {"a"})
        .i32s("tokenizer.ggml.token_type", {9});
    expect_error([&] { from_builder(t.strs("tokenizer.ggml.merges", {"a a"})); },
                 "unknown token_type 9");
    GgufBuilder e;
    e.str("tokenizer.ggml.model", "gpt2").strs("tokenizer.ggml.tokens", {});
    expect_error([&] { from_builder(e.strs("tokenizer.ggml.merges", {"a a"})); }, "empty");
}

TEST(TokenizerErrors, SentencePieceWithoutScores) {
    GgufBuilder b;
    b.str("tokenizer.ggml.model", "llama").strs("tokenizer.ggml.tokens", {"<unk>", "a"});
    expect_error([&] { from_builder(b); }, "scores");
    GgufBuilder s;
    s.str("tokenizer.ggml.model", "llama")
        .strs("tokenizer.ggml.tokens", {"<unk>", "a"})
        .f32s("tokenizer.ggml.scores", {0.f});
    expect_error([&] { from_builder(s); }, "scores has 1 entries");
    // add_bos_token without a BOS id.
    GgufBuilder n;
    n.str("tokenizer.ggml.model", "llama")
        .strs("tokenizer.ggml.tokens", {"<unk>", "a"})
        .f32s("tokenizer.ggml.scores", {0.f, 0.f});
    expect_error([&] { from_builder(n); }, "bos_token_id");
}

TEST(TokenizerErrors, SentencePieceUnknownFallsBackToUnk) {
    GgufBuilder b;
    b.str("tokenizer.ggml.model", "llama")
        .strs("tokenizer.ggml.tokens", {"<unk>", "<s>", "\xE2\x96\x81", "a",
                                        "\xE2\x96\x81"
                                        "a"})
        .i32s("tokenizer.ggml.token_type", {2, 3, 1, 1, 1})
        .f32s("tokenizer.ggml.scores", {0.f, 0.f, -1.f, -2.f, -0.5f})
        .u32("tokenizer.ggml.bos_token_id", 1)
        .u32("tokenizer.ggml.unknown_token_id", 0);
    auto tok = from_builder(b);
    EXPECT_EQ(tok->encode("a a", true), (std::vector<int32_t>{1, 4, 4}));
    EXPECT_EQ(tok->encode("a\xE4\xBD\xA0", false),
              (std::vector<int32_t>{4, 0}));  // no byte tokens -> <unk>
    EXPECT_EQ(tok->decode(std::vector<int32_t>{4, 4}), "a a");
}

TEST(TokenizerErrors, DecodeOutOfRange) {
    formats::GGUFFile g(testing::shared_dir() + "/testdata/tokenizer/ggml-vocab-gpt-2.gguf");
    auto tok = Tokenizer::from_gguf(g);
    expect_error([&] { tok->decode(std::vector<int32_t>{1, -1}); }, "token id -1 is out of range");
    expect_error([&] { tok->decode(std::vector<int32_t>{tok->vocab_size()}); },
                 "token id 50257 is out of range");
    expect_error([&] { tok->token_bytes(1 << 30); }, "out of range");
    StreamingDecoder dec(*tok);
    expect_error([&] { dec.push(-7); }, "out of range");
    EXPECT_FALSE(tok->is_special(-1));
    EXPECT_FALSE(tok->is_special(1 << 30));
}

std::string hf_json(const std::string& model, const std::string& pre = R"({"type":"ByteLevel"})") {
    return R"({"added_tokens":[{"id":3,"content":"<|end|>","special":true}],"normalizer":null,"pre_tokenizer":)" +
           pre + R"(,"decoder":{"type":"ByteLevel"},"model":)" + model + "}";
}
const std::string kGoodModel =
    R"({"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":[["a","b"]]})";

TEST(TokenizerErrors, HfDirProblems) {
    expect_error([] { Tokenizer::from_hf_dir("/nonexistent/dir"); }, "tokenizer.json not found");
    {
        TempDir d;
        d.write("tokenizer.json", "{not json");
        expect_error([&] { Tokenizer::from_hf_dir(d.str()); }, "not valid JSON");
    }
    {
        TempDir d;
        d.write("tokenizer.json", hf_json(R"({"type":"WordPiece","vocab":{"a":0}})"));
        expect_error([&] { Tokenizer::from_hf_dir(d.str()); },
                     "unsupported model type 'WordPiece'");
    }
    {
        TempDir d;
        d.write("tokenizer.json", hf_json(R"({"type":"BPE","vocab":{"a":0}})"));
        expect_error([&] { Tokenizer::from_hf_dir(d.str()); }, "model.merges missing");
    }
    {
        TempDir d;
        d.write("tokenizer.json", hf_json(R"({"type":"BPE","vocab":{"a":0,"b":1},"merges":[7]})"));
        expect_error([&] { Tokenizer::from_hf_dir(d.str()); }, "malformed merge #0");
    }
    {
        TempDir d;
        d.write("tokenizer.json", hf_json(kGoodModel, R"({"type":"Whitespace"})"));
        expect_error([&] { Tokenizer::from_hf_dir(d.str()); },
                     "unsupported pre_tokenizer type 'Whitespace'");
    }
    {
        TempDir d;
        d.write("tokenizer.json",
                hf_json(kGoodModel,
                        R"({"type":"Split","pattern":{"Regex":"(["},"behavior":"Isolated"})"));
        expect_error([&] { Tokenizer::from_hf_dir(d.str()); }, "does not compile");
    }
    {
        TempDir d;
        d.write("tokenizer.json", hf_json(kGoodModel));
        d.write("tokenizer_config.json", R"({"bos_token":"<s>"})");
        expect_error([&] { Tokenizer::from_hf_dir(d.str()); }, "bos_token '<s>'");
    }
    {
        TempDir d;
        d.write("tokenizer.json", hf_json(R"({"type":"BPE","vocab":"oops","merges":[]})"));
        expect_error([&] { Tokenizer::from_hf_dir(d.str()); }, "model.vocab missing");
    }
    {
        TempDir d;
        d.write(
            "tokenizer.json",
            R"({"model":{"type":"BPE","vocab":{"a":0},"merges":[]},"added_tokens":[{"content":"x"}]})");
        expect_error([&] { Tokenizer::from_hf_dir(d.str()); }, "unexpected structure");
    }
}

TEST(TokenizerErrors, HfDirMinimalWorks) {
    TempDir d;
    d.write("tokenizer.json", hf_json(kGoodModel));
    d.write("tokenizer_config.json",
            R"({"eos_token":{"content":"<|end|>"},"add_bos_token":false})");
    auto tok = Tokenizer::from_hf_dir(d.str());
    EXPECT_EQ(tok->encode("ab<|end|>ba", false), (std::vector<int32_t>{2, 3, 1, 0}));
    EXPECT_EQ(tok->eos_id(), 3);
    EXPECT_TRUE(tok->is_special(3));
    EXPECT_EQ(tok->encode("abc", false), std::vector<int32_t>{2});
}

TEST(TokenizerErrors, FromCheckpointReadsTheDirectoryOrNothing) {
    // A Hugging Face directory: its tokenizer.json, the same tokenizer from_hf_dir gives.
    TempDir d;
    d.write("tokenizer.json", hf_json(kGoodModel));
    auto tok = Tokenizer::from_checkpoint(d.str());
    ASSERT_NE(tok, nullptr);
    EXPECT_EQ(tok->encode("ab<|end|>ba", false),
              Tokenizer::from_hf_dir(d.str())->encode("ab<|end|>ba", false));
    // A directory with neither tokenizer.json nor tiktoken.model: none (the model runs from ids).
    TempDir empty;
    empty.write("config.json", "{}");
    EXPECT_EQ(Tokenizer::from_checkpoint(empty.str()), nullptr);
    // A file is read as GGUF, so what is not one is an error, not an absent tokenizer.
    EXPECT_THROW(Tokenizer::from_checkpoint(d.str() + "/tokenizer.json"), util::Error);
}

TEST(TokenizerErrors, HfSentencePieceStyle) {
    // Llama-style tokenizer.json: Prepend/Replace normalizer, byte_fallback, merges by rank.
    TempDir d;
    std::string vocab = R"({"<unk>":0,"<s>":1,"</s>":2)";
    for (int b = 0; b < 256; ++b) {
        char buf[32];
        std::snprintf(buf, sizeof(buf), ",\"<0x%02X>\":%d", b, 3 + b);
        vocab += buf;
    }
    vocab += R"(,"▁":259,"h":260,"i":261,"hi":262,"▁hi":263})";
    d.write(
        "tokenizer.json",
        R"({"added_tokens":[{"id":0,"content":"<unk>","special":true},{"id":1,"content":"<s>","special":true},)"
        R"({"id":2,"content":"</s>","special":true}],)"
        R"("normalizer":{"type":"Sequence","normalizers":[{"type":"Prepend","prepend":"▁"},{"type":"Replace","pattern":{"String":" "},"content":"▁"}]},)"
        R"("pre_tokenizer":null,"decoder":{"type":"Sequence","decoders":[{"type":"ByteFallback"}]},)"
        R"("model":{"type":"BPE","byte_fallback":true,"vocab":)" +
            vocab + R"(,"merges":["h i","▁ hi"]}})");
    d.write("tokenizer_config.json",
            R"({"bos_token":"<s>","eos_token":"</s>","add_bos_token":true})");
    auto tok = Tokenizer::from_hf_dir(d.str());
    EXPECT_TRUE(tok->add_bos_default());
    const auto ids = tok->encode("hi hi!", true);
    EXPECT_EQ(ids, (std::vector<int32_t>{1, 263, 263, 3 + '!'}));
    EXPECT_EQ(tok->decode(std::span<const int32_t>(ids).subspan(1)), "hi hi!");
}

}  // namespace
}  // namespace warden::tokenizer
