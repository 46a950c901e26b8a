#pragma once
// A source of draft tokens for speculative decoding. Before a step, the scheduler asks the
// proposer for up to k tokens that may follow each decoding sequence; the target model then
// verifies them all in that step (engine/speculative/verify.cpp). Proposers are used on the
// scheduler's thread only.
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "engine/sampler.h"
#include "kv/page_table.h"

namespace warden::engine::speculative {

struct DraftRequest {
    kv::SeqId id;
    // Prompt + output so far; the last token is sampled but not yet in the target's KV.
    std::span<const int32_t> tokens;
    int64_t n_prompt = 0;
    int32_t k = 0;                             // propose at most this many
    const SamplingParams* sampling = nullptr;  // the request's (a draft model samples with it)
    std::vector<int32_t> draft;                // out: the proposal, at most k tokens
    std::vector<std::vector<std::pair<float, int32_t>>>
        q;  // out: the draft distribution of each token (as Sampler::distribution); empty when
            // the proposal is deterministic (a point mass)
    int32_t evidence = 0;  // out, where sizes_by_evidence(): how strongly the context backs the
                           // draft (prompt lookup: how many tokens of context matched)
};

class Proposer {
  public:
    virtual ~Proposer() = default;
    virtual const char* name() const = 0;
    // Fills draft (and q) of each request; an empty draft is a valid answer.
    virtual void propose(std::span<DraftRequest*> reqs) = 0;
    // Whether proposing is cheap and each draft carries its evidence: then the scheduler asks
    // for the longest drafts and shortens each by the acceptance measured for its evidence
    // (policy.h, EvidenceAcceptance) instead of sizing the request beforehand.
    virtual bool sizes_by_evidence() const { return false; }
    // The target verified the sequence: its first n_valid tokens are final (later proposals
    // build on them; anything the proposer holds past them is stale).
    virtual void rollback(kv::SeqId /*id*/, int64_t /*n_valid*/) {}
    // The sequence ended or was preempted: drop whatever the proposer holds for it.
    virtual void release(kv::SeqId /*id*/) {}
    // Whether the proposer reads the target's final hidden states (an MTP layer does); then
    // after every target step each computed sequence's rows arrive through observe_hidden:
    // positions [pos0, pos0 + n), `tokens` the step's inputs, hidden [n, d_model].
    virtual bool wants_hidden() const { return false; }
    virtual void observe_hidden(kv::SeqId /*id*/, int64_t /*pos0*/,
                                std::span<const int32_t> /*tokens*/, const float* /*hidden*/) {}
};

}  // namespace warden::engine::speculative
