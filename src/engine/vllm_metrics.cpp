#include "engine/vllm_metrics.h"

#include <cstdio>
#include <tuple>

#include "engine/metrics.h"

namespace warden::engine {

namespace {

// vLLM's bucket bounds (vllm/v1/metrics/loggers.py).
const std::vector<double> kTtft = {0.001, 0.005, 0.01, 0.02,  0.04,  0.06,  0.08, 0.1,
                                   0.25,  0.5,   0.75, 1.0,   2.5,   5.0,   7.5,  10.0,
                                   20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};
const std::vector<double> kItl = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
                                  0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
const std::vector<double> kLatency = {0.3,  0.5,   0.8,   1.0,   1.5,   2.0,    2.5,
                                      5.0,  10.0,  15.0,  20.0,  30.0,  40.0,   50.0,
                                      60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
// 1, 2, 5, 10, 20, 50 ... up to 1e6 tokens.
std::vector<double> tokens_buckets() {
    std::vector<double> b;
    for (double m = 1; m <= 1e6; m *= 10)
        for (double k : {1.0, 2.0, 5.0}) b.push_back(k * m);
    return b;
}

const char* success_reason(FinishReason r) {
    switch (r) {
        case FinishReason::Stop:
            return "stop";
        case FinishReason::Length:
            return "length";
        case FinishReason::Cancelled:
        case FinishReason::Timeout:
            return "abort";
        case FinishReason::IntegrityError:
        case FinishReason::Rejected:
        case FinishReason::Unavailable:
            return "error";
    }
    return "error";
}

}  // namespace

BucketHistogram::BucketHistogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), buckets_(bounds_.size(), 0) {}

void BucketHistogram::observe(double v) {
    size_t i = 0;
    while (i < bounds_.size() && v > bounds_[i]) ++i;
    if (i < bounds_.size()) ++buckets_[i];
    ++count_;
    sum_ += v;
}

void BucketHistogram::render(std::string& out, const std::string& name) const {
    int64_t cum = 0;
    for (size_t i = 0; i < bounds_.size(); ++i) {
        cum += buckets_[i];
        out += name + "_bucket{le=\"" + prometheus_number(bounds_[i]) + "\"} " +
               std::to_string(cum) + "\n";
    }
    out += name + "_bucket{le=\"+Inf\"} " + std::to_string(count_) + "\n";
    out += name + "_sum " + prometheus_number(sum_) + "\n";
    out += name + "_count " + std::to_string(count_) + "\n";
}

VllmMetrics::VllmMetrics()
    : ttft_(kTtft),
      itl_(kItl),
      tpot_(kItl),
      e2e_(kLatency),
      queue_(kLatency),
      inference_(kLatency),
      prefill_(kLatency),
      decode_(kLatency),
      prompt_len_(tokens_buckets()),
      gen_len_(tokens_buckets()) {}

void VllmMetrics::prompt_tokens(int64_t n) {
    std::lock_guard lk(mu_);
    prompt_tokens_ += n;
}

void VllmMetrics::first_token(double ttft_s) {
    std::lock_guard lk(mu_);
    ++generation_tokens_;
    ttft_.observe(ttft_s);
}

void VllmMetrics::next_token(double gap_s) {
    std::lock_guard lk(mu_);
    ++generation_tokens_;
    itl_.observe(gap_s);
}

void VllmMetrics::finished(const Result& r) {
    std::lock_guard lk(mu_);
    ++success_[success_reason(r.finish)];
    if (r.finish == FinishReason::Rejected) return;
    const Timing& t = r.timing;
    const auto n_out = static_cast<int64_t>(r.output.size());
    e2e_.observe(t.total_ms / 1000.0);
    queue_.observe(t.queue_ms / 1000.0);
    inference_.observe((t.total_ms - t.queue_ms) / 1000.0);
    prompt_len_.observe(static_cast<double>(r.n_prompt));
    gen_len_.observe(static_cast<double>(n_out));
    if (n_out > 0) {
        prefill_.observe(t.prefill_ms / 1000.0);
        decode_.observe((t.total_ms - t.ttft_ms) / 1000.0);
    }
    if (n_out > 1) tpot_.observe(t.tpot_ms / 1000.0);
}

void VllmMetrics::http_response(const std::string& handler, const std::string& method,
                                unsigned status) {
    std::lock_guard lk(mu_);
    ++http_[{handler, method, status}];
}

std::string VllmMetrics::render(const Gauges& g) const {
    std::lock_guard lk(mu_);
    std::string o;
    auto head = [&](const std::string& name, const char* type, const char* help) {
        o += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
    };
    auto one = [&](const std::string& name, const char* type, const char* help, double v) {
        head(name, type, help);
        o += name + " " + prometheus_number(v) + "\n";
    };
    one("warden:num_requests_running", "gauge", "requests in the running batch",
        static_cast<double>(g.running));
    one("warden:num_requests_waiting", "gauge", "requests waiting for admission",
        static_cast<double>(g.waiting));
    one("warden:kv_cache_usage_perc", "gauge", "fraction of KV pages in use (1 = full)",
        g.kv_pages_total ? static_cast<double>(g.kv_pages_used) / g.kv_pages_total : 0.0);
    // Counters are named without _total in vLLM's source; the exposition adds it.
    one("warden:num_preemptions_total", "counter", "preemptions (sequences recomputed later)",
        static_cast<double>(g.preemptions));
    one("warden:prefix_cache_queries_total", "counter",
        "prompt tokens looked up in the prefix cache",
        static_cast<double>(g.pc.hit_tokens + g.pc.miss_tokens));
    one("warden:prefix_cache_hits_total", "counter", "prompt tokens found in the prefix cache",
        static_cast<double>(g.pc.hit_tokens));
    one("warden:prompt_tokens_total", "counter",
        "prompt tokens processed, counted per prefill chunk", static_cast<double>(prompt_tokens_));
    one("warden:generation_tokens_total", "counter", "generated tokens, counted as sampled",
        static_cast<double>(generation_tokens_));
    head("warden:request_success_total", "counter",
         "finished requests by finished_reason (stop, length, abort, error)");
    for (const char* r : {"stop", "length", "abort", "error"}) {
        auto it = success_.find(r);
        o += std::string("warden:request_success_total{finished_reason=\"") + r + "\"} " +
             std::to_string(it == success_.end() ? 0 : it->second) + "\n";
    }
    auto hist = [&](const char* name, const char* help, const BucketHistogram& h) {
        head(name, "histogram", help);
        h.render(o, name);
    };
    hist("warden:time_to_first_token_seconds", "arrival to first token", ttft_);
    hist("warden:inter_token_latency_seconds", "gap between consecutive output tokens", itl_);
    hist("warden:request_time_per_output_token_seconds",
         "a request's mean gap between output tokens", tpot_);
    hist("warden:e2e_request_latency_seconds", "arrival to finish", e2e_);
    hist("warden:request_queue_time_seconds", "arrival to first admission", queue_);
    hist("warden:request_inference_time_seconds", "first admission to finish", inference_);
    hist("warden:request_prefill_time_seconds", "first admission to first token", prefill_);
    hist("warden:request_decode_time_seconds", "first token to finish", decode_);
    hist("warden:request_prompt_tokens", "prompt tokens per request", prompt_len_);
    hist("warden:request_generation_tokens", "generated tokens per request", gen_len_);
    head("warden:http_requests_total", "counter", "HTTP answers by handler, method and status");
    for (const auto& [k, n] : http_) {
        const auto& [handler, method, status] = k;
        o += "warden:http_requests_total{handler=\"" + handler + "\",method=\"" + method +
             "\",status=\"" + std::to_string(status) + "\"} " + std::to_string(n) + "\n";
    }
    return o;
}

}  // namespace warden::engine
