#include "engine/metrics.h"

#include <cstdio>

namespace warden::engine {

std::string prometheus_number(double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.9g", v);
    return buf;
}

namespace {
// Tenant names come from the api-keys file: escape for a label value.
std::string label(const std::string& v) {
    std::string o;
    for (char c : v) {
        if (c == '\\' || c == '"') o += '\\';
        if (c == '\n') {
            o += "\\n";
            continue;
        }
        o += c;
    }
    return o;
}
}  // namespace

void Histogram::observe(double seconds) {
    size_t i = 0;
    while (i < kBounds.size() && seconds > kBounds[i]) ++i;
    if (i < kBounds.size()) ++buckets_[i];
    ++count_;
    sum_ += seconds;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& labels) const {
    int64_t cum = 0;
    for (size_t i = 0; i < kBounds.size(); ++i) {
        cum += buckets_[i];
        out += name + "_bucket{" + labels + ",le=\"" + prometheus_number(kBounds[i]) + "\"} " +
               std::to_string(cum) + "\n";
    }
    out += name + "_bucket{" + labels + ",le=\"+Inf\"} " + std::to_string(count_) + "\n";
    out += name + "_sum{" + labels + "} " + prometheus_number(sum_) + "\n";
    out += name + "_count{" + labels + "} " + std::to_string(count_) + "\n";
}

void Metrics::observe(const std::string& tenant, const Result& r) {
    std::lock_guard lk(mu_);
    Tenant& t = tenants_[tenant];
    ++t.requests;
    ++t.finished[finish_reason_name(r.finish)];
    if (r.finish == FinishReason::Rejected) return;
    spec_.observe(r.timing);
    t.prompt_tokens += r.n_prompt;
    t.cached_prompt_tokens += r.cached_tokens;
    t.generated_tokens += static_cast<int64_t>(r.output.size());
    if (r.finish == FinishReason::IntegrityError) ++t.integrity_violations;
    if (r.finish == FinishReason::Cancelled || r.finish == FinishReason::Timeout ||
        r.finish == FinishReason::IntegrityError)
        ++t.aborts[finish_reason_name(r.finish)];
    const Timing& tm = r.timing;
    t.e2e.observe(tm.total_ms / 1000.0);
    if (tm.queue_ms > 0 || !r.output.empty()) t.queue.observe(tm.queue_ms / 1000.0);
    if (!r.output.empty()) {
        t.prefill.observe(tm.prefill_ms / 1000.0);
        t.ttft.observe(tm.ttft_ms / 1000.0);
    }
    if (r.output.size() > 1) t.tpot.observe(tm.tpot_ms / 1000.0);
}

void Metrics::count_abort(const std::string& tenant, const std::string& reason) {
    std::lock_guard lk(mu_);
    ++tenants_[tenant].aborts[reason];
}

void Metrics::set_gauges(const Gauges& g) {
    std::lock_guard lk(mu_);
    g_ = g;
}

Gauges Metrics::gauges() const {
    std::lock_guard lk(mu_);
    return g_;
}

void Metrics::count_remote_prefill(const std::string& outcome) {
    std::lock_guard lk(mu_);
    ++remote_prefill_[outcome];
}

void Metrics::observe_kv_transfer(double ms, double fetch_ms, int64_t bytes) {
    std::lock_guard lk(mu_);
    kv_transfer_.observe(ms / 1000.0);
    kv_fetch_seconds_ += fetch_ms / 1000.0;
    kv_transfer_bytes_ += bytes;
}

std::string Metrics::prometheus() const {
    std::lock_guard lk(mu_);
    std::string o;
    auto gauge = [&](const char* name, const char* help, int64_t v) {
        o += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " gauge\n" + name +
             " " + std::to_string(v) + "\n";
    };
    gauge("warden_requests_running", "sequences in the running batch", g_.running);
    gauge("warden_requests_waiting", "requests queued for admission", g_.waiting);
    gauge("warden_kv_pages_used", "KV pages in use", g_.kv_pages_used);
    gauge("warden_kv_pages_free", "KV pages free", g_.kv_pages_free);
    gauge("warden_kv_pages_total", "KV pages in the pool", g_.kv_pages_total);
    gauge("warden_kv_bytes_used", "KV bytes in use", g_.kv_pages_used * g_.kv_bytes_per_page);
    gauge("warden_kv_bytes_total", "KV bytes in the pool",
          g_.kv_pages_total * g_.kv_bytes_per_page);
    o += "# HELP warden_preemptions_total sequences preempted (recomputed later)\n# TYPE "
         "warden_preemptions_total counter\n";
    o += "warden_preemptions_total " + std::to_string(g_.preemptions) + "\n";
    o += "# HELP warden_integrity_violations_total KV integrity check failures (all tenants)\n"
         "# TYPE warden_integrity_violations_total counter\n";
    o += "warden_integrity_violations_total " + std::to_string(g_.integrity_violations) + "\n";
    o += "# HELP warden_steps_total model steps executed\n# TYPE warden_steps_total counter\n";
    o += "warden_steps_total " + std::to_string(g_.steps) + "\n";
    if (!remote_prefill_.empty()) {
        o += "# HELP warden_remote_prefill_total prompt fetches from prefill servers, by outcome\n"
             "# TYPE warden_remote_prefill_total counter\n";
        for (const auto& [outcome, n] : remote_prefill_)
            o += "warden_remote_prefill_total{outcome=\"" + outcome + "\"} " + std::to_string(n) +
                 "\n";
        o += "# HELP warden_kv_transfer_seconds prompt KV fetch time (request sent -> last page)\n"
             "# TYPE warden_kv_transfer_seconds histogram\n";
        kv_transfer_.render(o, "warden_kv_transfer_seconds", "role=\"decode\"");
        o += "# HELP warden_kv_transfer_bytes_total prompt KV bytes fetched from prefill servers\n"
             "# TYPE warden_kv_transfer_bytes_total counter\n";
        o += "warden_kv_transfer_bytes_total " + std::to_string(kv_transfer_bytes_) + "\n";
        o += "# HELP warden_kv_page_fetch_seconds_total time spent reading pages (first get -> "
             "last get), the transport's share of the transfer\n"
             "# TYPE warden_kv_page_fetch_seconds_total counter\n";
        o += "warden_kv_page_fetch_seconds_total " + std::to_string(kv_fetch_seconds_) + "\n";
    }
    if (g_.prefix_cache) {
        auto total = [&](const char* name, const char* help, int64_t v) {
            o += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " counter\n" +
                 name + " " + std::to_string(v) + "\n";
        };
        gauge("warden_prefix_cache_pages",
              "KV pages held by the prefix cache alone (evictable unless pinned)",
              g_.kv_pages_cached);
        gauge("warden_prefix_cache_pinned_pages",
              "cached pages of operator-declared shared prefixes", g_.pc_pinned_pages);
        total("warden_prefix_cache_lookups_total", "admissions that looked up the prefix cache",
              g_.pc.lookups);
        total("warden_prefix_cache_hit_requests_total",
              "lookups that attached at least one cached page", g_.pc.hit_requests);
        total("warden_prefix_cache_hit_tokens_total", "prompt tokens served from the prefix cache",
              g_.pc.hit_tokens);
        total("warden_prefix_cache_miss_tokens_total", "looked-up tokens that had to be computed",
              g_.pc.miss_tokens);
        total("warden_prefix_cache_inserted_pages_total", "pages added to the prefix cache",
              g_.pc.inserted_pages);
        total("warden_prefix_cache_evictions_total", "cached pages evicted under memory pressure",
              g_.pc.evicted_pages);
        total("warden_prefix_cache_collisions_rejected_total",
              "hash matches rejected by the exact token/scope comparison",
              g_.pc.collisions_rejected);
    }

    auto counter = [&](const char* name, const char* help, auto get) {
        o += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " counter\n";
        for (const auto& [tn, t] : tenants_) get(name, "tenant=\"" + label(tn) + "\"", t);
    };
    counter("warden_prompt_tokens_total", "prompt tokens of finished requests",
            [&](const char* n, const std::string& l, const Tenant& t) {
                o += std::string(n) + "{" + l + "} " + std::to_string(t.prompt_tokens) + "\n";
            });
    counter("warden_prompt_tokens_cached_total",
            "prompt tokens of finished requests served by the prefix cache",
            [&](const char* n, const std::string& l, const Tenant& t) {
                o +=
                    std::string(n) + "{" + l + "} " + std::to_string(t.cached_prompt_tokens) + "\n";
            });
    counter("warden_generation_tokens_total", "generated tokens",
            [&](const char* n, const std::string& l, const Tenant& t) {
                o += std::string(n) + "{" + l + "} " + std::to_string(t.generated_tokens) + "\n";
            });
    counter("warden_requests_finished_total", "requests the engine finished, by finish reason",
            [&](const char* n, const std::string& l, const Tenant& t) {
                for (const auto& [r, c] : t.finished)
                    o += std::string(n) + "{" + l + ",reason=\"" + r + "\"} " + std::to_string(c) +
                         "\n";
            });
    counter("warden_request_aborts_total", "requests aborted or refused, by reason",
            [&](const char* n, const std::string& l, const Tenant& t) {
                for (const auto& [r, c] : t.aborts)
                    o += std::string(n) + "{" + l + ",reason=\"" + label(r) + "\"} " +
                         std::to_string(c) + "\n";
            });
    counter(
        "warden_tenant_integrity_violations_total", "requests aborted by a KV integrity violation",
        [&](const char* n, const std::string& l, const Tenant& t) {
            o += std::string(n) + "{" + l + "} " + std::to_string(t.integrity_violations) + "\n";
        });
    auto hist = [&](const char* name, const char* help, Histogram Tenant::*h) {
        o += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " histogram\n";
        for (const auto& [tn, t] : tenants_) (t.*h).render(o, name, "tenant=\"" + label(tn) + "\"");
    };
    hist("warden_queue_seconds", "time from arrival to first admission", &Tenant::queue);
    hist("warden_prefill_seconds", "time from admission to first token", &Tenant::prefill);
    hist("warden_ttft_seconds", "time to first token", &Tenant::ttft);
    hist("warden_tpot_seconds", "time per output token after the first", &Tenant::tpot);
    hist("warden_e2e_seconds", "end-to-end request time", &Tenant::e2e);
    spec_.render(o);
    return o + vllm_.render(g_);
}

}  // namespace warden::engine
