#pragma once
// Pre-tokenization: a sequence of PCRE2 patterns (UTF + UCP, JIT when available). Each
// pattern splits every current piece into its matches and the unmatched gaps between them
// (both kept, in order) -- the semantics of llama.cpp's unicode_regex_split and of a Hugging
// Face `Split` pre-tokenizer with behavior "Isolated". Internal to the tokenizer folder.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace warden::tokenizer::detail {

class RegexSplitter {
  public:
    // Throws util::Error naming the pattern when one does not compile.
    explicit RegexSplitter(std::vector<std::string> patterns);
    ~RegexSplitter();
    RegexSplitter(const RegexSplitter&) = delete;
    RegexSplitter& operator=(const RegexSplitter&) = delete;

    // Pieces are views into `text`. Invalid UTF-8 is allowed: ill-formed bytes never match
    // a pattern, so they end up in gaps and reach BPE unchanged. Thread-safe.
    std::vector<std::string_view> split(std::string_view text) const;

    const std::vector<std::string>& patterns() const { return patterns_; }

  private:
    struct Compiled;
    std::vector<std::string> patterns_;
    std::vector<std::unique_ptr<Compiled>> compiled_;
};

struct PreTokenizerSpec {
    std::vector<std::string> patterns;
    bool ignore_merges = false;  // whole pre-token looked up before BPE (llama3, tekken)
    bool add_bos = false;        // default for add_bos when the GGUF does not say
};

// llama.cpp's tokenizer.ggml.pre names -> the regexes llama.cpp uses for them. Throws
// util::Error for an unknown name or one warden does not support (regex_split.cpp lists them).
PreTokenizerSpec pretokenizer_for(const std::string& pre_name);

// The GPT-2 pattern (what Hugging Face ByteLevel(use_regex=true) applies).
const std::string& gpt2_pattern();

}  // namespace warden::tokenizer::detail
