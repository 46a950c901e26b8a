#include "engine/speculative/draft_proposer.h"

#include <algorithm>

#include "engine/speculative/rejection.h"
#include "util/error.h"
#include "util/log.h"

namespace warden::engine::speculative {

DraftProposer::DraftProposer(std::unique_ptr<model::Model> draft, kv::KvCache& kv,
                             util::ThreadPool& pool)
    : model_(std::move(draft)), tf_(*model_, pool), kv_(kv), seqs_(kv) {
    const model::ModelConfig& c = model_->config;
    const model::KvShape sh = c.kv_shape();
    const kernels::PagedKvStorage& st = kv_.storage();
    util::check(!sh.k_only && st.n_layers == c.n_layers && st.n_kv_heads == c.n_kv_heads &&
                    st.head_dim == c.head_dim,
                "--spec draft: the draft model must share the target's KV geometry (layers, kv "
                "heads, head dim) because its KV lives in the target's pages; use the target's "
                "own checkpoint in a cheaper --draft-weights format");
}

// Keeps the draft's KV for its first n_valid inputs; whole pages past them go back to the pool.
void DraftProposer::shrink(SeqDraft& d, int64_t n_valid) {
    if (static_cast<int64_t>(d.tokens.size()) > n_valid)
        d.tokens.resize(static_cast<size_t>(n_valid));
    d.table.n_tokens = static_cast<int64_t>(d.tokens.size());
    seqs_.trim_pages(d);
}

void DraftProposer::rollback(kv::SeqId id, int64_t n_valid) {
    if (SeqDraft* d = seqs_.find(id)) shrink(*d, n_valid);
}

void DraftProposer::release(kv::SeqId id) {
    seqs_.release(id);
}

void DraftProposer::propose(std::span<DraftRequest*> reqs) {
    const int64_t vocab = model_->config.vocab_size;
    // One page per sequence in the step stays free for the target's own growth.
    const auto keep_free = static_cast<int64_t>(reqs.size());
    struct Live {
        DraftRequest* r;
        SeqDraft* d;
        std::vector<int32_t> pending;  // inputs still to run through the draft
        std::vector<int32_t> history;  // tokens + drafts so far (sampling penalties)
        std::vector<int32_t> pages;
        std::vector<float> logits;
    };
    std::vector<Live> live;
    for (DraftRequest* r : reqs) {
        r->draft.clear();
        r->q.clear();
        if (r->k <= 0 || r->tokens.empty()) continue;
        SeqDraft& d = seqs_.at(r->id);
        // The draft's KV is valid for the longest common prefix of its inputs and the tokens.
        const auto common = static_cast<int64_t>(
            std::mismatch(d.tokens.begin(), d.tokens.end(), r->tokens.begin(), r->tokens.end())
                .first -
            d.tokens.begin());
        shrink(d, std::min<int64_t>(common, static_cast<int64_t>(r->tokens.size()) - 1));
        if (!seqs_.reserve(d, static_cast<int64_t>(r->tokens.size()) + r->k - 1, keep_free)) {
            ++stats_.no_pages;
            release(r->id);
            continue;
        }
        if (!seqs_.check_pages(r->id, d, "draft", stats_.integrity_violations)) {
            seqs_.forget(r->id);
            continue;
        }
        prepare_sampler(d.sampler, r->sampling, 0xd1b54a32d192ed03ULL);
        Live l;
        l.r = r;
        l.d = &d;
        l.pending.assign(r->tokens.begin() + static_cast<std::ptrdiff_t>(d.tokens.size()),
                         r->tokens.end());
        l.history.assign(r->tokens.begin(), r->tokens.end());
        live.push_back(std::move(l));
    }
    // Catch-up chunks (prompt or last verified tokens), then one token per step: each step's
    // last row gives the next draft token of the sequences that finished their pending inputs.
    while (!live.empty()) {
        std::vector<model::SeqInput> in;
        std::vector<size_t> who;
        std::vector<int64_t> n_in;
        for (size_t i = 0; i < live.size(); ++i) {
            Live& l = live[i];
            const auto n = std::min<int64_t>(static_cast<int64_t>(l.pending.size()),
                                             model::Transformer::kMaxChunk);
            l.pages.clear();
            for (const kv::PageRef& p : l.d->table.pages) l.pages.push_back(p.page.v);
            const bool last = n == static_cast<int64_t>(l.pending.size());
            l.logits.assign(last ? static_cast<size_t>(vocab) : 0, 0.0f);
            model::SeqInput s;
            s.tokens = std::span<const int32_t>(l.pending.data(), static_cast<size_t>(n));
            s.pos0 = static_cast<int64_t>(l.d->tokens.size());
            s.page_ids = l.pages.data();
            s.logits = last ? l.logits.data() : nullptr;
            in.push_back(s);
            who.push_back(i);
            n_in.push_back(n);
        }
        tf_.step(in, kv_.storage());
        ++stats_.steps;
        std::vector<Live> next;
        for (size_t j = 0; j < who.size(); ++j) {
            Live& l = live[who[j]];
            l.d->tokens.insert(l.d->tokens.end(), l.pending.begin(), l.pending.begin() + n_in[j]);
            l.d->table.n_tokens = static_cast<int64_t>(l.d->tokens.size());
            stats_.tokens += n_in[j];
            l.pending.erase(l.pending.begin(), l.pending.begin() + n_in[j]);
            if (!l.pending.empty()) {
                next.push_back(std::move(l));
                continue;
            }
            int32_t t = 0;
            if (!l.d->sampler) {
                t = Sampler::argmax(l.logits);
            } else {
                const auto& q = l.d->sampler->distribution(l.logits, l.history,
                                                           static_cast<size_t>(l.r->n_prompt));
                l.r->q.emplace_back(q.begin(), q.end());
                std::mt19937_64 draw_rng(l.d->tokens.size() * 0x9e3779b97f4a7c15ULL ^
                                         l.r->sampling->seed);
                t = draw(Dist(l.r->q.back()), draw_rng);
            }
            l.r->draft.push_back(t);
            l.history.push_back(t);
            // The last draft token is never fed back: the target verifies it.
            if (static_cast<int32_t>(l.r->draft.size()) < l.r->k) {
                l.pending.push_back(t);
                next.push_back(std::move(l));
            }
        }
        live = std::move(next);
    }
}

}  // namespace warden::engine::speculative
