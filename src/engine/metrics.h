#pragma once
// Engine and server metrics in the Prometheus text format: latency histograms (queue, prefill,
// time to first token, time per output token, end-to-end), token and abort counters per tenant,
// and gauges of the scheduler and the KV pool. Thread-safe.
#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "engine/request.h"
#include "engine/speculative/spec_metrics.h"
#include "engine/vllm_metrics.h"
#include "kv/prefix_cache.h"

namespace warden::engine {

// A sample value as Prometheus text (%.9g), shared by every exposition in this folder.
std::string prometheus_number(double v);

class Histogram {
  public:
    static constexpr std::array<double, 15> kBounds = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
                                                       2.5,   5,    10,    30,   60,  120,  300};
    void observe(double seconds);
    // Appends the _bucket/_sum/_count lines of `name` with the label set `labels` (e.g.
    // tenant="a").
    void render(std::string& out, const std::string& name, const std::string& labels) const;

  private:
    std::array<int64_t, kBounds.size()> buckets_{};  // non-cumulative
    int64_t count_ = 0;
    double sum_ = 0;
};

struct Gauges {
    int64_t running = 0, waiting = 0;
    int64_t kv_pages_used = 0, kv_pages_free = 0, kv_pages_total = 0, kv_bytes_per_page = 0;
    int64_t preemptions = 0, integrity_violations = 0, steps = 0;
    // Prefix cache (all zero when it is off): pages held by the cache alone, and its counters.
    bool prefix_cache = false;
    int64_t kv_pages_cached = 0, pc_pinned_pages = 0;
    kv::PrefixCacheStats pc;
};

class Metrics {
  public:
    // A request the engine finished: latency histograms, token counters, abort reasons.
    void observe(const std::string& tenant, const Result& r);
    // A request refused or ended outside the engine (reason: queue_full, unauthorized, ...).
    void count_abort(const std::string& tenant, const std::string& reason);
    void set_gauges(const Gauges& g);
    // Disaggregated decode: a prompt fetch ended (ok, retry, failed, refused, cancelled,
    // local_fallback), and a verified prompt's KV transfer time and bytes.
    void count_remote_prefill(const std::string& outcome);
    // ms: request sent -> last page; fetch_ms: the page reads alone (transport throughput).
    void observe_kv_transfer(double ms, double fetch_ms, int64_t bytes);
    Gauges gauges() const;
    // The names above, then the same engine in vLLM's vocabulary (warden:...).
    std::string prometheus() const;
    VllmMetrics& vllm() { return vllm_; }

  private:
    VllmMetrics vllm_;
    struct Tenant {
        Histogram queue, prefill, ttft, tpot, e2e;
        int64_t prompt_tokens = 0, cached_prompt_tokens = 0, generated_tokens = 0, requests = 0;
        std::map<std::string, int64_t> finished;  // by finish reason
        std::map<std::string, int64_t> aborts;    // by reason
        int64_t integrity_violations = 0;
    };
    mutable std::mutex mu_;
    std::map<std::string, Tenant> tenants_;
    speculative::SpecMetrics spec_;                  // all tenants
    std::map<std::string, int64_t> remote_prefill_;  // by outcome
    Histogram kv_transfer_;
    int64_t kv_transfer_bytes_ = 0;
    double kv_fetch_seconds_ = 0;
    Gauges g_;
};

}  // namespace warden::engine
