#pragma once
// The engine's metrics in vLLM's vocabulary, under a `warden:` prefix (vllm:X -> warden:X; the
// name-for-name mapping is in docs/SERVER.md), so dashboards and alerts written for vLLM apply:
// request success by finish reason, prompt and generation tokens counted as they happen, TTFT,
// inter-token, end-to-end, queue, prefill, decode and inference-time histograms, tokens per
// request, KV usage, prefix-cache queries and hits, preemptions, running/waiting. Thread-safe.
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "engine/request.h"

namespace warden::engine {

struct Gauges;

// A Prometheus histogram with its own bucket bounds.
class BucketHistogram {
  public:
    explicit BucketHistogram(std::vector<double> bounds);
    void observe(double v);
    void render(std::string& out, const std::string& name) const;

  private:
    std::vector<double> bounds_;
    std::vector<int64_t> buckets_;  // non-cumulative
    int64_t count_ = 0;
    double sum_ = 0;
};

class VllmMetrics {
  public:
    VllmMetrics();
    // Prompt tokens processed, counted per prefill chunk as the scheduler completes them (so a
    // long prompt moves the counter while it is being prefilled, not only at its first token).
    void prompt_tokens(int64_t n);
    // A request's first token: time to first token.
    void first_token(double ttft_s);
    // Every later token: the gap since the previous one.
    void next_token(double gap_s);
    // The request ended (any reason).
    void finished(const Result& r);
    // An HTTP answer: route template ("/v1/completions", "other"), method, status.
    void http_response(const std::string& handler, const std::string& method, unsigned status);
    // The Prometheus text; g: the engine's gauges at the time.
    std::string render(const Gauges& g) const;

  private:
    mutable std::mutex mu_;
    int64_t prompt_tokens_ = 0, generation_tokens_ = 0;
    std::map<std::string, int64_t> success_;                                  // by finished_reason
    std::map<std::tuple<std::string, std::string, unsigned>, int64_t> http_;  // handler, method
    BucketHistogram ttft_, itl_, tpot_, e2e_, queue_, inference_, prefill_, decode_;
    BucketHistogram prompt_len_, gen_len_;
};

}  // namespace warden::engine
