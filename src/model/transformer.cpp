#include "model/transformer.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <utility>

#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "util/error.h"

namespace warden::model {

namespace {
// How much of the next matrix idle workers prefetch between matmuls. Most gaps end before a
// worker gets through this much (the next job interrupts it: 511 of 11392 hints finished in a
// 128-token int4 decode of a 1B-shaped model on 2 threads); 0.5, 1 and 2 MiB all sped up
// batch-1 int4 decode of a 1B-shaped model by a few percent, 2 MiB the most (prefetching at the
// join instead is under Tried and dropped in docs/WEIGHT_QUANT.md). Within a shared L3.
constexpr int64_t kPrefetchAheadBytes = int64_t{2} << 20;
}  // namespace

Transformer::Transformer(const Model& model, util::ThreadPool& pool) : model_(model), pool_(pool) {}

void Transformer::ensure_scratch(int64_t n) {
    if (n <= scratch_n_) return;
    const ModelConfig& c = model_.config;
    const auto N = static_cast<size_t>(n);
    x_.resize(N * c.d_model);
    xb_.resize(N * c.d_model);
    q_.resize(N * c.n_heads * c.head_dim);
    k_.resize(N * c.n_kv_heads * c.head_dim);
    v_.resize(N * c.n_kv_heads * c.head_dim);
    att_.resize(N * c.n_heads * c.head_dim);
    proj_.resize(N * c.d_model);
    gate_.resize(N * c.d_ff);
    up_.resize(N * c.d_ff);
    pos_.resize(N);
    scratch_n_ = n;
}

void Transformer::rope_tables(std::span<const int64_t> positions) {
    const ModelConfig& c = model_.config;
    const int64_t half = c.rope_dim / 2;
    rope_cs_.resize(positions.size() * static_cast<size_t>(2 * half));
    for (size_t t = 0; t < positions.size(); ++t) {
        const double pos = static_cast<double>(positions[t]) / c.rope_linear_factor;
        float* cs = rope_cs_.data() + t * static_cast<size_t>(2 * half);
        for (int64_t i = 0; i < half; ++i) {
            const double a = pos * static_cast<double>(c.rope_inv_freq[static_cast<size_t>(i)]);
            // rope_attn_factor: YaRN's magnitude correction (1 otherwise), as transformers
            // multiplies its cos/sin tables by attention_scaling.
            cs[2 * i] = static_cast<float>(std::cos(a) * c.rope_attn_factor);
            cs[2 * i + 1] = static_cast<float>(std::sin(a) * c.rope_attn_factor);
        }
    }
}

// Rotates the first rope_dim dims of every head of x ([n_rows, n_heads, head_dim]) with the
// tables of rope_tables().
void Transformer::rope(float* x, int64_t n_rows, int64_t n_heads) const {
    const ModelConfig& c = model_.config;
    const int64_t half = c.rope_dim / 2;
    for (int64_t t = 0; t < n_rows; ++t) {
        const float* cs = rope_cs_.data() + t * 2 * half;
        for (int64_t h = 0; h < n_heads; ++h) {
            float* v = x + (t * n_heads + h) * c.head_dim;
            for (int64_t i = 0; i < half; ++i) {
                const float co = cs[2 * i], si = cs[2 * i + 1];
                // NeoX pairs dim i with i + half; interleaved pairs 2i with 2i + 1.
                const int64_t a = c.rope_style == RopeStyle::NeoX ? i : 2 * i;
                const int64_t b = c.rope_style == RopeStyle::NeoX ? i + half : 2 * i + 1;
                const float x0 = v[a], x1 = v[b];
                v[a] = x0 * co - x1 * si;
                v[b] = x0 * si + x1 * co;
            }
        }
    }
}

// An MTP layer's rows (model/mtp.h): x = eh_proj([enorm(e), hnorm(h)]) where e is the token's
// embedding (zero at position 0, as vLLM's DeepSeek MTP masks it) and h the row's hidden_in.
void Transformer::mtp_input(std::span<const SeqInput> seqs, std::span<const int64_t> row0) {
    const ModelConfig& c = model_.config;
    const MtpInputWeights& m = *model_.weights.mtp_in;
    const int64_t d = c.d_model, n = row0.back();
    eh_.resize(static_cast<size_t>(n * 2 * d));
    for (size_t i = 0; i < seqs.size(); ++i) {
        util::check(seqs[i].hidden_in != nullptr, "MTP layer: a sequence without hidden states");
        for (int64_t r = row0[i]; r < row0[i + 1]; ++r) {
            float* e = x_.data() + r * d;
            if (pos_[static_cast<size_t>(r)] == 0) std::fill(e, e + d, 0.0f);
            kernels::rmsnorm(e, m.enorm.data(), eh_.data() + r * 2 * d, d, c.rms_eps);
            kernels::rmsnorm(seqs[i].hidden_in + (r - row0[i]) * d, m.hnorm.data(),
                             eh_.data() + r * 2 * d + d, d, c.rms_eps);
        }
    }
    if (observer_) observer_->observe(m.eh_proj, eh_.data(), n);
    kernels::matmul(m.eh_proj.view(), eh_.data(), n, x_.data(), pool_);
}

std::vector<char> Transformer::step(std::span<const SeqInput> seqs,
                                    const kernels::PagedKvStorage& kv, const LayerCheck* check) {
    const ModelConfig& c = model_.config;
    const ModelWeights& w = model_.weights;
    const int64_t d = c.d_model, hd = c.head_dim, vocab = c.vocab_size;
    const int64_t kv_dim = c.n_kv_heads * hd, q_dim = c.n_heads * hd;
    std::vector<int64_t> row0(seqs.size() + 1, 0);  // sequence i owns rows [row0[i], row0[i+1])
    for (size_t i = 0; i < seqs.size(); ++i) {
        const auto& s = seqs[i];
        util::check(!s.tokens.empty(), "forward: a sequence with no tokens");
        for (int32_t id : s.tokens)
            util::check(id >= 0 && id < vocab, "token id " + std::to_string(id) +
                                                   " is outside the vocabulary (size " +
                                                   std::to_string(vocab) + ")");
        row0[i + 1] = row0[i] + static_cast<int64_t>(s.tokens.size());
    }
    const int64_t n = row0.back();
    std::vector<char> alive(seqs.size(), 1);
    if (n == 0) return alive;
    ensure_scratch(n);
    for (size_t i = 0; i < seqs.size(); ++i)
        for (int64_t t = 0; t < static_cast<int64_t>(seqs[i].tokens.size()); ++t) {
            pos_[static_cast<size_t>(row0[i] + t)] = seqs[i].pos0 + t;
            w.token_embd.row_f32(seqs[i].tokens[static_cast<size_t>(t)],
                                 x_.data() + (row0[i] + t) * d);
        }
    if (w.mtp_in) mtp_input(seqs, row0);
    rope_tables(std::span<const int64_t>(pos_.data(), static_cast<size_t>(n)));
    const float att_scale = c.attn_scale_factor / std::sqrt(static_cast<float>(hd));

    auto add_bias = [n](float* y, const std::vector<float>& b) {
        if (b.empty()) return;
        const auto m = static_cast<int64_t>(b.size());
        for (int64_t t = 0; t < n; ++t)
            for (int64_t i = 0; i < m; ++i) y[t * m + i] += b[static_cast<size_t>(i)];
    };
    auto head_norm = [&](float* y, int64_t n_heads, const std::vector<float>& g) {
        for (int64_t r = 0; r < n * n_heads; ++r)
            kernels::rmsnorm(y + r * hd, g.data(), y + r * hd, hd, c.rms_eps);
    };
    // Linear layer over all rows. With --prefill-weights a matrix carries a higher-precision
    // copy: rows of multi-token (prefill) sequences use it, single-token (decode) rows use the
    // runtime matrix. Rows are independent (batch invariance), so splitting the call into runs
    // of the same kind changes no result bit.
    auto mm_unobserved = [&](const Matrix& M, const float* xin, float* yout) {
        if (!M.prefill) {
            kernels::matmul(M.view(), xin, n, yout, pool_);
            return;
        }
        const int64_t in = M.cols(), out_dim = M.rows();
        size_t i = 0;
        while (i < seqs.size()) {
            auto is_pre = [&](size_t x) {
                return seqs[x].tokens.size() > 1 && !seqs[x].decode_rows;
            };
            const bool pre = is_pre(i);
            size_t j = i + 1;
            while (j < seqs.size() && is_pre(j) == pre) ++j;
            kernels::matmul(M.view_for(pre), xin + row0[i] * in, row0[j] - row0[i],
                            yout + row0[i] * out_dim, pool_);
            i = j;
        }
    };
    auto mm = [&](const Matrix& M, const float* xin, float* yout) {
        if (observer_) observer_->observe(M, xin, n);
        mm_unobserved(M, xin, yout);
    };
    // Matrices sharing the input xin (q/k/v, gate/up): one activation quantization and one
    // pool dispatch (kernels::matmul_multi; same result bits as separate mm calls).
    // A matrix with a --prefill-weights copy goes through mm (its rows are split by kind).
    auto mm_shared = [&](std::initializer_list<std::pair<const Matrix*, float*>> ms,
                         const float* xin) {
        std::array<kernels::MatmulOut, 3> o{};
        size_t k = 0;
        if (observer_)
            for (const auto& [M, yout] : ms) observer_->observe(*M, xin, n);
        for (const auto& [M, yout] : ms) {
            if (M->prefill) {
                for (const auto& [M2, y2] : ms) mm_unobserved(*M2, xin, y2);
                return;
            }
            o.at(k++) = {&M->view(), yout};
        }
        kernels::matmul_multi(std::span<const kernels::MatmulOut>(o.data(), k), xin, n, pool_);
    };
    // While this thread does the serial work between two pool jobs (norms, RoPE, KV writes; the
    // attention is itself a pool job), the pool's idle workers prefetch the start of the next
    // matrix (util::ThreadPool::prefetch_while_idle), so weight bytes keep streaming between
    // matmuls at decode. For a q/k/v or gate/up group that is its first matrix (q, gate). Dense
    // GQA layers only: MoE experts and MLA projections are not named here.
    auto prefetch_next = [&](const Matrix& M) {
        pool_.prefetch_while_idle(M.storage(),
                                  static_cast<size_t>(std::min(M.bytes(), kPrefetchAheadBytes)));
    };
    // The first matrix of layer l: its q projection, or the head after the last layer.
    auto prefetch_layer_start = [&](int64_t l) {
        if (l == c.n_layers)
            prefetch_next(w.output);
        else if (!w.layers[static_cast<size_t>(l)].mla)
            prefetch_next(w.layers[static_cast<size_t>(l)].wq);
    };
    std::vector<kernels::PagedAttentionSeq> att_seqs;
    att_seqs.reserve(seqs.size());
    std::vector<MlaSeq> mla_seqs;

    prefetch_layer_start(0);
    for (int64_t l = 0; l < c.n_layers; ++l) {
        const LayerWeights& L = w.layers[static_cast<size_t>(l)];
        for (int64_t t = 0; t < n; ++t)
            kernels::rmsnorm(x_.data() + t * d, L.attn_norm.data(), xb_.data() + t * d, d,
                             c.rms_eps);
        if (L.mla) {  // latent attention over the compressed cache (model/mla.h)
            mla_seqs.clear();
            for (size_t i = 0; i < seqs.size(); ++i) {
                if (alive[i] && check && !(*check)(i, l)) alive[i] = 0;
                mla_seqs.push_back({row0[i], row0[i + 1] - row0[i], seqs[i].pos0, seqs[i].page_ids,
                                    alive[i] != 0});
            }
            mla_.forward(c, *L.mla, xb_.data(), n, rope_cs_.data(), mla_seqs, kv.layer(l), kv.fresh,
                         proj_.data(), pool_);
        } else {  // GQA attention (the lines below keep their indentation)
            mm_shared({{&L.wq, q_.data()}, {&L.wk, k_.data()}, {&L.wv, v_.data()}}, xb_.data());
            prefetch_next(L.wo);
            add_bias(q_.data(), L.bq);
            add_bias(k_.data(), L.bk);
            add_bias(v_.data(), L.bv);
            if (c.qk_norm) {
                head_norm(q_.data(), c.n_heads, L.q_norm);
                head_norm(k_.data(), c.n_kv_heads, L.k_norm);
            }
            rope(q_.data(), n, c.n_heads);
            rope(k_.data(), n, c.n_kv_heads);

            // Every sequence still alive proves (in layer mode) that its pages are its own before
            // this layer writes or reads them.
            const kernels::PagedKvLayer layer = kv.layer(l);
            att_seqs.clear();
            for (size_t i = 0; i < seqs.size(); ++i) {
                if (alive[i] && check && !(*check)(i, l)) alive[i] = 0;
                const int64_t m = row0[i + 1] - row0[i];
                if (!alive[i]) {
                    std::fill(att_.begin() + row0[i] * q_dim, att_.begin() + row0[i + 1] * q_dim,
                              0.0f);
                    continue;
                }
                kernels::write_kv(layer, seqs[i].page_ids, seqs[i].pos0, m,
                                  k_.data() + row0[i] * kv_dim, v_.data() + row0[i] * kv_dim);
                // The step's own K/V at full precision where kv.fresh says so
                // (kernels/paged_attention.h).
                att_seqs.push_back({q_.data() + row0[i] * q_dim, att_.data() + row0[i] * q_dim, m,
                                    seqs[i].pos0, seqs[i].page_ids, k_.data() + row0[i] * kv_dim,
                                    v_.data() + row0[i] * kv_dim, kv.fresh});
            }
            kernels::paged_attention(att_seqs, c.n_heads, layer, att_scale, pool_);
            mm(L.wo, att_.data(), proj_.data());
            if (!L.moe) prefetch_next(L.w_gate);
        }  // GQA attention
        for (int64_t i = 0; i < n * d; ++i)
            x_[static_cast<size_t>(i)] += proj_[static_cast<size_t>(i)];

        for (int64_t t = 0; t < n; ++t)
            kernels::rmsnorm(x_.data() + t * d, L.ffn_norm.data(), xb_.data() + t * d, d,
                             c.rms_eps);
        if (L.moe) {
            moe_.forward(c, *L.moe, xb_.data(), n, proj_.data(), pool_);
        } else {
            mm_shared({{&L.w_gate, gate_.data()}, {&L.w_up, up_.data()}}, xb_.data());
            prefetch_next(L.w_down);
            kernels::silu_mul(gate_.data(), up_.data(), gate_.data(), n * c.d_ff);
            mm(L.w_down, gate_.data(), proj_.data());
            prefetch_layer_start(l + 1);
        }
        for (int64_t i = 0; i < n * d; ++i)
            x_[static_cast<size_t>(i)] += proj_[static_cast<size_t>(i)];
    }

    for (size_t i = 0; i < seqs.size(); ++i) {
        if (!alive[i] || !seqs[i].hidden_out) continue;
        for (int64_t r = row0[i]; r < row0[i + 1]; ++r) {
            float* out = seqs[i].hidden_out + (r - row0[i]) * d;
            if (w.mtp_in)
                std::memcpy(out, x_.data() + r * d, static_cast<size_t>(d) * sizeof(float));
            else
                kernels::rmsnorm(x_.data() + r * d, w.output_norm.data(), out, d, c.rms_eps);
        }
    }

    // Logits only for the rows that need them: gather their normed states, one matmul.
    std::vector<int64_t> rows;
    for (size_t i = 0; i < seqs.size(); ++i) {
        if (!alive[i] || !seqs[i].logits) continue;
        for (int64_t r = seqs[i].all_logits ? row0[i] : row0[i + 1] - 1; r < row0[i + 1]; ++r)
            rows.push_back(r);
    }
    if (rows.empty()) return alive;
    const auto m = static_cast<int64_t>(rows.size());
    for (int64_t j = 0; j < m; ++j)
        kernels::rmsnorm(x_.data() + rows[static_cast<size_t>(j)] * d, w.output_norm.data(),
                         xb_.data() + j * d, d, c.rms_eps);
    std::vector<float> out(static_cast<size_t>(m * vocab));
    if (observer_) observer_->observe(w.output, xb_.data(), m);
    kernels::matmul(w.output.view(), xb_.data(), m, out.data(), pool_);
    int64_t j = 0;
    for (size_t i = 0; i < seqs.size(); ++i) {
        if (!alive[i] || !seqs[i].logits) continue;
        const int64_t cnt = seqs[i].all_logits ? row0[i + 1] - row0[i] : 1;
        std::memcpy(seqs[i].logits, out.data() + j * vocab,
                    static_cast<size_t>(cnt * vocab) * sizeof(float));
        j += cnt;
    }
    return alive;
}

void Transformer::forward(const int32_t* tokens, int64_t n, ContiguousKvCache& cache, float* logits,
                          bool all_logits) {
    util::check(n > 0, "forward: no tokens");
    util::check(cache.n_tokens() + n <= cache.capacity(),
                "sequence of " + std::to_string(cache.n_tokens() + n) +
                    " tokens exceeds the context of " + std::to_string(cache.capacity()));
    const int64_t vocab = model_.config.vocab_size;
    for (int64_t off = 0; off < n; off += kMaxChunk) {
        const int64_t m = std::min(kMaxChunk, n - off);
        const bool last = off + m == n;
        SeqInput in;
        in.tokens = std::span<const int32_t>(tokens + off, static_cast<size_t>(m));
        in.pos0 = cache.n_tokens();
        in.page_ids = cache.page_ids();
        in.logits = all_logits ? logits + off * vocab : (last ? logits : nullptr);
        in.all_logits = all_logits;
        step(std::span<const SeqInput>(&in, 1), cache.storage());
        cache.set_n_tokens(in.pos0 + m);
    }
}

}  // namespace warden::model
