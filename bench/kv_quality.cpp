// Quality of every KV format against the bf16 KV cache on the same weights and text:
// mean KL(bf16 || format) of the next-token distribution and top-1 agreement, per position.
// Windows of text (--windows LENxCOUNT,...; default 2048x6,4096x1,512x10 = 20480 tokens) are
// scored at every position, reported over all positions and by position bucket (the last 512
// positions before 2k / 4k / 8k are the numbers at contexts of 2k / 4k / 8k). Windows of
// >= --probe-min tokens (2048) also carry retrieval probes: 3 (4 from 2 x probe-min on) facts
// "The secret code of NAME is NNNN." planted after 32 text tokens, and for each a question at
// an even fraction of the window ("...Answer: The secret code of NAME is NNNN."). A probe
// succeeds for a format when every answer token is the argmax at the position before it
// (teacher forcing; given the earlier answer tokens right this is exactly greedy decoding).
// Planted tokens are not scored for KL/top-1.
// All formats run in lockstep, chunk by chunk (chunks of 256 tokens as in `warden run`), each
// on its own paged cache; the reference is the bf16 cache. Prefill logits equal decode logits
// here (FreshKv::Self: each query reads only its own K/V at full precision, the rest from the
// stored format, independent of chunking), so these are the numbers decode would give, and
// position p of a long window has exactly the logits it would have as the last token of a
// (p+1)-token window. --retrieval T additionally runs the older generate-based check (T prompts
// per --retrieval-ctx length, 6 greedy tokens decoded one by one).
//
// --roundtrip: only the storage round-trip error of each format on Gaussian rows (no model).
//
// Build with -DWARDEN_BENCH=ON; run via bench/kv_quality.sh (makes the text from Python's
// bundled pydoc topics, no downloads):
//   build/bench_kv_quality -m MODEL --text FILE [--windows 2048x6,4096x1,512x10] [--skip 0]
//                          [--probe-min 2048] [--retrieval 0] [--retrieval-ctx 1024,2048,...]
//                          [--threads N] [--f32] [--weights FMT] [--formats
//                          bf16,fp8_e4m3:tensor,...]
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kv/kv_cache.h"
#include "model/model.h"
#include "model/transformer.h"
#include "tensor/weight_format.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/thread_pool.h"

using namespace warden;
using kernels::KvScales;
using tensor::KvType;

namespace {

struct Fmt {
    KvType type;
    KvScales scales;
    std::string name() const {
        std::string s = tensor::kv_type_name(type);
        if (tensor::kv_type_scaled(type))
            s += scales == KvScales::TokenHead ? " token-head" : " tensor";
        return s;
    }
};

// kFormats[0] is the reference.
std::vector<Fmt> g_formats = {
    {KvType::BF16, KvScales::TokenHead},     {KvType::F16, KvScales::TokenHead},
    {KvType::FP8_E4M3, KvScales::TokenHead}, {KvType::FP8_E4M3, KvScales::Tensor},
    {KvType::FP8_E5M2, KvScales::TokenHead}, {KvType::FP8_E5M2, KvScales::Tensor},
    {KvType::INT8, KvScales::TokenHead},
};

struct Acc {
    double kl = 0, kl_max = 0, agree = 0;
    int64_t n = 0;
    void add(double k, bool a) {
        kl += k;
        kl_max = std::max(kl_max, k);
        agree += a;
        ++n;
    }
    void merge(const Acc& o) {
        kl += o.kl;
        kl_max = std::max(kl_max, o.kl_max);
        agree += o.agree;
        n += o.n;
    }
    double mean_kl() const { return n ? kl / static_cast<double>(n) : 0; }
    double top1() const { return n ? agree / static_cast<double>(n) : 0; }
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct Runner {
    model::Transformer& tf;
    std::unique_ptr<kv::KvCache> cache;
    kv::PageTable table;
    std::vector<int32_t> ids;
    int64_t pos = 0;
    Runner(model::Transformer& t, const model::ModelConfig& c, const Fmt& f, int64_t max_tokens)
        : tf(t) {
        auto kc = kv::KvCacheConfig::shaped(c.n_layers, c.n_kv_heads, c.head_dim, f.type, 16);
        kc.scales = f.scales;
        kc.budget_bytes = kv::kv_budget_for_tokens(kc, max_tokens);
        cache = std::make_unique<kv::KvCache>(kc);
        util::check(cache->reserve(table, max_tokens), "bench: KV reserve failed");
        for (const auto& p : table.pages) ids.push_back(p.page.v);
    }
    // Runs toks at the current position; logits of every token (all) or of the last one.
    void run(const int32_t* toks, int64_t n, float* logits, bool all) {
        model::SeqInput in;
        in.tokens = std::span<const int32_t>(toks, static_cast<size_t>(n));
        in.pos0 = pos;
        in.page_ids = ids.data();
        in.logits = logits;
        in.all_logits = all;
        tf.step(std::span<const model::SeqInput>(&in, 1), cache->storage());
        pos += n;
    }
};

// One window of tokens through every format in lockstep; KL/top-1 of each position into
// acc[f][bucket] (bucket b holds positions [edges[b], edges[b+1])).
// KL(p || q) with p = softmax(a) (reference), q = softmax(b):
//   sum_i p_i (log p_i - log q_i) = H - sum_i p_i b_i + logsumexp(b),  H = sum_i p_i log p_i.
// Retrieval probes inside a window: answer token at position `pos` must be the argmax of the
// logits at pos - 1 (teacher forcing: with every earlier answer token right, this is exactly
// what greedy decoding would emit). hit[f] per probe: every answer token matched.
struct Probe {
    std::vector<int64_t> pos;  // positions of the answer tokens
    int64_t distance = 0;      // question end - fact start, tokens
    std::string slot;          // grouping label
    std::vector<int> hit;      // per format
};

void eval_window(model::Transformer& tf, const model::ModelConfig& c,
                 const std::vector<int32_t>& toks, const std::vector<char>& scored,
                 std::vector<Probe>& probes, const std::vector<int64_t>& edges,
                 std::vector<std::vector<Acc>>& acc, util::ThreadPool& pool) {
    const int64_t n = static_cast<int64_t>(toks.size()), V = c.vocab_size, chunk = 256;
    const size_t nf = g_formats.size();
    std::vector<std::unique_ptr<Runner>> rs;
    for (const Fmt& f : g_formats) rs.push_back(std::make_unique<Runner>(tf, c, f, n));
    std::vector<std::vector<float>> lg(nf, std::vector<float>(static_cast<size_t>(chunk * V)));
    // argmax per format at the positions right before an answer token
    std::vector<int64_t> want;  // positions whose argmax is checked
    for (auto& pr : probes) {
        pr.hit.assign(nf, 1);
        for (int64_t q : pr.pos) want.push_back(q - 1);
    }
    std::vector<std::vector<int64_t>> arg(nf, std::vector<int64_t>(static_cast<size_t>(n), -1));
    for (int64_t off = 0; off < n; off += chunk) {
        const int64_t m = std::min(chunk, n - off);
        for (size_t f = 0; f < nf; ++f) rs[f]->run(toks.data() + off, m, lg[f].data(), true);
        // Score the chunk's positions in parallel (each thread its own partial sums).
        std::vector<std::vector<std::vector<Acc>>> part(
            static_cast<size_t>(pool.size()),
            std::vector<std::vector<Acc>>(nf, std::vector<Acc>(acc[0].size())));
        pool.run([&](int ti, int nt) {
            std::vector<double> p(static_cast<size_t>(V));
            for (int64_t t = ti; t < m; t += nt) {
                const int64_t pidx = off + t;
                if (std::find(want.begin(), want.end(), pidx) != want.end())
                    for (size_t f = 0; f < nf; ++f) {
                        const float* x = lg[f].data() + t * V;
                        arg[f][static_cast<size_t>(pidx)] = std::max_element(x, x + V) - x;
                    }
                if (!scored[static_cast<size_t>(pidx)]) continue;
                size_t bk = 0;
                while (bk + 1 < edges.size() && pidx >= edges[bk + 1]) ++bk;
                const float* a = lg[0].data() + t * V;
                double mx = -1e300;
                for (int64_t i = 0; i < V; ++i) mx = std::max(mx, static_cast<double>(a[i]));
                double s = 0;
                for (int64_t i = 0; i < V; ++i)
                    s += (p[static_cast<size_t>(i)] = std::exp(static_cast<double>(a[i]) - mx));
                const double la = mx + std::log(s);
                double h = 0;
                for (int64_t i = 0; i < V; ++i) {
                    p[static_cast<size_t>(i)] /= s;
                    h += p[static_cast<size_t>(i)] * (static_cast<double>(a[i]) - la);
                }
                const int64_t top_a = std::max_element(a, a + V) - a;
                for (size_t f = 1; f < nf; ++f) {
                    const float* b = lg[f].data() + t * V;
                    double mb = -1e300;
                    for (int64_t i = 0; i < V; ++i) mb = std::max(mb, static_cast<double>(b[i]));
                    double sb = 0, dot = 0;
                    for (int64_t i = 0; i < V; ++i) {
                        sb += std::exp(static_cast<double>(b[i]) - mb);
                        dot += p[static_cast<size_t>(i)] * static_cast<double>(b[i]);
                    }
                    const double kl = h - dot + mb + std::log(sb);
                    const bool same = std::max_element(b, b + V) - b == top_a;
                    part[static_cast<size_t>(ti)][f][bk].add(std::max(0.0, kl), same);
                }
            }
        });
        for (const auto& pt : part)
            for (size_t f = 0; f < nf; ++f)
                for (size_t b = 0; b < pt[f].size(); ++b) acc[f][b].merge(pt[f][b]);
    }
    for (auto& pr : probes)
        for (size_t f = 0; f < nf; ++f)
            for (int64_t q : pr.pos)
                pr.hit[f] &= arg[f][static_cast<size_t>(q - 1)] == toks[static_cast<size_t>(q)];
}

// Storage round trip of every format on Gaussian rows (no model): relative RMS error of
// read_kv_row(write_kv(x)) for rows of N(0, sigma^2), head dim 64, 1024 rows per sigma.
void roundtrip_report() {
    std::printf(
        "### Round trip write_kv -> read_kv_row, N(0, sigma^2) rows of 64: relative RMS error\n\n"
        "| KV format | scales | sigma 0.05 | sigma 1 | sigma 20 |\n|---|---|---|---|---|\n");
    const int64_t n = 1024, d = 64;
    for (const Fmt& f : g_formats) {
        std::printf("| %s | %s |", tensor::kv_type_name(f.type),
                    tensor::kv_type_scaled(f.type) ? kernels::kv_scales_name(f.scales) : "-");
        for (float sigma : {0.05f, 1.0f, 20.0f}) {
            auto kc = kv::KvCacheConfig::shaped(1, 1, d, f.type, 16);
            kc.scales = f.scales;
            kc.budget_bytes = kv::kv_budget_for_tokens(kc, n);
            kv::KvCache cache(kc);
            kv::PageTable table;
            util::check(cache.reserve(table, n), "bench: KV reserve failed");
            std::vector<int32_t> ids;
            for (const auto& p : table.pages) ids.push_back(p.page.v);
            std::mt19937 rng(1);
            std::normal_distribution<float> nd(0.0f, sigma);
            std::vector<float> k(static_cast<size_t>(n * d)), v(static_cast<size_t>(n * d)),
                out(static_cast<size_t>(d));
            for (auto& x : k) x = nd(rng);
            for (auto& x : v) x = nd(rng);
            const auto layer = cache.storage().layer(0);
            kernels::write_kv(layer, ids.data(), 0, n, k.data(), v.data());
            double e2 = 0, x2 = 0;
            for (int64_t p = 0; p < n; ++p) {
                kernels::read_kv_row(layer, ids.data(), p, 0, false, out.data());
                for (int64_t i = 0; i < d; ++i) {
                    const double x = k[static_cast<size_t>(p * d + i)],
                                 e = out[static_cast<size_t>(i)] - x;
                    e2 += e * e;
                    x2 += x * x;
                }
            }
            std::printf(" %.2e |", std::sqrt(e2 / x2));
        }
        std::printf("\n");
    }
}

std::vector<int64_t> parse_list(const std::string& s) {
    std::vector<int64_t> out;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ','))
        if (!item.empty()) out.push_back(std::stoll(item));
    return out;
}

}  // namespace

int run_main(int argc, char** argv) {
    std::string model_path, text_path;
    int64_t skip = 0, retrieval = 0, probe_min = 2048;
    std::string window_spec = "2048x6,4096x1,512x10";
    std::vector<int64_t> retrieval_ctx = {1024, 2048, 4096, 6144};
    int threads = 0;
    bool with_f32 = false, roundtrip = false;
    std::string weights;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto next = [&] { return std::string(i + 1 < argc ? argv[++i] : ""); };
        if (a == "-m")
            model_path = next();
        else if (a == "--text")
            text_path = next();
        else if (a == "--windows")
            window_spec = next();
        else if (a == "--skip")
            skip = std::stoll(next());
        else if (a == "--probe-min")
            probe_min = std::stoll(next());
        else if (a == "--retrieval")
            retrieval = std::stoll(next());
        else if (a == "--retrieval-ctx")
            retrieval_ctx = parse_list(next());
        else if (a == "--threads")
            threads = std::stoi(next());
        else if (a == "--f32")
            with_f32 = true;
        else if (a == "--roundtrip")
            roundtrip = true;
        else if (a == "--weights")
            weights = next();
        else if (a == "--formats") {
            // e.g. bf16,fp8_e4m3,fp8_e4m3:tensor,int8 (the first is the reference)
            g_formats.clear();
            std::stringstream fs(next());
            std::string item;
            while (std::getline(fs, item, ',')) {
                const size_t colon = item.find(':');
                const auto t = tensor::parse_kv_type(item.substr(0, colon));
                if (!t) {
                    std::fprintf(stderr, "bad --formats entry %s\n", item.c_str());
                    return 2;
                }
                const bool tensor =
                    colon != std::string::npos && item.substr(colon + 1) == "tensor";
                g_formats.push_back({*t, tensor ? KvScales::Tensor : KvScales::TokenHead});
            }
            if (g_formats.size() < 2) {
                std::fprintf(stderr, "--formats needs the reference and at least one more\n");
                return 2;
            }
        } else {
            std::fprintf(stderr,
                         "usage: %s -m MODEL --text FILE [--windows LENxN,...] [--skip TOKENS] "
                         "[--probe-min W] [--retrieval T] "
                         "[--retrieval-ctx C1,C2,...] [--threads N] [--f32] [--weights FMT] "
                         "[--formats bf16,fp8_e4m3,fp8_e4m3:tensor,...] [--roundtrip]\n",
                         argv[0]);
            return 2;
        }
    }
    if (with_f32) g_formats.push_back({KvType::F32, KvScales::TokenHead});
    if (roundtrip) {  // storage only, no model: prints and exits
        try {
            roundtrip_report();
        } catch (const std::exception& e) {
            std::fprintf(stderr, "error: %s\n", e.what());
            return 1;
        }
        return 0;
    }
    try {
        const auto t0 = std::chrono::steady_clock::now();
        util::ThreadPool pool(threads);
        model::LoadOptions lo;
        lo.native_weights = false;  // bf16 weights unless --weights, as the documented runs used
        if (!weights.empty()) lo.weights = tensor::parse_weight_format(weights);
        auto model = model::load_model(model_path, lo, pool);
        const auto& c = model->config;
        util::check(model->tokenizer != nullptr, "bench: the model has no tokenizer");
        model::Transformer tf(*model, pool);
        std::ifstream in(text_path);
        util::check(static_cast<bool>(in), "bench: cannot read --text " + text_path);
        std::stringstream ss;
        ss << in.rdbuf();
        const std::string text = ss.str();
        const auto all = model->tokenizer->encode(text, false);
        std::printf(
            "model %s: %lld layers, %lld kv heads, head dim %lld, vocab %lld; text %zu bytes = %zu "
            "tokens; "
            "%d threads\n",
            model_path.c_str(), static_cast<long long>(c.n_layers),
            static_cast<long long>(c.n_kv_heads), static_cast<long long>(c.head_dim),
            static_cast<long long>(c.vocab_size), text.size(), all.size(), pool.size());
        std::fflush(stdout);
        const size_t nf = g_formats.size();

        // 1. Windows (spec "LENxCOUNT,..."), every position scored, by position bucket; windows of
        // >= 2048 tokens carry planted-fact retrieval probes (their tokens are not scored).
        std::vector<std::pair<int64_t, int64_t>> wins;  // (length, count)
        {
            std::stringstream ws(window_spec);
            std::string item;
            while (std::getline(ws, item, ',')) {
                if (item.empty()) continue;
                const size_t x = item.find('x');
                wins.emplace_back(std::stoll(item.substr(0, x)),
                                  x == std::string::npos ? 1 : std::stoll(item.substr(x + 1)));
                util::check(wins.back().first >= 64 && wins.back().second >= 0,
                            "bench: bad --windows " + window_spec);
            }
        }
        if (!wins.empty()) {
            static const char* kNames[] = {"Alice", "Boris", "Carmen", "Dmitri", "Elena",
                                           "Farid", "Greta", "Hiro",   "Ingrid", "Jamal",
                                           "Katya", "Luis",  "Mira",   "Nils",   "Olga",
                                           "Pavel", "Quinn", "Rosa",   "Sven",   "Tariq"};
            int64_t max_w = 0;
            for (auto& w : wins) max_w = std::max(max_w, w.first);
            std::vector<int64_t> edges = {0};
            for (int64_t e : {512LL, 1536LL, 2048LL, 3584LL, 4096LL, 7680LL, 8192LL, 16384LL})
                if (e < max_w) edges.push_back(e);
            edges.push_back(max_w);
            const size_t nb = edges.size() - 1;
            std::vector<std::vector<Acc>> acc(nf, std::vector<Acc>(nb));
            std::vector<Probe> done;  // all probes, with results
            const auto tq = std::chrono::steady_clock::now();
            int64_t cursor = skip, n_tok = 0, n_win = 0, probe_id = 0;
            int64_t total_win = 0;
            for (auto& w : wins) total_win += w.second;
            auto report = [&]() {
                const double tq_s = seconds_since(tq);
                int64_t n_scored = 0;
                for (const auto& a : acc[1]) n_scored += a.n;
                std::printf(
                    "\n### All %lld scored positions (windows %s = %lld tokens from text token "
                    "%lld on, "
                    "planted probe tokens not scored), vs bf16 KV\n\n",
                    static_cast<long long>(n_scored), window_spec.c_str(),
                    static_cast<long long>(n_tok), static_cast<long long>(skip));
                std::printf(
                    "| KV format | scales | mean KL (nats) | max KL | top-1 agreement "
                    "|\n|---|---|---|---|---|\n");
                for (size_t f = 1; f < nf; ++f) {
                    Acc t;
                    for (const auto& a : acc[f]) t.merge(a);
                    const bool sc = tensor::kv_type_scaled(g_formats[f].type);
                    std::printf("| %s | %s | %.2e | %.2e | %.4f |\n",
                                tensor::kv_type_name(g_formats[f].type),
                                sc ? kernels::kv_scales_name(g_formats[f].scales) : "-",
                                t.mean_kl(), t.kl_max, t.top1());
                }
                std::printf(
                    "\n### By position p (context length p + 1): mean KL / top-1 agreement "
                    "(positions scored)\n\n"
                    "| KV format | scales |");
                for (size_t b = 0; b < nb; ++b)
                    std::printf(" %lld-%lld (%lld) |", static_cast<long long>(edges[b]),
                                static_cast<long long>(edges[b + 1]),
                                static_cast<long long>(acc[1][b].n));
                std::printf("\n|---|---|");
                for (size_t b = 0; b < nb; ++b) std::printf("---|");
                std::printf("\n");
                for (size_t f = 1; f < nf; ++f) {
                    const bool sc = tensor::kv_type_scaled(g_formats[f].type);
                    std::printf("| %s | %s |", tensor::kv_type_name(g_formats[f].type),
                                sc ? kernels::kv_scales_name(g_formats[f].scales) : "-");
                    for (size_t b = 0; b < nb; ++b)
                        std::printf(" %.2e / %.4f |", acc[f][b].mean_kl(), acc[f][b].top1());
                    std::printf("\n");
                }
                if (!done.empty()) {
                    std::vector<std::string> slots;
                    for (auto& pr : done)
                        if (std::find(slots.begin(), slots.end(), pr.slot) == slots.end())
                            slots.push_back(pr.slot);
                    std::printf(
                        "\n### Retrieval probes: codes found exactly (greedy = argmax at every "
                        "answer token) / probes\n\n"
                        "| probe slot | mean distance fact -> question (tokens) |");
                    for (size_t f = 0; f < nf; ++f)
                        std::printf(" %s |", g_formats[f].name().c_str());
                    std::printf("\n|---|---|");
                    for (size_t f = 0; f < nf; ++f) std::printf("---|");
                    std::printf("\n");
                    std::vector<int> tot(nf, 0);
                    for (const auto& sl : slots) {
                        std::vector<int> hit(nf, 0);
                        int64_t cnt = 0, dist = 0;
                        for (auto& pr : done)
                            if (pr.slot == sl) {
                                ++cnt;
                                dist += pr.distance;
                                for (size_t f = 0; f < nf; ++f) hit[f] += pr.hit[f];
                            }
                        std::printf("| %s | %lld |", sl.c_str(),
                                    static_cast<long long>(dist / cnt));
                        for (size_t f = 0; f < nf; ++f) {
                            std::printf(" %d/%lld |", hit[f], static_cast<long long>(cnt));
                            tot[f] += hit[f];
                        }
                        std::printf("\n");
                    }
                    std::printf("| all | |");
                    for (size_t f = 0; f < nf; ++f) std::printf(" %d/%zu |", tot[f], done.size());
                    std::printf("\n");
                }
                std::printf("\nquality part: %.0f s (%lld tokens x %zu formats)\n", tq_s,
                            static_cast<long long>(n_tok), nf);
                std::fflush(stdout);
            };
            for (auto& w : wins) {
                for (int64_t wi = 0; wi < w.second; ++wi) {
                    const int64_t W = w.first;
                    const int np = W >= 2 * probe_min ? 4 : W >= probe_min ? 3 : 0;
                    std::vector<int32_t> toks;
                    std::vector<char> scored;
                    std::vector<Probe> probes;
                    auto add_text = [&](int64_t upto) {
                        util::check(cursor + (upto - static_cast<int64_t>(toks.size())) <=
                                        static_cast<int64_t>(all.size()),
                                    "bench: text too short for --windows " + window_spec);
                        while (static_cast<int64_t>(toks.size()) < upto) {
                            toks.push_back(all[static_cast<size_t>(cursor++)]);
                            scored.push_back(1);
                        }
                    };
                    auto planted = [&](const std::vector<int32_t>& t) {
                        for (int32_t id : t) {
                            toks.push_back(id);
                            scored.push_back(0);
                        }
                    };
                    std::vector<std::string> names;
                    std::vector<int> codes;
                    if (np > 0) {
                        add_text(32);
                        std::string facts;
                        for (int k = 0; k < np; ++k) {
                            names.push_back(kNames[(probe_id + k) % 20]);
                            codes.push_back(
                                1000 + static_cast<int>(((probe_id + k) * 7919 + 1237) % 9000));
                            facts += " The secret code of " + names.back() + " is " +
                                     std::to_string(codes.back()) + ".";
                        }
                        planted(model->tokenizer->encode(facts + "\n\n", false));
                    }
                    const int64_t fact_end = static_cast<int64_t>(toks.size());
                    for (int k = 0; k < np; ++k) {
                        const auto q = model->tokenizer->encode(
                            "\n\nQuestion: What is the secret code of " +
                                names[static_cast<size_t>(k)] + "?\nAnswer: The secret code of " +
                                names[static_cast<size_t>(k)] + " is",
                            false);
                        const auto a = model->tokenizer->encode(
                            std::string(" ")
                                .append(std::to_string(codes[static_cast<size_t>(k)]))
                                .append("."),
                            false);
                        const auto e = model->tokenizer->encode("\n\n", false);
                        const int64_t len = static_cast<int64_t>(q.size() + a.size() + e.size());
                        const int64_t end = W * (k + 1) / np -
                                            8;  // last probe ends 8 tokens before the window's end
                        add_text(end - len);
                        planted(q);
                        Probe pr;
                        pr.distance = static_cast<int64_t>(toks.size()) - 32;
                        for (size_t j = 0; j < a.size(); ++j)
                            pr.pos.push_back(static_cast<int64_t>(toks.size() + j));
                        planted(a);
                        planted(e);
                        pr.slot = std::to_string(W) + "-token window, question " +
                                  std::to_string(k + 1) + "/" + std::to_string(np);
                        probes.push_back(pr);
                    }
                    (void)fact_end;
                    add_text(W);
                    probe_id += np;
                    eval_window(tf, c, toks, scored, probes, edges, acc, pool);
                    for (auto& pr : probes) done.push_back(pr);
                    n_tok += W;
                    ++n_win;
                    std::string hits;
                    for (auto& pr : probes) {
                        hits += " [";
                        for (size_t f = 0; f < nf; ++f) hits += pr.hit[f] ? '1' : '0';
                        hits += "]";
                    }
                    std::fprintf(
                        stderr,
                        "window %lld/%lld (%lld tokens) done at %.0f s; probes bf16..int8:%s\n",
                        static_cast<long long>(n_win), static_cast<long long>(total_win),
                        static_cast<long long>(W), seconds_since(t0), hits.c_str());
                }
                std::printf("\n## after windows up to %lldx%lld\n", static_cast<long long>(w.first),
                            static_cast<long long>(w.second));
                report();
            }
        }

        // 2. Retrieval: "The secret code of NAME is NNNN." planted near the start of a prompt of
        // filler text, asked for at the end; greedy decode; success = the code's digits.
        if (retrieval > 0 && !retrieval_ctx.empty()) {
            static const char* kNames[] = {"Alice", "Boris", "Carmen", "Dmitri", "Elena",
                                           "Farid", "Greta", "Hiro",   "Ingrid", "Jamal",
                                           "Katya", "Luis",  "Mira",   "Nils",   "Olga",
                                           "Pavel", "Quinn", "Rosa",   "Sven",   "Tariq"};
            const int64_t V = c.vocab_size;
            std::vector<float> logits(static_cast<size_t>(V));
            std::vector<std::vector<int>> ok(retrieval_ctx.size(), std::vector<int>(nf, 0));
            std::vector<int> agree_bf16(nf, 0), total(nf, 0);
            const auto tr = std::chrono::steady_clock::now();
            for (size_t ci = 0; ci < retrieval_ctx.size(); ++ci) {
                const int64_t ctx = retrieval_ctx[ci];
                for (int64_t trial = 0; trial < retrieval; ++trial) {
                    const std::string name = kNames[trial % 20];
                    const int code =
                        1000 + static_cast<int>((trial * 7919 + ctx * 31 + 1237) % 9000);
                    const std::string fact =
                        " The secret code of " + name + " is " + std::to_string(code) + ".\n\n";
                    const std::string question = "\n\nQuestion: What is the secret code of " +
                                                 name + "?\nAnswer: The secret code of " + name +
                                                 " is";
                    auto fact_t = model->tokenizer->encode(fact, false);
                    auto tail = model->tokenizer->encode(question, false);
                    const int64_t lead = 64;  // filler tokens before the fact
                    const int64_t fill =
                        ctx - lead - static_cast<int64_t>(fact_t.size() + tail.size());
                    util::check(fill > 0, "bench: retrieval context too short");
                    // Filler from the second half of the text (the quality windows use the start).
                    const int64_t span = static_cast<int64_t>(all.size()) / 2 - lead - fill;
                    util::check(span > 0, "bench: text too short for retrieval");
                    const int64_t start =
                        static_cast<int64_t>(all.size()) / 2 + (trial * 7727 + ctx) % span;
                    std::vector<int32_t> prompt(all.begin() + start, all.begin() + start + lead);
                    prompt.insert(prompt.end(), fact_t.begin(), fact_t.end());
                    prompt.insert(prompt.end(), all.begin() + start + lead,
                                  all.begin() + start + lead + fill);
                    prompt.insert(prompt.end(), tail.begin(), tail.end());
                    std::string ref_ans;
                    for (size_t f = 0; f < nf; ++f) {
                        Runner r(tf, c, g_formats[f], static_cast<int64_t>(prompt.size()) + 8);
                        for (size_t off = 0; off < prompt.size(); off += 256) {
                            const int64_t m =
                                std::min<int64_t>(256, static_cast<int64_t>(prompt.size() - off));
                            r.run(prompt.data() + off, m, logits.data(), false);
                        }
                        std::vector<int32_t> out;
                        for (int s = 0; s < 6; ++s) {
                            const int32_t nx = static_cast<int32_t>(
                                std::max_element(logits.begin(), logits.end()) - logits.begin());
                            out.push_back(nx);
                            if (s + 1 < 6) r.run(&out.back(), 1, logits.data(), false);
                        }
                        std::string ans = model->tokenizer->decode(out);
                        const size_t nl = ans.find('\n');
                        if (nl != std::string::npos) ans.resize(nl);
                        // Exact: the answer's first number is the code.
                        size_t d = ans.find_first_of("0123456789");
                        std::string num;
                        while (d < ans.size() && std::isdigit(static_cast<unsigned char>(ans[d])))
                            num += ans[d++];
                        ok[ci][f] += num == std::to_string(code);
                        if (f == 0) ref_ans = ans;
                        agree_bf16[f] += ans == ref_ans;
                        ++total[f];
                        std::fprintf(stderr, "retrieval ctx %lld trial %lld %s: '%s' (want %d)\n",
                                     static_cast<long long>(prompt.size()),
                                     static_cast<long long>(trial), g_formats[f].name().c_str(),
                                     ans.c_str(), code);
                    }
                }
                std::fprintf(stderr, "retrieval ctx %lld done at %.0f s\n",
                             static_cast<long long>(ctx), seconds_since(t0));
            }
            std::printf(
                "\n### Retrieval: fact planted after 64 filler tokens, asked at the end, greedy 6 "
                "tokens; "
                "exact code found / %lld trials per context\n\n| KV format | scales |",
                static_cast<long long>(retrieval));
            for (int64_t ctx : retrieval_ctx)
                std::printf(" ctx %lld |", static_cast<long long>(ctx));
            std::printf(" same answer as bf16 |\n|---|---|");
            for (size_t ci = 0; ci <= retrieval_ctx.size(); ++ci) std::printf("---|");
            std::printf("\n");
            for (size_t f = 0; f < nf; ++f) {
                const bool sc = tensor::kv_type_scaled(g_formats[f].type);
                std::printf("| %s | %s |", tensor::kv_type_name(g_formats[f].type),
                            sc ? kernels::kv_scales_name(g_formats[f].scales) : "-");
                for (size_t ci = 0; ci < retrieval_ctx.size(); ++ci)
                    std::printf(" %d/%lld |", ok[ci][f], static_cast<long long>(retrieval));
                std::printf(" %d/%d |\n", agree_bf16[f], total[f]);
            }
            std::printf("\nretrieval part: %.0f s\n", seconds_since(tr));
        }
        std::printf("\nwall time %.0f s\n", seconds_since(t0));
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
    return 0;
}

int main(int argc, char** argv) {
    try {
        return run_main(argc, argv);
    } catch (const std::exception& e) {  // bad numbers in arguments (std::stoll) and the like
        std::fprintf(stderr, "error: %s\n", e.what());
        return 2;
    }
}
