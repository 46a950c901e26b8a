// The per-token cost of structured outputs measured directly, without a model: a tokenizer's
// vocabulary (from a GGUF), a few JSON schemas, and for each a valid document tokenized as the
// model would write it. Along the document's tokens, per token:
//   check    Constraint::allows + accept: the greedy fast path (the drawn token is allowed)
//   mask     Constraint::apply over a full logit row + accept: the masked path, masks cached
//            per grammar state as the server runs (the first pass, on a fresh compiled grammar,
//            fills the cache, later passes hit it; the cache is per compiled grammar, shared by
//            all requests)
//   miss     CompiledGrammar::compute_mask: what a mask-cache miss costs, the trie walk on the
//            grammar's transition memo (warm: filled by the passes before)
//   walk     CompiledGrammar::reference_mask: the trie walk running the matcher at every node,
//            with neither cache nor memo (what every miss cost before the memo)
// (Properties come in the order of the schema's keys as the server parses them: sorted by name.)
// Prints microseconds per token (median of --reps passes) and the mask cache hit rate of the
// first and the later passes.
//
// Usage: bench_structured_mask MODEL.gguf [--reps N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "constrain/constraint.h"
#include "constrain/json_schema.h"
#include "formats/gguf_file.h"
#include "tokenizer/tokenizer.h"

using namespace warden;
using Clock = std::chrono::steady_clock;

namespace {

struct Case {
    const char* name;
    const char* schema;  // nullptr: json_object
    const char* doc;
};

const Case kCases[] = {
    {"person (5 fields)",
     R"({"type":"object","properties":{"name":{"type":"string","maxLength":32},
        "age":{"type":"integer"},"email":{"type":"string","maxLength":40},
        "skills":{"type":"array","items":{"type":"string","maxLength":20},"maxItems":4},
        "employed":{"type":"boolean"}},
        "required":["name","age","email","skills","employed"],"additionalProperties":false})",
     R"({"age": 34, "email": "alice.johnson@example.com", "employed": true, "name": "Alice Johnson", "skills": ["Python", "Go", "distributed systems", "SQL"]})"},
    {"nested order",
     R"({"type":"object","properties":{"id":{"type":"integer"},
        "items":{"type":"array","items":{"type":"object","properties":{
          "sku":{"type":"string"},"qty":{"type":"integer"},"price":{"type":"number"}},
          "required":["sku","qty","price"],"additionalProperties":false}},
        "note":{"type":"string"}},"required":["id","items"],"additionalProperties":false})",
     R"({"id": 1042, "items": [{"price": 9.99, "qty": 2, "sku": "A-100"}, {"price": 120.5, "qty": 1, "sku": "B-7"}, {"price": 0.25, "qty": 12, "sku": "C-33"}], "note": "leave at the door"})"},
    {"json_object", nullptr,
     R"({"title": "Notes", "tags": ["a", "b", "c"], "count": 3, "done": false, "meta": {"by": "bob", "at": 17}})"},
};

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s MODEL.gguf [--reps N]\n", argv[0]);
        return 2;
    }
    int reps = 7;
    for (int i = 2; i + 1 < argc; ++i)
        if (std::string(argv[i]) == "--reps") reps = std::max(2, std::atoi(argv[i + 1]));
    formats::GGUFFile f(argv[1]);
    auto tok = tokenizer::Tokenizer::from_gguf(f);
    auto vocab = std::make_shared<const constrain::Vocabulary>(*tok);
    const std::vector<int32_t> stop = vocab->stop_ids();
    std::printf("vocabulary: %d tokens (%zu usable)\n\n", vocab->size(), vocab->sorted().size());
    std::printf(
        "| schema | tokens | check us/token | mask us/token (first pass) | mask us/token (cached) "
        "| miss us/token (memo walk) | walk us/token (no memo) | cache hits first pass "
        "| cache hits later |\n"
        "|---|---|---|---|---|---|---|---|---|\n");
    for (const Case& c : kCases) {
        const constrain::Grammar g =
            c.schema ? constrain::json_schema_grammar(nlohmann::json::parse(c.schema))
                     : constrain::json_object_grammar();
        // A fresh compiled grammar (not compile()'s shared one), so the first pass starts cold.
        auto compiled = std::make_shared<const constrain::CompiledGrammar>(g, vocab);
        const std::vector<int32_t> ids = tok->encode(c.doc, false);
        {  // the document must be a sentence of the grammar, token by token
            constrain::Constraint k(compiled);
            for (int32_t id : ids)
                if (!k.accept(id)) {
                    std::fprintf(stderr, "%s: the document leaves the grammar\n", c.name);
                    return 1;
                }
            if (!k.can_stop()) {
                std::fprintf(stderr, "%s: the document is incomplete\n", c.name);
                return 1;
            }
        }
        const double n = static_cast<double>(ids.size());
        auto us_since = [&](Clock::time_point t0) {
            return std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / n;
        };
        std::vector<float> logits(static_cast<size_t>(vocab->size()), 0.0f);
        std::vector<double> check, mask_warm, miss, walk;
        double mask_first = 0;
        constrain::CompiledGrammar::Stats s0 = compiled->stats(), s1{}, s2{};
        for (int r = 0; r < reps; ++r) {
            {
                constrain::Constraint k(compiled);
                const auto t0 = Clock::now();
                for (int32_t id : ids) {
                    if (!k.allows(id, stop) || !k.accept(id)) return 1;
                }
                check.push_back(us_since(t0));
            }
            {
                constrain::Constraint k(compiled);
                const auto t0 = Clock::now();
                for (int32_t id : ids) {
                    k.apply(logits, stop);
                    if (!k.accept(id)) return 1;
                }
                const double us = us_since(t0);
                if (r == 0) {
                    mask_first = us;
                    s1 = compiled->stats();
                } else {
                    mask_warm.push_back(us);
                }
            }
            for (int kind = 0; kind < 2; ++kind) {
                if (kind == 1 && r >= 3) break;  // the walk without memo is slow: three passes
                constrain::MatchState st = compiled->program().initial();
                double total = 0;
                for (int32_t id : ids) {
                    const auto t0 = Clock::now();
                    (void)(kind == 0 ? compiled->compute_mask(st) : compiled->reference_mask(st));
                    total += std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
                    if (!compiled->program().advance(st, vocab->bytes(id))) return 1;
                }
                (kind == 0 ? miss : walk).push_back(total / n);
            }
        }
        s2 = compiled->stats();
        auto rate = [](uint64_t h, uint64_t m) { return h + m ? 100.0 * h / (h + m) : 0.0; };
        std::printf("| %s | %zu | %.1f | %.1f | %.1f | %.0f | %.0f | %.0f%% | %.0f%% |\n", c.name,
                    ids.size(), median(check), mask_first, median(mask_warm), median(miss),
                    median(walk), rate(s1.hits - s0.hits, s1.misses - s0.misses),
                    rate(s2.hits - s1.hits, s2.misses - s1.misses));
    }
    return 0;
}
