// moe_bench: decode speed of mixture-of-experts models shaped like scaled-down GLM-4.5 (GQA +
// partial RoPE + sigmoid-routed MoE with a shared expert) and Kimi K2 (MLA over the compressed
// latent cache + the same MoE), random bf16 weights built in memory, at batch 1 and batch B.
//
// Roofline: decode is bandwidth-bound, so tokens/s <= read bandwidth / bytes read per token.
// Bytes per step = every non-expert weight (attention, router, shared expert, dense layers,
// lm_head, one embedding row per token) + the experts the step activates + the KV the step
// reads. Only ACTIVE experts count: top_k per MoE layer at batch 1; at batch B the expected
// number of distinct experts under uniform routing, E * (1 - (1 - k/E)^B) (random weights route
// close to uniformly). Bandwidth is measured in the same run (multi-threaded streaming read of a
// 512 MiB buffer, best of 5), interleaved with the decode rounds.
//
// Build: cmake -DWARDEN_BENCH=ON ...; ninja bench_moe_bench
// Run:   build/bench_moe_bench [--threads N] [--batch B] [--steps S] [--rounds R] [--ctx C]
//                              [--experts FORMAT] [--dense FORMAT] [--prefill P]
//        --experts: the routed experts' weight format (bf16 default; int4 = int4-g32 W4A8, any
//        --weights name);
//        --dense: every other matrix's (attention, shared expert, dense layer, head; bf16 default).
//        The router stays f32 and the embedding bf16 (one row read per token), as the loader keeps
//        them;
//        --prefill: also time a P-token prompt of one sequence, processed in one step (the prefill
//        of a new request; 256 default, 0 skips), once per round, before the decode runs; prints
//        its median tokens/s. Prefill is compute-bound (every expert a chunk routes to is read once
//        for all its tokens), so it has no roofline line.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "kv/kv_cache.h"
#include "model/mla.h"
#include "model/model.h"
#include "model/transformer.h"
#include "quant/quantizer.h"
#include "tensor/weight_format.h"
#include "util/error.h"

using namespace warden;
using Clock = std::chrono::steady_clock;

namespace {

uint64_t g_state = 0x9e3779b97f4a7c15ull;
float rnd() {  // xorshift, uniform in [-1, 1)
    g_state ^= g_state << 13;
    g_state ^= g_state >> 7;
    g_state ^= g_state << 17;
    return static_cast<float>(g_state >> 40) / static_cast<float>(1 << 23) - 1.0f;
}

// One row of a random matrix, scaled so that a row's dot with a unit-variance input is O(1).
void random_row(std::vector<float>& row) {
    const float s = 1.0f / std::sqrt(static_cast<float>(row.size()));
    for (auto& v : row) v = rnd() * s * 1.7f;
}

model::Matrix rand_matrix(int64_t rows, int64_t cols,
                          tensor::WeightType t = tensor::WeightType::BF16) {
    auto m = model::Matrix::owned(t, rows, cols);
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
        random_row(row);
        m.pack_row(r, row.data());
    }
    return m;
}

// A random matrix in a weight format (bf16 packing, or int4/int8/fp8 through the default
// quantizer, as the model loader does for --weights).
model::Matrix rand_matrix_as(int64_t rows, int64_t cols, const tensor::WeightFormat& f) {
    if (!f.quantized()) return rand_matrix(rows, cols, f.type);
    const kernels::WeightMatrix layout = kernels::weight_layout(f, rows, cols);
    auto m = model::Matrix::quantized(layout);
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
        random_row(row);
        m.pack_quant_row(r, quant::default_quantizer().quantize_row(layout, row.data(), nullptr));
    }
    return m;
}

std::vector<float> ones(int64_t n) {
    return std::vector<float>(static_cast<size_t>(n), 1.0f);
}

struct Built {
    std::unique_ptr<model::Model> model;
    int64_t dense_bytes = 0;   // read every step whatever the batch (excl. embedding rows)
    int64_t expert_bytes = 0;  // one routed expert
    int64_t n_moe_layers = 0;
};

Built build(bool kimi, const tensor::WeightFormat& experts, const tensor::WeightFormat& dense) {
    Built b;
    b.model = std::make_unique<model::Model>();
    model::Model& m = *b.model;
    model::ModelConfig& c = m.config;
    c.arch = kimi ? model::Arch::DeepseekV3 : model::Arch::Glm4Moe;
    c.arch_name = kimi ? "kimi-k2-mini" : "glm-4.5-mini";
    c.n_layers = 4;
    c.d_model = 1024;
    c.n_heads = 16;
    c.vocab_size = 16384;
    c.max_ctx = 8192;
    c.d_ff = 2816;
    c.rms_eps = 1e-5f;
    c.rope_theta = 10000.0f;
    if (kimi) {
        c.mla = {384, 128, 64, 64};  // q_lora, kv_lora, nope, v
        c.rope_dim = 32;
        c.head_dim = 96;
        c.n_kv_heads = 16;
        c.rope_style = model::RopeStyle::Interleaved;
    } else {
        c.n_kv_heads = 2;
        c.head_dim = 64;
        c.rope_dim = 32;
        c.qkv_bias = true;
    }
    c.rope_inv_freq = model::rope_inv_freq(c.rope_dim, c.rope_theta);
    auto& moe = c.moe;
    moe.n_experts = kimi ? 96 : 64;  // Kimi K2: 384 top-8; GLM-4.5: 160 top-8
    moe.top_k = 8;
    moe.d_expert = kimi ? 256 : 320;
    moe.n_shared = 1;
    moe.scoring = model::RouterScoring::Sigmoid;
    moe.score_bias = true;
    moe.norm_topk_prob = true;
    moe.routed_scaling = 2.5f;
    moe.sparse = {0, 1, 1, 1};
    c.validate();
    m.dtype = model::RuntimeDType::BF16;

    auto& w = m.weights;
    w.token_embd = rand_matrix(c.vocab_size, c.d_model);
    w.output = rand_matrix_as(c.vocab_size, c.d_model, dense);
    w.output_norm = ones(c.d_model);
    b.dense_bytes += w.output.bytes();
    w.layers.resize(static_cast<size_t>(c.n_layers));
    const int64_t d = c.d_model, H = c.n_heads;
    for (int64_t l = 0; l < c.n_layers; ++l) {
        auto& L = w.layers[static_cast<size_t>(l)];
        L.attn_norm = ones(d);
        L.ffn_norm = ones(d);
        if (kimi) {
            auto a = std::make_unique<model::MlaWeights>();
            const auto& g = c.mla;
            a->wq_a = rand_matrix_as(g.q_lora_rank, d, dense);
            a->q_a_norm = ones(g.q_lora_rank);
            a->wq_b = rand_matrix_as(H * c.head_dim, g.q_lora_rank, dense);
            a->wkv_a = rand_matrix_as(g.kv_lora_rank + c.rope_dim, d, dense);
            a->kv_a_norm = ones(g.kv_lora_rank);
            for (int64_t h = 0; h < H; ++h) {
                a->wk_b_t.push_back(rand_matrix_as(g.kv_lora_rank, g.nope_dim, dense));
                a->wv_b.push_back(rand_matrix_as(g.v_dim, g.kv_lora_rank, dense));
                b.dense_bytes += a->wk_b_t.back().bytes() + a->wv_b.back().bytes();
            }
            a->wo = rand_matrix_as(d, H * g.v_dim, dense);
            b.dense_bytes += a->wq_a.bytes() + a->wq_b.bytes() + a->wkv_a.bytes() + a->wo.bytes();
            L.mla = std::move(a);
        } else {
            L.wq = rand_matrix_as(H * c.head_dim, d, dense);
            L.wk = rand_matrix_as(c.n_kv_heads * c.head_dim, d, dense);
            L.wv = rand_matrix_as(c.n_kv_heads * c.head_dim, d, dense);
            L.wo = rand_matrix_as(d, H * c.head_dim, dense);
            L.bq = std::vector<float>(static_cast<size_t>(H * c.head_dim), 0.01f);
            L.bk = std::vector<float>(static_cast<size_t>(c.n_kv_heads * c.head_dim), 0.01f);
            L.bv = L.bk;
            b.dense_bytes += L.wq.bytes() + L.wk.bytes() + L.wv.bytes() + L.wo.bytes();
        }
        if (moe.is_moe_layer(l)) {
            auto e = std::make_unique<model::MoeWeights>();
            e->router = rand_matrix(moe.n_experts, d, tensor::WeightType::F32);
            for (int64_t i = 0; i < moe.n_experts; ++i)
                e->router_bias.push_back(0.01f * (rnd() + 1.0f));
            for (int64_t i = 0; i < moe.n_experts; ++i) {
                e->gate.push_back(rand_matrix_as(moe.d_expert, d, experts));
                e->up.push_back(rand_matrix_as(moe.d_expert, d, experts));
                e->down.push_back(rand_matrix_as(d, moe.d_expert, experts));
            }
            b.expert_bytes = e->gate[0].bytes() + e->up[0].bytes() + e->down[0].bytes();
            e->shared_gate = rand_matrix_as(moe.d_expert, d, dense);
            e->shared_up = rand_matrix_as(moe.d_expert, d, dense);
            e->shared_down = rand_matrix_as(d, moe.d_expert, dense);
            b.dense_bytes += e->router.bytes() + e->shared_gate.bytes() + e->shared_up.bytes() +
                             e->shared_down.bytes();
            L.moe = std::move(e);
            ++b.n_moe_layers;
        } else {
            L.w_gate = rand_matrix_as(c.d_ff, d, dense);
            L.w_up = rand_matrix_as(c.d_ff, d, dense);
            L.w_down = rand_matrix_as(d, c.d_ff, dense);
            b.dense_bytes += L.w_gate.bytes() + L.w_up.bytes() + L.w_down.bytes();
        }
    }
    return b;
}

// Streaming-read bandwidth over the pool's threads (GB/s, best of reps).
double read_bandwidth(int threads) {
    const size_t n = (size_t{512} << 20) / sizeof(uint64_t);
    std::vector<uint64_t> buf(n);
    for (size_t i = 0; i < n; ++i) buf[i] = i;
    double best = 0;
    for (int rep = 0; rep < 5; ++rep) {
        std::atomic<uint64_t> sink{0};
        const auto t0 = Clock::now();
        std::vector<std::thread> ts;
        for (int t = 0; t < threads; ++t)
            ts.emplace_back([&, t] {
                const size_t b0 = n * static_cast<size_t>(t) / static_cast<size_t>(threads);
                const size_t b1 = n * static_cast<size_t>(t + 1) / static_cast<size_t>(threads);
                uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
                for (size_t i = b0; i + 4 <= b1; i += 4) {
                    a0 += buf[i];
                    a1 += buf[i + 1];
                    a2 += buf[i + 2];
                    a3 += buf[i + 3];
                }
                sink += a0 + a1 + a2 + a3;
            });
        for (auto& th : ts) th.join();
        const double s = std::chrono::duration<double>(Clock::now() - t0).count();
        best = std::max(best, static_cast<double>(n * sizeof(uint64_t)) / s / 1e9);
        if (sink.load() == 42) std::printf(" ");
    }
    return best;
}

}  // namespace

int main(int argc, char** argv) {
    int threads = 0, batch = 32, steps = 8, rounds = 3, ctx = 64, prefill = 256;
    std::string experts_fmt = "bf16", dense_fmt = "bf16";
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        // A missing or malformed number reads as -1, which the range check below rejects.
        auto next = [&] {
            if (i + 1 >= argc) return -1;
            char* end = nullptr;
            const long v = std::strtol(argv[++i], &end, 10);
            return (*argv[i] == '\0' || *end != '\0' || v < 0 || v > (1 << 20))
                       ? -1
                       : static_cast<int>(v);
        };
        if (a == "--threads")
            threads = next();
        else if (a == "--batch")
            batch = next();
        else if (a == "--steps")
            steps = next();
        else if (a == "--rounds")
            rounds = next();
        else if (a == "--ctx")
            ctx = next();
        else if (a == "--prefill")
            prefill = next();
        else if (a == "--experts" && i + 1 < argc)
            experts_fmt = argv[++i];
        else if (a == "--dense" && i + 1 < argc)
            dense_fmt = argv[++i];
        else {
            std::fprintf(stderr,
                         "usage: %s [--threads N] [--batch B] [--steps S] [--rounds R] [--ctx C] "
                         "[--experts bf16|int4|int8|...] [--dense FORMAT] [--prefill P]\n",
                         argv[0]);
            return 2;
        }
    }
    if (threads < 0 || batch < 1 || steps < 1 || rounds < 1 || ctx < 1 || prefill < 0) {
        std::fprintf(stderr,
                     "%s: --threads and --prefill take a number >= 0, --batch, --steps, --rounds "
                     "and --ctx one >= 1\n",
                     argv[0]);
        return 2;
    }
    try {
        const tensor::WeightFormat experts = tensor::parse_weight_format(experts_fmt);
        const tensor::WeightFormat dense = tensor::parse_weight_format(dense_fmt);
        util::ThreadPool pool(threads);
        const int n_threads =
            threads > 0 ? threads
                        : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
        for (const bool kimi : {false, true}) {
            Built b = build(kimi, experts, dense);
            const model::ModelConfig& c = b.model->config;
            model::Transformer tf(*b.model, pool);
            const auto shape = c.kv_shape();
            auto kc = kv::KvCacheConfig::shaped(c.n_layers, shape.n_kv_heads, shape.head_dim,
                                                tensor::KvType::BF16, 16);
            kc.k_only = shape.k_only;
            kc.budget_bytes = kv::kv_budget_for_tokens(
                kc, std::max<int64_t>(static_cast<int64_t>(batch) * (ctx + steps * rounds * 2 + 16),
                                      prefill + 16));
            kv::KvCache cache(kc);
            const int64_t kv_tok = model::kv_bytes_per_token(c, 2);
            // The pages a reserved table holds, as the ids a SeqInput reads.
            const auto page_ids = [](const kv::PageTable& t) {
                std::vector<int32_t> v;
                for (const auto& p : t.pages) v.push_back(p.page.v);
                return v;
            };
            // One sequence's n-token random prompt from position 0, in one step; its seconds.
            const auto prompt_step = [&](const int32_t* ids, int64_t n) {
                std::vector<int32_t> prompt(static_cast<size_t>(n));
                for (auto& t : prompt)
                    t = static_cast<int32_t>((rnd() + 1.0f) * 0.5f *
                                             static_cast<float>(c.vocab_size - 1));
                model::SeqInput in;
                in.tokens = prompt;
                in.pos0 = 0;
                in.page_ids = ids;
                const auto t0 = Clock::now();
                tf.step(std::span<const model::SeqInput>(&in, 1), cache.storage());
                return std::chrono::duration<double>(Clock::now() - t0).count();
            };
            std::printf(
                "%s: %lld layers (%lld MoE: %lld experts, top-%lld, 1 shared), d %lld, %s; "
                "non-expert weights %.1f MB (%s), "
                "one expert %.2f MB (%s), KV %lld B/token (uncompressed %lld)\n",
                c.arch_name.c_str(), static_cast<long long>(c.n_layers),
                static_cast<long long>(b.n_moe_layers), static_cast<long long>(c.moe.n_experts),
                static_cast<long long>(c.moe.top_k), static_cast<long long>(c.d_model),
                c.mla.enabled() ? "MLA" : "GQA", static_cast<double>(b.dense_bytes) / 1e6,
                tensor::weight_format_name(dense).c_str(),
                static_cast<double>(b.expert_bytes) / 1e6,
                tensor::weight_format_name(experts).c_str(), static_cast<long long>(kv_tok),
                static_cast<long long>(model::kv_bytes_per_token_uncompressed(c, 2)));
            if (prefill > 0) {
                // One new request's prompt in one step, into pages freed after each round.
                std::vector<double> pps;
                for (int r = 0; r < rounds; ++r) {
                    kv::PageTable t;
                    util::check(cache.reserve(t, prefill), "KV budget too small for --prefill");
                    pps.push_back(prefill / prompt_step(page_ids(t).data(), prefill));
                    cache.free(t);
                }
                std::sort(pps.begin(), pps.end());
                std::printf("  prefill %d tokens: %.1f tok/s (median of %d rounds; best %.1f)\n",
                            prefill, pps[pps.size() / 2], rounds, pps.back());
            }
            for (const int B : {1, batch}) {
                // Sequences with ctx tokens of (random-token) prefill.
                std::vector<kv::PageTable> tables(static_cast<size_t>(B));
                std::vector<std::vector<int32_t>> ids(static_cast<size_t>(B));
                std::vector<int64_t> len(static_cast<size_t>(B), 0);
                const int64_t total = ctx + static_cast<int64_t>(steps) * rounds + 1;
                for (int s = 0; s < B; ++s) {
                    util::check(cache.reserve(tables[static_cast<size_t>(s)], total),
                                "KV budget too small");
                    ids[static_cast<size_t>(s)] = page_ids(tables[static_cast<size_t>(s)]);
                    prompt_step(ids[static_cast<size_t>(s)].data(), ctx);
                    len[static_cast<size_t>(s)] = ctx;
                }
                std::vector<float> logits(static_cast<size_t>(B * c.vocab_size));
                std::vector<int32_t> tok(static_cast<size_t>(B), 7);
                std::vector<double> tps;
                double bw_best = 0;
                for (int r = 0; r < rounds; ++r) {
                    bw_best =
                        std::max(bw_best, read_bandwidth(n_threads));  // interleaved with decode
                    const auto t0 = Clock::now();
                    for (int st = 0; st < steps; ++st) {
                        std::vector<model::SeqInput> in(static_cast<size_t>(B));
                        for (int s = 0; s < B; ++s) {
                            auto& x = in[static_cast<size_t>(s)];
                            x.tokens = std::span<const int32_t>(&tok[static_cast<size_t>(s)], 1);
                            x.pos0 = len[static_cast<size_t>(s)];
                            x.page_ids = ids[static_cast<size_t>(s)].data();
                            x.logits = logits.data() + s * c.vocab_size;
                        }
                        tf.step(in, cache.storage());
                        for (int s = 0; s < B; ++s) {
                            ++len[static_cast<size_t>(s)];
                            tok[static_cast<size_t>(s)] =
                                static_cast<int32_t>((st * 31 + s * 17) % c.vocab_size);
                        }
                    }
                    const double sec = std::chrono::duration<double>(Clock::now() - t0).count();
                    tps.push_back(static_cast<double>(steps) * B / sec);
                }
                std::sort(tps.begin(), tps.end());
                const double k = static_cast<double>(c.moe.top_k),
                             E = static_cast<double>(c.moe.n_experts);
                const double active = B == 1 ? k : E * (1.0 - std::pow(1.0 - k / E, B));
                const double step_bytes =
                    static_cast<double>(b.dense_bytes) +
                    static_cast<double>(b.n_moe_layers) * active *
                        static_cast<double>(b.expert_bytes) +
                    B * (static_cast<double>(c.d_model) * 2 +
                         static_cast<double>(kv_tok) * (ctx + steps * rounds / 2));
                const double roof = bw_best * 1e9 / step_bytes * B;
                const double med = tps[tps.size() / 2];
                std::printf(
                    "  batch %2d: %.1f tok/s (median of %d rounds x %d steps; best %.1f)  active "
                    "experts/layer %.1f, "
                    "%.1f MB/step, bandwidth %.1f GB/s -> roofline %.1f tok/s, %.0f%% of "
                    "roofline\n",
                    B, med, rounds, steps, tps.back(), active, step_bytes / 1e6, bw_best, roof,
                    100.0 * med / roof);
                for (auto& t : tables) cache.free(t);
            }
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
    return 0;
}
