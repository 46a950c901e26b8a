// `warden logits`: run token ids through the model in one prefill and print the top logits
// at every position as JSON lines (the interface the reference tests compare against).
#include <charconv>
#include <cstdio>

#include "cli/commands.h"
#include "engine/sampler.h"
#include "launch/common.h"
#include "launch/engine_assembly.h"
#include "model/transformer.h"
#include "util/error.h"

namespace warden::cli {

namespace {

struct LogitsOptions {
    launch::CommonOptions common;
    std::string tokens;
    int64_t top = 8;
    int64_t greedy = 0;
};

std::vector<int32_t> parse_ids(const std::string& s) {
    std::vector<int32_t> ids;
    size_t i = 0;
    while (i <= s.size()) {
        const size_t j = std::min(s.find(',', i), s.size());
        int32_t v = 0;
        const char* b = s.data() + i;
        const char* e = s.data() + j;
        auto [p, ec] = std::from_chars(b, e, v);
        util::check(b != e && ec == std::errc() && p == e && v >= 0,
                    "--tokens: '" + std::string(b, e) + "' is not a token id");
        ids.push_back(v);
        i = j + 1;
    }
    return ids;
}

std::string fmt_logit(float v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.7g", static_cast<double>(v));
    return buf;
}

int logits(const LogitsOptions& o) {
    const auto ids = parse_ids(o.tokens);
    util::check(o.top >= 1, "--top must be at least 1");
    util::check(o.greedy >= 0, "--greedy must be >= 0");
    util::ThreadPool pool(o.common.threads);
    const launch::LoadedModel loaded = launch::load(o.common, true, pool);
    const auto& model = loaded.model;
    const int64_t vocab = model->config.vocab_size;
    const int64_t n = static_cast<int64_t>(ids.size());
    const int64_t ctx = n + o.greedy;
    util::check(ctx <= model->config.max_ctx, std::to_string(ctx) +
                                                  " tokens exceed the model's context of " +
                                                  std::to_string(model->config.max_ctx));
    // One sequence on the paged KV cache, sized to fit exactly.
    const launch::EngineParts parts =
        launch::assemble_engine(launch::EngineOptions{}, *model, pool, ctx);
    const auto& cache = parts.cache;
    model::Transformer& tf = *parts.transformer;
    kv::PageTable table;
    util::check(cache->reserve(table, ctx), "KV cache too small");
    std::vector<int32_t> page_ids;
    for (const auto& p : table.pages) page_ids.push_back(p.page.v);
    auto forward = [&](const int32_t* toks, int64_t m, int64_t pos0, float* out, bool all) {
        util::check(!cache->verify(kv::SeqId{0}, table).has_value(), "kv integrity violation");
        model::SeqInput in;
        in.tokens = std::span<const int32_t>(toks, static_cast<size_t>(m));
        in.pos0 = pos0;
        in.page_ids = page_ids.data();
        in.logits = out;
        in.all_logits = all;
        tf.step(std::span<const model::SeqInput>(&in, 1), cache->storage());
    };
    std::vector<float> all(static_cast<size_t>(n * vocab));
    for (int64_t off = 0; off < n; off += model::Transformer::kMaxChunk) {
        const int64_t m = std::min(model::Transformer::kMaxChunk, n - off);
        forward(ids.data() + off, m, off, all.data() + off * vocab, true);
    }
    const int64_t k = std::min(o.top, vocab);
    std::vector<int32_t> order(static_cast<size_t>(vocab));
    for (int64_t p = 0; p < n; ++p) {
        const float* row = all.data() + p * vocab;
        for (int64_t i = 0; i < vocab; ++i) order[static_cast<size_t>(i)] = static_cast<int32_t>(i);
        std::partial_sort(
            order.begin(), order.begin() + k, order.end(),
            [row](int32_t a, int32_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
        std::string line = "{\"pos\": " + std::to_string(p) + ", \"top\": [";
        for (int64_t i = 0; i < k; ++i) {
            const int32_t id = order[static_cast<size_t>(i)];
            line += (i ? ", [" : "[") + std::to_string(id) + ", " + fmt_logit(row[id]) + "]";
        }
        std::puts((line + "]}").c_str());
    }
    if (o.greedy > 0) {
        // Continue greedily from the prefilled cache: the first token comes from the last
        // position's logits, each next from a one-token decode step.
        std::vector<float> last(all.end() - vocab, all.end());
        std::vector<int32_t> gen;
        for (int64_t i = 0; i < o.greedy; ++i) {
            const int32_t id = engine::Sampler::argmax(last);
            gen.push_back(id);
            if (i + 1 < o.greedy) forward(&id, 1, n + i, last.data(), false);
        }
        std::string line = "{\"greedy\": [";
        for (size_t i = 0; i < gen.size(); ++i) line += (i ? ", " : "") + std::to_string(gen[i]);
        std::puts((line + "]}").c_str());
    }
    return 0;
}

}  // namespace

void register_logits(CLI::App& app, int& rc) {
    auto o = std::make_shared<LogitsOptions>();
    CLI::App* sub = app.add_subcommand(
        "logits", "print the top logits at every position of a token sequence (JSON lines)");
    launch::add_model_option(*sub, o->common);
    launch::add_threads_option(*sub, o->common);
    launch::add_dtype_option(*sub, o->common);
    sub->add_option("--tokens", o->tokens, "comma-separated token ids, e.g. 1,2,3")->required();
    sub->add_option("--top", o->top, "how many logits per position (default 8)");
    sub->add_option("--greedy", o->greedy, "then generate N tokens greedily and print them");
    sub->callback([o, &rc] { rc = logits(*o); });
}

}  // namespace warden::cli
