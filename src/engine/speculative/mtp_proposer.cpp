#include "engine/speculative/mtp_proposer.h"

#include <algorithm>

#include "engine/speculative/rejection.h"
#include "util/error.h"
#include "util/log.h"

namespace warden::engine::speculative {

MtpProposer::MtpProposer(std::unique_ptr<model::Model> mtp, kv::KvCache& kv, util::ThreadPool& pool)
    : model_(std::move(mtp)), tf_(*model_, pool), kv_(kv), seqs_(kv) {
    const model::ModelConfig& c = model_->config;
    util::check(model_->weights.mtp_in != nullptr && c.n_layers == 1,
                "--spec mtp: not an MTP layer (model::load_mtp_model makes one)");
    const model::KvShape sh = c.kv_shape();
    const kernels::PagedKvStorage& st = kv_.storage();
    util::check(st.n_layers >= 1 && st.k_only == sh.k_only && st.n_kv_heads == sh.n_kv_heads &&
                    st.head_dim == sh.head_dim,
                "--spec mtp: the MTP layer's KV geometry differs from the target's");
}

// Keeps the layer's KV for its first n_rows positions; whole pages past them go back.
void MtpProposer::shrink(SeqMtp& m, int64_t n_rows) {
    m.rows = std::min(m.rows, n_rows);
    m.table.n_tokens = std::min(m.table.n_tokens, n_rows);
    seqs_.trim_pages(m);
}

void MtpProposer::observe_hidden(kv::SeqId id, int64_t pos0, std::span<const int32_t> tokens,
                                 const float* hidden) {
    SeqMtp& m = seqs_.at(id);
    if (m.lost) return;
    const int64_t d = model_->config.d_model;
    // The target (re)computed these positions: what the layer held from them on is stale.
    m.hidden.erase(m.hidden.lower_bound(pos0), m.hidden.end());
    if (m.rows > pos0) shrink(m, pos0);
    for (size_t i = 0; i < tokens.size(); ++i)
        m.hidden[pos0 + static_cast<int64_t>(i)].assign(hidden + static_cast<int64_t>(i) * d,
                                                        hidden + static_cast<int64_t>(i + 1) * d);
}

void MtpProposer::rollback(kv::SeqId id, int64_t n_valid) {
    SeqMtp* const found = seqs_.find(id);
    if (!found) return;
    SeqMtp& m = *found;
    m.hidden.erase(m.hidden.lower_bound(n_valid), m.hidden.end());
    shrink(m, std::min(m.rows, n_valid));
}

void MtpProposer::release(kv::SeqId id) {
    seqs_.release(id);
}

void MtpProposer::propose(std::span<DraftRequest*> reqs) {
    const int64_t vocab = model_->config.vocab_size, d = model_->config.d_model;
    const auto keep_free = static_cast<int64_t>(reqs.size());
    struct Live {
        DraftRequest* r;
        SeqMtp* m;
        int64_t pos = 0;               // position of the next row
        bool chain = false;            // rows from here on are provisional (drafts)
        std::vector<int32_t> tokens;   // the next rows' tokens (t[p + 1])
        std::vector<float> hidden;     // and their hidden states [rows, d]
        std::vector<int32_t> history;  // tokens + drafts so far (sampling penalties)
        std::vector<int32_t> pages;
        std::vector<float> logits, out;
    };
    std::vector<Live> live;
    for (DraftRequest* r : reqs) {
        r->draft.clear();
        r->q.clear();
        const auto T = static_cast<int64_t>(r->tokens.size()) - 1;  // positions in target KV
        if (T <= 0) continue;
        SeqMtp& m = seqs_.at(r->id);
        if (m.lost) continue;
        // Chained rows of the last proposal are provisional; the last final row is rerun when
        // there is nothing new, for its logits (the first draft).
        shrink(m, std::min(m.rows, T - (r->k > 0 ? 1 : 0)));
        bool have = true;
        for (int64_t p = m.rows; p < T && have; ++p) have = m.hidden.count(p) > 0;
        if (!have) {
            ++stats_.no_hidden;
            (void)kv_.free(m.table);
            m = SeqMtp{};
            m.lost = true;
            continue;
        }
        const int64_t k = std::max<int32_t>(r->k, 0);
        if (!seqs_.reserve(m, T + std::max<int64_t>(k - 1, 0), keep_free)) {
            ++stats_.no_pages;  // no drafts this step; the hidden states wait for the next
            continue;
        }
        if (!seqs_.check_pages(r->id, m, "MTP", stats_.integrity_violations)) {
            m = SeqMtp{};
            m.lost = true;
            continue;
        }
        if (m.rows == T) continue;  // k == 0 and nothing new
        prepare_sampler(m.sampler, r->sampling, 0x6a09e667f3bcc909ULL);
        Live l;
        l.r = r;
        l.m = &m;
        l.pos = m.rows;
        for (int64_t p = m.rows; p < T; ++p) {
            l.tokens.push_back(r->tokens[static_cast<size_t>(p + 1)]);
            const std::vector<float>& h = m.hidden.at(p);
            l.hidden.insert(l.hidden.end(), h.begin(), h.end());
        }
        if (k > 0) l.history.assign(r->tokens.begin(), r->tokens.end());
        live.push_back(std::move(l));
    }
    // Catch-up chunks (the positions since the last proposal, or a whole prompt), then one row
    // per step along the chain: each step's last row gives the next draft of the sequences whose
    // catch-up is done.
    while (!live.empty()) {
        std::vector<model::SeqInput> in;
        std::vector<int64_t> n_in;
        for (Live& l : live) {
            const auto n = std::min<int64_t>(static_cast<int64_t>(l.tokens.size()),
                                             model::Transformer::kMaxChunk);
            const bool last = n == static_cast<int64_t>(l.tokens.size()) && l.r->k > 0;
            const bool more = last && static_cast<int32_t>(l.r->draft.size()) + 1 < l.r->k;
            l.pages.clear();
            for (const kv::PageRef& p : l.m->table.pages) l.pages.push_back(p.page.v);
            l.logits.assign(last ? static_cast<size_t>(vocab) : 0, 0.0f);
            l.out.assign(more ? static_cast<size_t>(n * d) : 0, 0.0f);
            model::SeqInput s;
            s.tokens = std::span<const int32_t>(l.tokens.data(), static_cast<size_t>(n));
            s.pos0 = l.pos;
            s.page_ids = l.pages.data();
            s.logits = last ? l.logits.data() : nullptr;
            s.hidden_in = l.hidden.data();
            s.hidden_out = more ? l.out.data() : nullptr;
            in.push_back(s);
            n_in.push_back(n);
        }
        tf_.step(in, kv_.storage());
        ++stats_.steps;
        std::vector<Live> next;
        for (size_t j = 0; j < live.size(); ++j) {
            Live& l = live[j];
            SeqMtp& m = *l.m;
            const int64_t n = n_in[j];
            l.pos += n;
            m.table.n_tokens = std::max(m.table.n_tokens, l.pos);
            stats_.rows += n;
            if (!l.chain) {
                m.rows = l.pos;  // real hidden states and final tokens: these rows stay
                m.hidden.erase(m.hidden.begin(), m.hidden.lower_bound(m.rows - 1));
            }
            l.tokens.erase(l.tokens.begin(), l.tokens.begin() + n);
            l.hidden.erase(l.hidden.begin(), l.hidden.begin() + n * d);
            if (!l.tokens.empty()) {
                next.push_back(std::move(l));
                continue;
            }
            if (l.r->k <= 0) continue;
            int32_t t = 0;
            if (!m.sampler) {
                t = Sampler::argmax(l.logits);
            } else {
                const auto& q = m.sampler->distribution(l.logits, l.history,
                                                        static_cast<size_t>(l.r->n_prompt));
                l.r->q.emplace_back(q.begin(), q.end());
                std::mt19937_64 draw_rng(static_cast<uint64_t>(l.pos) * 0x9e3779b97f4a7c15ULL ^
                                         l.r->sampling->seed);
                t = draw(Dist(l.r->q.back()), draw_rng);
            }
            l.r->draft.push_back(t);
            l.history.push_back(t);
            if (static_cast<int32_t>(l.r->draft.size()) < l.r->k) {
                // Chain: the draft and this row's block output make the next row.
                l.chain = true;
                l.tokens.assign(1, t);
                l.hidden.assign(l.out.end() - d, l.out.end());
                next.push_back(std::move(l));
            }
        }
        live = std::move(next);
    }
}

}  // namespace warden::engine::speculative
