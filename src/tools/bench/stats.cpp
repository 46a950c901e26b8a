#include "tools/bench/stats.h"

#include <algorithm>
#include <cmath>

namespace warden::tools::bench {

double percentile(const std::vector<double>& sorted, double q) {
    if (sorted.empty()) return 0;
    const double pos = q * static_cast<double>(sorted.size() - 1);
    const size_t lo = static_cast<size_t>(std::floor(pos));
    const size_t hi = std::min(lo + 1, sorted.size() - 1);
    const double f = pos - static_cast<double>(lo);
    return sorted[lo] + (sorted[hi] - sorted[lo]) * f;
}

Dist summarize(std::vector<double> v) {
    Dist d;
    d.n = static_cast<int64_t>(v.size());
    if (v.empty()) return d;
    std::sort(v.begin(), v.end());
    double sum = 0;
    for (double x : v) sum += x;
    d.mean = sum / static_cast<double>(v.size());
    d.p50 = percentile(v, 0.50);
    d.p90 = percentile(v, 0.90);
    d.p99 = percentile(v, 0.99);
    d.max = v.back();
    return d;
}

LevelSummary summarize_level(const std::vector<RequestRecord>& recs, double duration_s,
                             const Slo& slo) {
    LevelSummary s;
    s.requests = static_cast<int64_t>(recs.size());
    s.duration_s = duration_s;
    std::vector<double> ttft, tpot, itl, e2e, headers, wait;
    for (const auto& r : recs) {
        wait.push_back(r.wait_ms);
        if (!r.ok) {
            ++s.errors;
            if (s.error_samples.size() < 5 &&
                std::find(s.error_samples.begin(), s.error_samples.end(), r.error) ==
                    s.error_samples.end())
                s.error_samples.push_back(r.error);
            continue;
        }
        ++s.ok;
        s.input_tokens += r.prompt_tokens;
        s.cached_tokens += r.cached_tokens;
        s.output_tokens += r.output_tokens;
        s.spec_proposed += r.spec_proposed;
        s.spec_accepted += r.spec_accepted;
        ttft.push_back(r.ttft_ms);
        e2e.push_back(r.e2e_ms);
        if (r.headers_ms >= 0) headers.push_back(r.headers_ms);
        if (r.tpot_ms >= 0) tpot.push_back(r.tpot_ms);
        itl.insert(itl.end(), r.itl_ms.begin(), r.itl_ms.end());
        const bool ttft_ok = slo.ttft_ms <= 0 || r.ttft_ms <= slo.ttft_ms;
        const bool tpot_ok = slo.tpot_ms <= 0 || r.tpot_ms < 0 || r.tpot_ms <= slo.tpot_ms;
        if (ttft_ok && tpot_ok) ++s.slo_met;
    }
    if (duration_s > 0) {
        s.output_tok_s = static_cast<double>(s.output_tokens) / duration_s;
        s.total_tok_s = static_cast<double>(s.output_tokens + s.input_tokens) / duration_s;
        s.req_s = static_cast<double>(s.ok) / duration_s;
        s.goodput_req_s = static_cast<double>(s.slo_met) / duration_s;
    }
    s.ttft = summarize(ttft);
    s.tpot = summarize(tpot);
    s.itl = summarize(itl);
    s.e2e = summarize(e2e);
    s.headers = summarize(headers);
    s.wait = summarize(wait);
    return s;
}

nlohmann::json to_json(const Dist& d) {
    return {{"n", d.n},     {"mean", d.mean}, {"p50", d.p50},
            {"p90", d.p90}, {"p99", d.p99},   {"max", d.max}};
}

nlohmann::json to_json(const LevelSummary& s) {
    return {{"label", s.label},
            {"concurrency", s.concurrency},
            {"rate", s.rate},
            {"requests", s.requests},
            {"ok", s.ok},
            {"errors", s.errors},
            {"error_samples", s.error_samples},
            {"duration_s", s.duration_s},
            {"input_tokens", s.input_tokens},
            {"cached_tokens", s.cached_tokens},
            {"output_tokens", s.output_tokens},
            {"spec_proposed", s.spec_proposed},
            {"spec_accepted", s.spec_accepted},
            {"output_tok_s", s.output_tok_s},
            {"total_tok_s", s.total_tok_s},
            {"req_s", s.req_s},
            {"slo_met", s.slo_met},
            {"goodput_req_s", s.goodput_req_s},
            {"ttft_ms", to_json(s.ttft)},
            {"tpot_ms", to_json(s.tpot)},
            {"itl_ms", to_json(s.itl)},
            {"e2e_ms", to_json(s.e2e)},
            {"headers_ms", to_json(s.headers)},
            {"wait_ms", to_json(s.wait)}};
}

nlohmann::json to_json(const RequestRecord& r) {
    nlohmann::json j = {{"index", r.index},
                        {"ok", r.ok},
                        {"status", r.status},
                        {"wait_ms", r.wait_ms},
                        {"headers_ms", r.headers_ms},
                        {"ttft_ms", r.ttft_ms},
                        {"tpot_ms", r.tpot_ms},
                        {"e2e_ms", r.e2e_ms},
                        {"prompt_tokens", r.prompt_tokens},
                        {"cached_tokens", r.cached_tokens},
                        {"output_tokens", r.output_tokens},
                        {"usage_reported", r.usage_reported},
                        {"chunks", r.chunks},
                        {"itl_ms", r.itl_ms}};
    if (!r.ok) j["error"] = r.error;
    return j;
}

}  // namespace warden::tools::bench
