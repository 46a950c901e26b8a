#include "engine/logit_processors.h"

#include <limits>

namespace warden::engine {

void apply_logit_processors(const Request& req, int64_t generated, std::span<float> logits) {
    const auto in_vocab = [&](int32_t id) {
        return id >= 0 && static_cast<size_t>(id) < logits.size();
    };
    for (const auto& [id, bias] : req.logit_bias)
        if (in_vocab(id)) logits[static_cast<size_t>(id)] += bias;
    if (generated < req.min_tokens)
        for (int32_t id : req.stop_ids)
            if (in_vocab(id))
                logits[static_cast<size_t>(id)] = -std::numeric_limits<float>::infinity();
}

}  // namespace warden::engine
