// Tokenizer::from_checkpoint: the tokenizer beside a model, from the GGUF file or the Hugging Face
// directory the model is loaded from (launch::load loads both side by side).
#include <filesystem>

#include "formats/gguf_file.h"
#include "tokenizer/tokenizer.h"

namespace warden::tokenizer {

std::unique_ptr<Tokenizer> Tokenizer::from_checkpoint(const std::string& path,
                                                      const formats::GGUFFile* open_gguf) {
    if (open_gguf != nullptr) return from_gguf(*open_gguf);
    std::error_code ec;
    if (!std::filesystem::is_directory(path, ec)) return from_gguf(formats::GGUFFile(path));
    // tokenizer.json, or Kimi's tiktoken.model (load_tiktoken.cpp).
    if (std::filesystem::exists(path + "/tokenizer.json") ||
        std::filesystem::exists(path + "/tiktoken.model"))
        return from_hf_dir(path);
    return nullptr;
}

}  // namespace warden::tokenizer
