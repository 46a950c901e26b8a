#pragma once
// Text <-> token ids. One interface over the two families warden supports:
//  - SentencePiece-style BPE (llama 2, phi-3 vocabularies: scores, "▁" for spaces, byte
//    fallback tokens <0xNN>),
//  - byte-level BPE (GPT-2 byte-to-unicode mapping, merges ranks) with the pre-tokenizer
//    regex of each family (gpt2, llama3, qwen2, deepseek, starcoder/falcon style, ...).
// Special/added tokens are matched verbatim before BPE when parse_special is true.
// Tokenizers are immutable after construction: encode/decode are const and thread-safe.
// Implementation: vocab.{h,cpp} (shared vocabulary, special-token splitting), bpe.cpp
// (byte-level), spm.cpp (SentencePiece), regex_split.{h,cpp} (PCRE2 pre-tokenizers and the
// tokenizer.ggml.pre table), load_gguf.cpp, load_hf.cpp, load_checkpoint.cpp, decode.cpp,
// unicode.{h,cpp}.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace warden::formats {
class GGUFFile;
}

namespace warden::tokenizer {

class Tokenizer {
  public:
    virtual ~Tokenizer() = default;

    // From GGUF metadata (tokenizer.ggml.*). Throws util::Error on unsupported/missing data.
    static std::unique_ptr<Tokenizer> from_gguf(const formats::GGUFFile& gguf);
    // From a Hugging Face model directory: tokenizer.json (+ tokenizer_config.json for
    // BOS/EOS and add_bos rules), or, without tokenizer.json, a Kimi tiktoken.model
    // (+ tokenizer_config.json special tokens; see tiktoken.h).
    static std::unique_ptr<Tokenizer> from_hf_dir(const std::string& dir);
    // The tokenizer a checkpoint ships beside its weights, read from the same place as the model:
    // a GGUF file's metadata (`open_gguf`: the model's already-open file, else `path` is opened),
    // or a Hugging Face directory's tokenizer.json or tiktoken.model (from_hf_dir). nullptr for a
    // directory with neither: such models run from token ids.
    static std::unique_ptr<Tokenizer> from_checkpoint(const std::string& path,
                                                      const formats::GGUFFile* open_gguf = nullptr);

    // add_bos: prepend BOS if the model's rules ask for it (add_bos_token metadata), and
    // append EOS if they ask for that (add_eos_token).
    // parse_special: control tokens (<|im_start|>, <s>, ...) in the text become their ids.
    // Added non-special (user-defined) tokens are always matched, as in llama.cpp and HF.
    // Matching is leftmost, longest token first at a position. SentencePiece vocabularies
    // insert the "▁" space prefix at the start of every run of text (start of input and after
    // each special token), like llama.cpp.
    // Text need not be valid UTF-8: ill-formed bytes never match a pre-tokenizer class and
    // are encoded byte by byte (byte-level BPE) or via <0xNN> byte fallback (SentencePiece),
    // so decode() gives the exact bytes back.
    virtual std::vector<int32_t> encode(std::string_view text, bool add_bos,
                                        bool parse_special = true) const = 0;
    // Raw bytes of one token (may be a partial UTF-8 sequence). Special tokens render as
    // their text (e.g. "<|im_end|>").
    virtual std::string token_bytes(int32_t id) const = 0;
    // The bytes of `id` when it is the first token of a run of text (at the start of a
    // sequence or right after a special/added token). SentencePiece vocabularies with
    // add_space_prefix drop the one leading space that encode() inserted there, so that
    // decode(encode(s)) == s; every other case equals token_bytes(id).
    virtual std::string token_piece(int32_t id, bool at_text_start) const {
        return token_bytes(id);
    }
    // Concatenated bytes; invalid UTF-8 at the end is kept as-is (use StreamingDecoder for
    // display). Uses token_piece(): a piece at the start or right after a special/added token
    // loses the space prefix SentencePiece encoding added (llama.cpp strips it only for the
    // very first token; we strip it wherever encode() inserted one). No
    // clean_up_tokenization_spaces pass (llama.cpp applies one for gpt2-style vocabularies; it
    // is lossy). Throws util::Error for an id outside [0, vocab_size()).
    std::string decode(std::span<const int32_t> ids) const;

    virtual int32_t vocab_size() const = 0;
    virtual int32_t bos_id() const = 0;  // -1 if none
    virtual int32_t eos_id() const = 0;  // -1 if none
    virtual bool add_bos_default() const = 0;
    // Ids that end generation: eos plus end-of-turn tokens (eot/eom/<|im_end|>, ...).
    virtual std::vector<int32_t> stop_ids() const = 0;
    virtual bool is_special(int32_t id) const = 0;
    // Special or added (user-defined) token, i.e. one encode() matches verbatim before BPE.
    virtual bool is_special_or_added(int32_t id) const { return is_special(id); }
    // Human-readable kind, e.g. "byte-level BPE (pre: smollm)" or "SentencePiece BPE".
    virtual std::string kind() const = 0;
    // (text, id) of control/added tokens.
    virtual std::vector<std::pair<std::string, int32_t>> special_tokens() const = 0;
};

// The GGUF pre-tokenizer table (llama.cpp's tokenizer.ggml.pre names; regex_split.cpp), for
// `warden pretokenizer` and the test that compares it with llama.cpp's source.
struct PreTokenizerInfo {
    std::vector<std::string> patterns;  // PCRE2, applied in order
    bool ignore_merges = false;         // a pre-token that is a whole vocabulary entry skips BPE
    bool add_bos = false;               // default when the GGUF has no add_bos_token
};
std::vector<std::string> pretokenizer_names();
// Throws util::Error for an unknown name or one warden does not support.
PreTokenizerInfo pretokenizer_info(const std::string& pre_name);

// Turns a stream of token ids into text pieces that are always complete UTF-8: bytes of a
// partial code point are held back until it completes; invalid sequences are replaced with
// U+FFFD rather than emitted broken.
class StreamingDecoder {
  public:
    explicit StreamingDecoder(const Tokenizer& tok) : tok_(tok) {}
    std::string push(int32_t id);  // text that became complete with this token
    std::string flush();           // whatever is left (invalid tail -> U+FFFD)

  private:
    const Tokenizer& tok_;
    std::string pending_;
    bool at_text_start_ = true;  // next piece starts a run of text (see token_piece)
};

}  // namespace warden::tokenizer
