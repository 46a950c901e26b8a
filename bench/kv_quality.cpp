// Quality of every KV format against the bf16 KV cache on the same weights and text:
// mean KL(bf16 || format) of the next-token distribution and top-1 agreement, per position,
// over windows of --window tokens (>= 20k tokens in total by default), plus one long window
// (--long tokens) reported by position bucket, plus a planted-fact retrieval check.
// All formats run in lockstep, chunk by chunk (chunks of 256 tokens as in `warden run`), each
// on its own paged cache; the reference is the bf16 cache. Prefill logits equal decode logits
// here (FreshKv::Self: each query reads only its own K/V at full precision), so these are the
// numbers decode would give.
//
// Build with -DWARDEN_BENCH=ON; run via bench/kv_quality.sh (makes the text from Python's
// bundled pydoc topics, no downloads):
//   build/bench_kv_quality -m MODEL --text FILE [--tokens 20480] [--window 2048] [--long 8192]
//                          [--retrieval 4] [--retrieval-ctx 1024] [--threads N]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "kv/kv_cache.h"
#include "model/model.h"
#include "model/transformer.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

using namespace warden;
using kernels::KvScales;
using kernels::KvType;

namespace {

struct Fmt {
    KvType type;
    KvScales scales;
    std::string name() const {
        std::string s = kernels::kv_type_name(type);
        if (kernels::kv_type_scaled(type)) s += scales == KvScales::TokenHead ? "/token-head" : "/tensor";
        return s;
    }
};

const std::vector<Fmt> kFormats = {
    {KvType::BF16, KvScales::TokenHead},     {KvType::F16, KvScales::TokenHead},
    {KvType::FP8_E4M3, KvScales::TokenHead}, {KvType::FP8_E4M3, KvScales::Tensor},
    {KvType::FP8_E5M2, KvScales::TokenHead}, {KvType::FP8_E5M2, KvScales::Tensor},
    {KvType::INT8, KvScales::TokenHead},
};

struct Acc {
    double kl = 0, agree = 0;
    int64_t n = 0;
    void add(double k, bool a) {
        kl += k;
        agree += a;
        ++n;
    }
    double mean_kl() const { return n ? kl / static_cast<double>(n) : 0; }
    double top1() const { return n ? agree / static_cast<double>(n) : 0; }
};

// log-softmax in double.
void log_softmax(const float* x, int64_t n, std::vector<double>& out) {
    out.resize(static_cast<size_t>(n));
    double mx = -1e300;
    for (int64_t i = 0; i < n; ++i) mx = std::max(mx, static_cast<double>(x[i]));
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += std::exp(static_cast<double>(x[i]) - mx);
    const double l = mx + std::log(s);
    for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = static_cast<double>(x[i]) - l;
}

struct Runner {
    model::Transformer& tf;
    const model::ModelConfig& c;
    std::unique_ptr<kv::KvCache> cache;
    kv::PageTable table;
    std::vector<int32_t> ids;
    int64_t pos = 0;
    Runner(model::Transformer& t, const model::ModelConfig& cfg, const Fmt& f, int64_t max_tokens) : tf(t), c(cfg) {
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

// One window of tokens through every format in lockstep; KL/top-1 per position into acc[f][bucket].
void eval_window(model::Transformer& tf, const model::ModelConfig& c, const std::vector<int32_t>& toks,
                 const std::vector<int64_t>& bucket_edges, std::vector<std::vector<Acc>>& acc) {
    const int64_t n = static_cast<int64_t>(toks.size()), V = c.vocab_size, chunk = 256;
    std::vector<std::unique_ptr<Runner>> rs;
    for (const Fmt& f : kFormats) rs.push_back(std::make_unique<Runner>(tf, c, f, n));
    std::vector<float> ref(static_cast<size_t>(chunk * V)), got(static_cast<size_t>(chunk * V));
    std::vector<double> lp, lq;
    for (int64_t off = 0; off < n; off += chunk) {
        const int64_t m = std::min(chunk, n - off);
        rs[0]->run(toks.data() + off, m, ref.data(), true);
        for (size_t f = 1; f < rs.size(); ++f) {
            rs[f]->run(toks.data() + off, m, got.data(), true);
            for (int64_t t = 0; t < m; ++t) {
                const float* a = ref.data() + t * V;
                const float* b = got.data() + t * V;
                log_softmax(a, V, lp);
                log_softmax(b, V, lq);
                double kl = 0;
                for (int64_t i = 0; i < V; ++i) kl += std::exp(lp[static_cast<size_t>(i)]) * (lp[static_cast<size_t>(i)] - lq[static_cast<size_t>(i)]);
                const bool same = std::max_element(a, a + V) - a == std::max_element(b, b + V) - b;
                const int64_t p = off + t;
                size_t bk = 0;
                while (bk + 1 < bucket_edges.size() && p >= bucket_edges[bk + 1]) ++bk;
                acc[f][bk].add(std::max(0.0, kl), same);
            }
        }
    }
}

}  // namespace

int main(int argc, char** argv) {
    std::string model_path, text_path;
    int64_t tokens = 20480, window = 2048, long_ctx = 8192, retrieval = 4, retrieval_ctx = 1024;
    int threads = 0;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto next = [&] { return std::string(i + 1 < argc ? argv[++i] : ""); };
        if (a == "-m") model_path = next();
        else if (a == "--text") text_path = next();
        else if (a == "--tokens") tokens = std::stoll(next());
        else if (a == "--window") window = std::stoll(next());
        else if (a == "--long") long_ctx = std::stoll(next());
        else if (a == "--retrieval") retrieval = std::stoll(next());
        else if (a == "--retrieval-ctx") retrieval_ctx = std::stoll(next());
        else if (a == "--threads") threads = std::stoi(next());
        else {
            std::fprintf(stderr, "usage: %s -m MODEL --text FILE [--tokens N] [--window W] [--long L] [--retrieval T] "
                                 "[--retrieval-ctx C] [--threads N]\n", argv[0]);
            return 2;
        }
    }
    try {
        const auto t0 = std::chrono::steady_clock::now();
        util::ThreadPool pool(threads);
        model::LoadOptions lo;
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
        std::printf("model %s: %lld layers, %lld kv heads, head dim %lld; text %zu bytes = %zu tokens\n",
                    model_path.c_str(), static_cast<long long>(c.n_layers), static_cast<long long>(c.n_kv_heads),
                    static_cast<long long>(c.head_dim), text.size(), all.size());

        // 1. >= tokens positions in windows of `window`.
        const int64_t n_win = (tokens + window - 1) / window;
        util::check(static_cast<int64_t>(all.size()) >= n_win * window + long_ctx, "bench: text too short");
        std::vector<std::vector<Acc>> acc(kFormats.size(), std::vector<Acc>(1));
        for (int64_t w = 0; w < n_win; ++w) {
            std::vector<int32_t> toks(all.begin() + w * window, all.begin() + (w + 1) * window);
            eval_window(tf, c, toks, {0}, acc);
            std::fprintf(stderr, "window %lld/%lld done\n", static_cast<long long>(w + 1), static_cast<long long>(n_win));
        }
        std::printf("\n## %lld positions (%lld windows of %lld tokens), vs bf16 KV\n\n", static_cast<long long>(n_win * window),
                    static_cast<long long>(n_win), static_cast<long long>(window));
        std::printf("| format | mean KL | top-1 agreement |\n|---|---|---|\n");
        for (size_t f = 1; f < kFormats.size(); ++f)
            std::printf("| %s | %.5f | %.4f |\n", kFormats[f].name().c_str(), acc[f][0].mean_kl(), acc[f][0].top1());

        // 2. One long window, by position bucket.
        if (long_ctx > 0) {
            std::vector<int64_t> edges = {0, 512, 2048, 4096, 8192, 16384};
            while (edges.size() > 2 && edges[edges.size() - 2] >= long_ctx) edges.pop_back();
            std::vector<std::vector<Acc>> lacc(kFormats.size(), std::vector<Acc>(edges.size()));
            std::vector<int32_t> toks(all.begin() + n_win * window, all.begin() + n_win * window + long_ctx);
            eval_window(tf, c, toks, edges, lacc);
            std::printf("\n## one %lld-token window, by position (mean KL / top-1 vs bf16 KV)\n\n|format|", static_cast<long long>(long_ctx));
            for (size_t b = 0; b + 1 < edges.size() && edges[b] < long_ctx; ++b)
                std::printf(" %lld-%lld |", static_cast<long long>(edges[b]), static_cast<long long>(std::min(edges[b + 1], long_ctx)));
            std::printf("\n|---|");
            for (size_t b = 0; b + 1 < edges.size() && edges[b] < long_ctx; ++b) std::printf("---|");
            std::printf("\n");
            for (size_t f = 1; f < kFormats.size(); ++f) {
                std::printf("| %s |", kFormats[f].name().c_str());
                for (size_t b = 0; b + 1 < edges.size() && edges[b] < long_ctx; ++b)
                    std::printf(" %.4f / %.3f |", lacc[f][b].mean_kl(), lacc[f][b].top1());
                std::printf("\n");
            }
        }

        // 3. Retrieval: a number planted at the start, filler text, then the question.
        if (retrieval > 0) {
            std::vector<int> ok(kFormats.size(), 0);
            const int64_t V = c.vocab_size;
            std::vector<float> logits(static_cast<size_t>(V));
            for (int64_t trial = 0; trial < retrieval; ++trial) {
                const int code = 1000 + static_cast<int>((trial * 7919 + 1237) % 9000);
                const std::string fact = "Remember this: the secret number is " + std::to_string(code) + ".\n\n";
                const std::string question = "\n\nWhat is the secret number mentioned at the beginning? The secret number is";
                auto head = model->tokenizer->encode(fact, true);
                auto tail = model->tokenizer->encode(question, false);
                const int64_t fill = retrieval_ctx - static_cast<int64_t>(head.size() + tail.size());
                std::vector<int32_t> prompt = head;
                const int64_t start = (trial * 3001) % (static_cast<int64_t>(all.size()) - fill);
                prompt.insert(prompt.end(), all.begin() + start, all.begin() + start + fill);
                prompt.insert(prompt.end(), tail.begin(), tail.end());
                for (size_t f = 0; f < kFormats.size(); ++f) {
                    Runner r(tf, c, kFormats[f], static_cast<int64_t>(prompt.size()) + 8);
                    for (size_t off = 0; off < prompt.size(); off += 256) {
                        const int64_t m = std::min<int64_t>(256, static_cast<int64_t>(prompt.size() - off));
                        r.run(prompt.data() + off, m, logits.data(), false);
                    }
                    std::vector<int32_t> out;
                    for (int s = 0; s < 6; ++s) {
                        const int32_t next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
                        out.push_back(next);
                        r.run(&out.back(), 1, logits.data(), false);
                    }
                    const std::string ans = model->tokenizer->decode(out);
                    ok[f] += ans.find(std::to_string(code)) != std::string::npos;
                    std::fprintf(stderr, "retrieval %lld %s: '%s' (want %d)\n", static_cast<long long>(trial),
                                 kFormats[f].name().c_str(), ans.c_str(), code);
                }
            }
            std::printf("\n## retrieval: number planted at the start of a %lld-token prompt, asked at the end (greedy)\n\n",
                        static_cast<long long>(retrieval_ctx));
            std::printf("| format | found |\n|---|---|\n");
            for (size_t f = 0; f < kFormats.size(); ++f)
                std::printf("| %s | %d/%lld |\n", kFormats[f].name().c_str(), ok[f], static_cast<long long>(retrieval));
        }
        std::printf("\nwall time %.0f s\n",
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
    return 0;
}
