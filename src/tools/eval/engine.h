#pragma once
// One configuration of `warden eval`, loaded in-process: full-sequence logits (prefill) and
// greedy generation on the paged KV cache, as `warden logits` / `run` compute them.
#include <memory>
#include <string>
#include <vector>

#include "kv/kv_cache.h"
#include "model/model.h"
#include "model/transformer.h"
#include "tokenizer/tokenizer.h"
#include "tools/eval/config.h"
#include "util/thread_pool.h"

namespace warden::tools::eval {

class EvalEngine {
  public:
    EvalEngine(const std::string& model_path, const EvalConfig& cfg, util::ThreadPool& pool);
    const model::Model& model() const { return *model_; }
    const tokenizer::Tokenizer& tokenizer() const { return *tokenizer_; }
    int64_t vocab() const { return model_->config.vocab_size; }
    std::vector<int32_t> encode(const std::string& text, bool bos = true) const;
    std::string decode(const std::vector<int32_t>& ids) const;
    // Logits of every position, [tokens.size(), vocab].
    std::vector<float> logits_all(const std::vector<int32_t>& tokens);
    // Up to n greedy tokens after `prompt`, stopping at the tokenizer's stop ids. When
    // step_ms is given, the wall time of the prefill and of every decode step is appended.
    std::vector<int32_t> greedy(const std::vector<int32_t>& prompt, int64_t n,
                                std::vector<double>* step_ms = nullptr);

  private:
    void run(const std::vector<int32_t>& prompt, int64_t n, std::vector<float>* all,
             std::vector<int32_t>* gen, std::vector<double>* step_ms);
    EvalConfig cfg_;
    util::ThreadPool& pool_;
    std::unique_ptr<model::Model> model_;
    std::unique_ptr<tokenizer::Tokenizer> tokenizer_;  // loaded beside model_, never null
};

}  // namespace warden::tools::eval
