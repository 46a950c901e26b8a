#pragma once
// Synthetic request streams for `warden bench`: fixed lengths, long-tail length
// distributions and an agent-style workload (shared system prompt + tools, growing
// multi-turn history). Lengths are in tokens, approximated by words: the text is drawn from
// a list of short common English words, each of which is one token (with its leading
// space) in the BPE and SentencePiece vocabularies we serve; the server's reported
// usage.prompt_tokens is what the results record.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

namespace warden::tools::bench {

// "128" (fixed), "64:256" (uniform, inclusive), "lognormal:MEDIAN:SIGMA[:MAX]" (long tail,
// clamped to [1, MAX], MAX default 8*MEDIAN).
struct LenDist {
    enum class Kind { Fixed, Uniform, LogNormal } kind = Kind::Fixed;
    double a = 128, b = 128, max = 128;
    static LenDist parse(const std::string& s, const std::string& flag);
    int64_t sample(std::mt19937_64& rng) const;
};

struct WorkloadOptions {
    std::string kind = "fixed";  // fixed | longtail | agent
    LenDist input{LenDist::Kind::Fixed, 128, 128, 128};
    LenDist output{LenDist::Kind::Fixed, 64, 64, 64};
    int64_t shared_prefix = 0;  // tokens of a prefix common to every prompt (agent: system prompt)
    int64_t turns = 4;          // agent: turns per session
    uint64_t seed = 0;
    // Draws a different set of prompts from the same seed (the shared prefix / agent system
    // prompt stays the same): each concurrency level and each warm-up gets its own variant, so a
    // server's prefix cache never serves one level the prompts an earlier level already sent.
    uint64_t variant = 0;
};

struct BenchRequest {
    bool chat = false;
    std::string prompt;       // /v1/completions
    nlohmann::json messages;  // /v1/chat/completions
    int64_t input_words = 0;  // the approximate prompt length in tokens
    int64_t max_tokens = 0;
};

// `n` requests of the workload, reproducible from the seed.
std::vector<BenchRequest> make_workload(const WorkloadOptions& o, int64_t n);

// `n` words of synthetic text (leading space before every word but the first).
std::string synthetic_text(std::mt19937_64& rng, int64_t n);

}  // namespace warden::tools::bench
