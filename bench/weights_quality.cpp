// Quality of runtime weight formats against a reference format on the same text:
// mean KL(ref || fmt), top-1 agreement with ref, and perplexity of each, over windows of
// --ctx tokens (each window a fresh sequence, every position scored).
//
// Usage: bench_weights_quality -m MODEL --text FILE [--tokens N] [--ctx 512] [-t 2]
//          [--ref bf16] --formats int4,int4-g128,int8,fp8 [--extra NAME=GGUF:FORMAT ...]
// A format may carry "+head=FORMAT" (--head-weights), e.g. int4+head=int8. Without it the
// embeddings and head stay at the runtime dtype, for every format (int4 included, unlike the
// CLI's int8 default head), so the documented runs of docs/WEIGHT_QUANT.md reproduce.
// --extra loads another file (e.g. llama.cpp's Q4_0 of the same source, as int4) and scores it
// against the same reference: "the same way".
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "model/kv_cache.h"
#include "model/model.h"
#include "model/transformer.h"
#include "tensor/weight_format.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

using namespace warden;

namespace {

struct Cand {
    std::string name;
    std::unique_ptr<model::Model> m;
    double kl = 0.0, nll = 0.0;
    int64_t top1 = 0;
};

// spec: a --weights name, optionally "+head=FORMAT" for --head-weights (e.g. int4+head=int8).
std::unique_ptr<model::Model> load(const std::string& path, const std::string& spec,
                                   util::ThreadPool& pool) {
    model::LoadOptions o;
    std::string fmt = spec;
    if (const auto h = spec.find("+head="); h != std::string::npos) {
        fmt = spec.substr(0, h);
        o.head_weights = tensor::parse_weight_format(spec.substr(h + 6));
    }
    o.weights = tensor::parse_weight_format(fmt);
    if (o.weights->type == tensor::WeightType::F32) o.dtype = model::RuntimeDType::F32;
    if (!o.head_weights)
        o.head_weights =
            tensor::parse_weight_format(o.dtype == model::RuntimeDType::F32 ? "f32" : "bf16");
    o.load_tokenizer = true;
    return model::load_model(path, o, pool);
}

std::vector<std::string> split(const std::string& s, char c) {
    std::vector<std::string> out;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, c))
        if (!item.empty()) out.push_back(item);
    return out;
}

void log_softmax(const float* x, int64_t n, std::vector<double>& out) {
    out.resize(static_cast<size_t>(n));
    double mx = x[0];
    for (int64_t i = 1; i < n; ++i) mx = std::max(mx, static_cast<double>(x[i]));
    double s = 0.0;
    for (int64_t i = 0; i < n; ++i) s += std::exp(x[i] - mx);
    const double lse = mx + std::log(s);
    for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = x[i] - lse;
}

int64_t argmax(const float* x, int64_t n) {
    return std::max_element(x, x + n) - x;
}

}  // namespace

int main(int argc, char** argv) {
    std::string model_path, text_path, ref_fmt = "bf16", formats;
    std::vector<std::string> extras;
    int64_t max_tokens = 20480, ctx = 512;
    int threads = 2;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto next = [&]() -> std::string {
            if (i + 1 >= argc) throw util::Error("missing value for " + a);
            return argv[++i];
        };
        if (a == "-m")
            model_path = next();
        else if (a == "--text")
            text_path = next();
        else if (a == "--ref")
            ref_fmt = next();
        else if (a == "--formats")
            formats = next();
        else if (a == "--extra")
            extras.push_back(next());
        else if (a == "--tokens")
            max_tokens = std::stoll(next());
        else if (a == "--ctx")
            ctx = std::stoll(next());
        else if (a == "-t")
            threads = std::stoi(next());
        else {
            std::fprintf(stderr, "unknown argument %s\n", a.c_str());
            return 2;
        }
    }
    try {
        util::ThreadPool pool(threads);
        std::ifstream f(text_path, std::ios::binary);
        if (!f) throw util::Error("cannot open text '" + text_path + "'");
        const std::string text((std::istreambuf_iterator<char>(f)),
                               std::istreambuf_iterator<char>());
        auto ref = load(model_path, ref_fmt, pool);
        if (!ref->tokenizer) throw util::Error("model has no tokenizer");
        std::vector<int32_t> ids = ref->tokenizer->encode(text, false);
        if (static_cast<int64_t>(ids.size()) > max_tokens)
            ids.resize(static_cast<size_t>(max_tokens));
        ctx = std::min(ctx, ref->config.max_ctx);
        std::vector<Cand> cands;
        for (const auto& fmt : split(formats, ','))
            cands.push_back({fmt, load(model_path, fmt, pool)});
        for (const auto& e : extras) {  // NAME=PATH:FORMAT
            const auto eq = e.find('='), colon = e.rfind(':');
            if (eq == std::string::npos || colon == std::string::npos || colon < eq)
                throw util::Error("--extra wants NAME=PATH:FORMAT, got '" + e + "'");
            cands.push_back({e.substr(0, eq),
                             load(e.substr(eq + 1, colon - eq - 1), e.substr(colon + 1), pool)});
        }
        const int64_t vocab = ref->config.vocab_size;
        double ref_nll = 0.0;
        int64_t scored = 0;
        std::vector<float> lr, lc;
        std::vector<double> pr, pc;
        model::ContiguousKvCache cache(ref->config, ctx, tensor::KvType::F32);
        const auto t0 = std::chrono::steady_clock::now();
        for (size_t off = 0; off + 2 <= ids.size(); off += static_cast<size_t>(ctx)) {
            const int64_t n = std::min<int64_t>(ctx, static_cast<int64_t>(ids.size() - off));
            if (n < 2) break;
            lr.assign(static_cast<size_t>(n * vocab), 0.0f);
            cache.set_n_tokens(0);
            model::Transformer(*ref, pool).forward(ids.data() + off, n, cache, lr.data(), true);
            for (auto& c : cands) {
                lc.assign(static_cast<size_t>(n * vocab), 0.0f);
                cache.set_n_tokens(0);
                model::Transformer(*c.m, pool).forward(ids.data() + off, n, cache, lc.data(), true);
                for (int64_t p = 0; p + 1 < n; ++p) {
                    const float* a = lr.data() + p * vocab;
                    const float* b = lc.data() + p * vocab;
                    log_softmax(a, vocab, pr);
                    log_softmax(b, vocab, pc);
                    double kl = 0.0;
                    for (int64_t v = 0; v < vocab; ++v)
                        kl += std::exp(pr[static_cast<size_t>(v)]) *
                              (pr[static_cast<size_t>(v)] - pc[static_cast<size_t>(v)]);
                    c.kl += kl;
                    c.top1 += argmax(a, vocab) == argmax(b, vocab);
                    c.nll -= pc[static_cast<size_t>(ids[off + static_cast<size_t>(p) + 1])];
                }
            }
            for (int64_t p = 0; p + 1 < n; ++p) {
                log_softmax(lr.data() + p * vocab, vocab, pr);
                ref_nll -= pr[static_cast<size_t>(ids[off + static_cast<size_t>(p) + 1])];
            }
            scored += n - 1;
            std::fprintf(
                stderr, "[quality] %lld/%zu tokens, %.0f s\n", static_cast<long long>(off + n),
                ids.size(),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
        std::printf(
            "{\"model\": \"%s\", \"tokens_scored\": %lld, \"ctx\": %lld, \"ref\": \"%s\", "
            "\"ref_ppl\": %.4f, "
            "\"formats\": [",
            model_path.c_str(), static_cast<long long>(scored), static_cast<long long>(ctx),
            ref_fmt.c_str(), std::exp(ref_nll / static_cast<double>(scored)));
        for (size_t i = 0; i < cands.size(); ++i) {
            const auto& c = cands[i];
            const auto& wm = c.m->weight_memory;
            std::printf(
                "%s\n  {\"name\": \"%s\", \"mean_kl\": %.6f, \"top1_agree\": %.4f, \"ppl\": %.4f, "
                "\"layer_bytes\": %lld, \"embedding_bytes\": %lld}",
                i ? "," : "", c.name.c_str(), c.kl / static_cast<double>(scored),
                static_cast<double>(c.top1) / static_cast<double>(scored),
                std::exp(c.nll / static_cast<double>(scored)), static_cast<long long>(wm.layers),
                static_cast<long long>(wm.embeddings));
        }
        std::printf("\n]}\n");
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_weights_quality: error: %s\n", e.what());
        return 1;
    }
    return 0;
}
