#pragma once
// The scheduler's state of one request (private to the scheduler's source files).
#include <memory>
#include <optional>
#include <vector>

#include "engine/scheduler.h"
#include "engine/speculative/policy.h"

namespace warden::engine {

struct Scheduler::Seq {
    Handle h = 0;
    Request req;
    kv::CacheScope scope;  // prefix-cache isolation: server-side tenant + client salt
    kv::SeqId id;
    std::vector<int32_t> tokens;  // prompt + generated
    int64_t n_prompt = 0;
    int64_t n_computed = 0;         // tokens whose K/V are in the cache
    int64_t n_prompt_reported = 0;  // prompt tokens given to on_prompt_tokens (never recounted)
    kv::PageTable table;
    std::unique_ptr<Sampler> sampler;
    bool finished = false;
    bool cancelled = false;              // cancellation processed; a racing step may still name it
    bool emitted = false;                // on_finish called
    std::vector<kv::PageRef> displaced;  // live pages a stale-mapping fault pushed out of the table
    Result res;
    std::vector<TokenLogprobs> prompt_lp;  // prompt logprobs so far (prompt_logprobs >= 0)
    Clock::time_point t_arrival, t_admit, t_first, t_last;
    bool admitted_once = false;
    speculative::SeqState spec;  // speculative decoding (engine/speculative/verify.cpp)
    std::vector<float>
        first_logits;  // a prefilled prompt's: the first token is sampled at admission

    int64_t generated() const { return static_cast<int64_t>(tokens.size()) - n_prompt; }
    // Its prompt's logits are still wanted at every position (before the first token only).
    bool wants_prompt_logits() const { return req.prompt_logprobs >= 0 && generated() == 0; }
};

// Stop conditions after a sampled token (postprocess.cpp; also speculative/verify.cpp).
std::optional<FinishReason> stop_reason(const Request& req, int32_t token, int64_t generated);

}  // namespace warden::engine
