#pragma once
// One choice of a completion: turns the engine's token events into text (incremental UTF-8
// safe detokenization), applies stop strings (also ones spanning tokens: text that could be the
// start of a stop string is held back until it is decided), keeps the logprobs and maps the
// engine's finish to OpenAI's finish_reason or an error.
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "tokenizer/tokenizer.h"

namespace warden::server {

nlohmann::json timing_json(const engine::Timing& t);

struct LogprobEntry {
    int32_t token = 0;
    float logprob = 0;
    std::vector<std::pair<int32_t, float>> top;
    size_t text_offset = 0;
};

// What a choice does with its tokens (from the request).
struct ChoiceOptions {
    std::vector<int32_t> stop_ids;  // end the text (EOS unless ignore_eos, plus stop_token_ids)
    std::vector<std::string> stop;
    bool chat = false;
    int32_t top_logprobs = -1;  // < 0: no logprobs in the answer
    int64_t max_tokens = 16;    // tokens past this are dropped (max_tokens 0 runs one)
    bool include_stop_str = false;
    bool skip_special = false;  // special tokens leave no text
    // Prompt: echoed in front of the text (completions' echo), its tokens' logprobs in the
    // logprobs (echo) and/or as vLLM's prompt_logprobs.
    bool echo = false;
    std::string echo_text;
    std::vector<int32_t> prompt;
    int32_t prompt_logprobs = -1;  // < 0: not in the answer
};

class Choice {
  public:
    Choice(int index, const tokenizer::Tokenizer& tok, std::shared_ptr<engine::Stream> stream,
           ChoiceOptions opts);

    void on_event(engine::Event&& ev);
    // Moves text that can no longer become part of a stop string into `out`. True if any.
    bool take_sendable(std::string& out);
    nlohmann::json logprobs_json(size_t from, size_t to) const;  // null when not requested
    // The prompt's entries of echo's logprobs, in front of the generated ones (completions).
    nlohmann::json echo_logprobs_json() const;
    // vLLM's prompt_logprobs: [null, {"<id>": {logprob, rank, decoded_token}, ...}, ...].
    nlohmann::json prompt_logprobs_json() const;
    double cumulative_logprob() const;

    int index;
    std::shared_ptr<engine::Stream> stream;
    std::string text;
    std::string finish;  // "stop" / "length" once known
    bool done = false;   // the engine's Finish event arrived
    bool started = false, finish_sent = false;
    int error_status = 0;  // non-zero: the request failed
    std::string error;
    int64_t n_tokens = 0;  // generated tokens consumed (up to a stop string)
    engine::Result result;
    std::vector<LogprobEntry> lp;
    size_t lp_sent = 0;
    bool want_logprobs = false;
    bool chat = false;
    ChoiceOptions opts;
    std::vector<engine::TokenLogprobs> prompt_lp;  // prompt tokens 1.. (when asked)

  private:
    void append(const std::string& piece);
    size_t holdback() const;
    const tokenizer::Tokenizer& tok_;
    tokenizer::StreamingDecoder dec_;
    size_t sent_ = 0;
    bool stopped_ = false;  // a stop string or stop token ended the text
};

}  // namespace warden::server
