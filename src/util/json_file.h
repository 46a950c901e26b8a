#pragma once
// Reading small text and JSON files (config.json, tokenizer.json, tokenizer_config.json,
// tiktoken.model, ...): one place for the errors a user sees, each naming the file.
#include <nlohmann/json.hpp>
#include <string>

namespace warden::util {

// The whole file. Throws Error "cannot open 'PATH'" / "cannot read 'PATH'".
std::string read_text_file(const std::string& path);
// Parsed JSON. Throws Error for a missing file and "'PATH' is not valid JSON: ..." otherwise.
nlohmann::json read_json_file(const std::string& path);
// The same, keeping the file's key order (for writers that copy a config back out).
nlohmann::ordered_json read_ordered_json_file(const std::string& path);

}  // namespace warden::util
