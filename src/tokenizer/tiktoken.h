#pragma once
// tiktoken vocabularies (tiktoken.model: one "base64(token bytes) rank" line per token, the
// rank being the token id) with Kimi's pre-tokenizer and special-token layout, as shipped by
// Kimi K2 / Kimi-Linear / Moonlight (tiktoken.model + tokenizer_config.json +
// tokenization_kimi.py, no tokenizer.json). Internal to the tokenizer folder; users reach it
// through Tokenizer::from_hf_dir. Implementation: load_tiktoken.cpp.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace warden::tokenizer::detail {

// Parses the text of a tiktoken.model file. Returns the token bytes indexed by rank. Throws
// util::Error naming `source` and the line for bad base64, an empty token, a rank that is not
// a plain decimal number, a repeated rank or repeated token bytes, or ranks that are not
// exactly 0..n-1 (a gap would shift the special-token ids that follow the ranks).
std::vector<std::string> parse_tiktoken_ranks(std::string_view text, const std::string& source);

// Kimi's pat_str translated to PCRE2 (see load_tiktoken.cpp for why and how).
const std::string& kimi_pattern();

// Loads dir/tiktoken.model + dir/tokenizer_config.json (Kimi conventions). Throws util::Error
// when the directory is not a Kimi tiktoken tokenizer or a file is malformed.
std::unique_ptr<Tokenizer> load_tiktoken_dir(const std::string& dir);

}  // namespace warden::tokenizer::detail
