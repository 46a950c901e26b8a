#pragma once
// tiny-llama (tests/golden/models/tiny-llama, a 2-layer random Llama with a transformers
// golden) loaded for the engine, KV and paged-attention tests: the model, a 2-thread pool and
// the transformer, plus a KV cache config holding a given number of pages.
#include <filesystem>
#include <memory>
#include <string>

#include "kv/kv_cache.h"
#include "model/model.h"
#include "model/transformer.h"
#include "test_paths.h"

namespace warden::test {

inline bool tiny_llama_present() {
    return std::filesystem::exists(golden_model("tiny-llama") + "/config.json");
}

struct TinyLlama {
    util::ThreadPool pool{2};
    std::unique_ptr<model::Model> model;
    std::unique_ptr<model::Transformer> tf;

    explicit TinyLlama(model::RuntimeDType dtype = model::RuntimeDType::BF16) {
        model::LoadOptions lo;
        lo.dtype = dtype;
        lo.load_tokenizer = false;
        model = model::load_model(golden_model("tiny-llama"), lo, pool);
        tf = std::make_unique<model::Transformer>(*model, pool);
    }
    int64_t vocab() const { return model->config.vocab_size; }
    // The model's KV geometry in `type`, with a budget of exactly `pages` pages of `page_size`.
    kv::KvCacheConfig kv_config(int32_t page_size, int64_t pages,
                                tensor::KvType type = tensor::KvType::BF16) const {
        auto c = kv::KvCacheConfig::shaped(model->config.n_layers, model->config.n_kv_heads,
                                           model->config.head_dim, type, page_size);
        c.budget_bytes = kv::kv_budget_for_tokens(c, pages * page_size);
        return c;
    }
};

}  // namespace warden::test
