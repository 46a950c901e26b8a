// llama.cpp's tokenizer test vectors: every string of X.gguf.inp encodes (no BOS, special
// tokens not parsed -- as test-tokenizer-0 does) to the ids on the matching line of
// X.gguf.out, and decodes back to itself.
#include <gtest/gtest.h>

#include <chrono>

#include "formats/gguf_file.h"
#include "tok_test_util.h"
#include "tokenizer/tokenizer.h"

namespace warden::tokenizer {
namespace {

using testing::escaped;

struct VocabCase {
    std::string text;
    std::vector<int32_t> ids;
};

// Same reading rules as llama.cpp tests/test-tokenizer-0.cpp: the .inp file is split on
// "\n__ggml_vocab_test__\n" (so each string loses exactly the newline before the separator,
// and the file's final separator ends the list); each .out line is trimmed and split on ' '.
std::vector<VocabCase> read_cases(const std::string& base) {
    std::string inp, out;
    if (!testing::read_file(base + ".inp", inp) || !testing::read_file(base + ".out", out))
        return {};
    const std::string sep = "\n__ggml_vocab_test__\n";
    std::vector<std::string> texts;
    size_t pos = 0;
    while (pos < inp.size()) {
        const size_t next = inp.find(sep, pos);
        if (next == std::string::npos) {
            texts.push_back(inp.substr(pos));
            break;
        }
        texts.push_back(inp.substr(pos, next - pos));
        pos = next + sep.size();
    }
    std::vector<std::vector<int32_t>> ids;
    std::istringstream lines(out);
    for (std::string line; std::getline(lines, line);) {
        std::istringstream ls(line);
        std::vector<int32_t> row;
        for (int32_t id; ls >> id;) row.push_back(id);
        ids.push_back(row);
    }
    std::vector<VocabCase> cases;
    if (texts.size() != ids.size()) return cases;
    for (size_t i = 0; i < texts.size(); ++i) cases.push_back({texts[i], ids[i]});
    return cases;
}

class TokenizerVocab : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenizerVocab, MatchesLlamaCppVectors) {
    const std::string base =
        testing::shared_dir() + "/testdata/tokenizer/ggml-vocab-" + GetParam() + ".gguf";
    const auto cases = read_cases(base);
    ASSERT_FALSE(cases.empty()) << "cannot read " << base << ".inp/.out (or their counts differ)";
    formats::GGUFFile gguf(base);
    auto tok = Tokenizer::from_gguf(gguf);
    int failures = 0;
    for (size_t i = 0; i < cases.size(); ++i) {
        const auto& c = cases[i];
        const auto ids = tok->encode(c.text, /*add_bos=*/false, /*parse_special=*/false);
        EXPECT_EQ(ids, c.ids) << GetParam() << " case " << i << " '" << escaped(c.text) << "'";
        if (ids != c.ids) ++failures;
        EXPECT_EQ(tok->decode(c.ids), c.text)
            << GetParam() << " decode case " << i << " '" << escaped(c.text) << "'";
    }
    EXPECT_EQ(failures, 0) << failures << " of " << cases.size() << " strings differ for "
                           << GetParam();
}

INSTANTIATE_TEST_SUITE_P(TokenizerLlamaCpp, TokenizerVocab,
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
