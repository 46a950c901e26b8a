// Cost of the KV integrity checks on decode: 1 and 32 sequences holding 1k-4k tokens of KV
// each, decode steps through the real model with --kv-integrity off / step / layer, modes
// interleaved round-robin in one run so machine drift hits all of them alike. Also the cost
// of --kv-scrub-on-free per freed page.
//
// KV contents are random (attention cost does not depend on the values), so no prefill is
// needed to reach long contexts. Build: cmake -DWARDEN_BENCH=ON; run:
//   build/bench_integrity_overhead -m models/SmolLM2-135M-Instruct.Q4_1.gguf [--rounds R] [--steps
//   S]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>

#include "engine/executor.h"
#include "model/model.h"
#include "model/transformer.h"
#include "util/error.h"

using namespace warden;
using Clock = std::chrono::steady_clock;

namespace {

double pct(std::vector<double> v, double p) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0
                     : v[std::min(v.size() - 1,
                                  static_cast<size_t>(p / 100.0 * static_cast<double>(v.size())))];
}

struct Seq {
    kv::PageTable table;
    int64_t len = 0;
    int32_t last = 1;
};

}  // namespace

int main(int argc, char** argv) {
    std::string model_path;
    int rounds = 5, steps = 8, threads = 0;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto next = [&] { return std::string(i + 1 < argc ? argv[++i] : ""); };
        if (a == "-m")
            model_path = next();
        else if (a == "--rounds")
            rounds = std::stoi(next());
        else if (a == "--steps")
            steps = std::stoi(next());
        else if (a == "--threads")
            threads = std::stoi(next());
        else {
            std::fprintf(stderr, "usage: %s -m MODEL [--rounds R] [--steps S] [--threads N]\n",
                         argv[0]);
            return 2;
        }
    }
    try {
        util::ThreadPool pool(threads);
        model::LoadOptions lo;
        lo.native_weights =
            false;  // bf16 weights (no --weights option), as the documented runs used
        lo.load_tokenizer = false;
        auto model = model::load_model(model_path, lo, pool);
        const auto& c = model->config;
        model::Transformer tf(*model, pool);
        std::printf("model %s: %lld layers, kv heads %lld x %lld, threads %d\n", model_path.c_str(),
                    static_cast<long long>(c.n_layers), static_cast<long long>(c.n_kv_heads),
                    static_cast<long long>(c.head_dim), pool.size());
        std::printf(
            "| sequences | mode | decode tok/s (median) | step time vs off (median of paired "
            "rounds) | step ms p50 | step ms p99 |\n|---|---|---|---|---|---|\n");
        for (int n_seqs : {1, 32}) {
            auto kc = kv::KvCacheConfig::shaped(c.n_layers, c.n_kv_heads, c.head_dim,
                                                tensor::KvType::BF16, 16);
            const int64_t page_bytes = kv::kv_page_bytes(kc);
            const int64_t pages_needed = n_seqs * (4096 + rounds * 3 * steps + 32) / 16 + 8;
            kc.budget_bytes = (pages_needed + 1) * page_bytes;
            kv::KvCache cache(kc);
            // Random KV contents (bf16 in [-1, 1)): values do not change the cost.
            std::mt19937_64 rng(1);
            auto* raw = reinterpret_cast<uint16_t*>(cache.pool().data(kv::kNullPage));
            const size_t n_half =
                static_cast<size_t>((cache.pool().capacity() + 1) * page_bytes / 2);
            for (size_t i = 0; i < n_half; ++i)
                raw[i] = static_cast<uint16_t>(0x3c00 + (rng() & 0x7f)) ^ ((rng() & 1) << 15);
            std::vector<Seq> seqs(static_cast<size_t>(n_seqs));
            for (int i = 0; i < n_seqs; ++i) {
                seqs[static_cast<size_t>(i)].len =
                    1024 + static_cast<int64_t>(rng() % 3073);  // 1k..4k tokens
                if (!cache.reserve(seqs[static_cast<size_t>(i)].table,
                                   seqs[static_cast<size_t>(i)].len + rounds * 3 * steps + 1))
                    throw util::Error("bench: KV budget too small");
            }
            const kv::IntegrityMode modes[] = {kv::IntegrityMode::Off, kv::IntegrityMode::Step,
                                               kv::IntegrityMode::Layer};
            std::vector<double> tps[3], step_ms[3], round_ms[3];
            for (auto& v : round_ms) v.assign(static_cast<size_t>(rounds), 0.0);
            for (int r = 0; r < rounds; ++r) {
                for (int j = 0; j < 3; ++j) {
                    const int mi = (r + j) % 3;  // rotate the order so no mode always runs first
                    double round_total = 0;
                    engine::Executor exec(tf, cache, modes[mi]);
                    for (int s = 0; s < steps; ++s) {
                        engine::StepBatch b;
                        for (auto& q : seqs) {
                            engine::StepSeq ss;
                            ss.tokens = std::span<const int32_t>(&q.last, 1);
                            ss.pos0 = q.len;
                            ss.table = &q.table;
                            b.seqs.push_back(ss);
                        }
                        const auto t0 = Clock::now();
                        const auto res = exec.execute(b);
                        const double ms =
                            std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
                        for (size_t i = 0; i < seqs.size(); ++i) {
                            if (!res.ok[i])
                                throw util::Error("bench: unexpected integrity failure");
                            seqs[i].len += 1;
                        }
                        step_ms[mi].push_back(ms);
                        tps[mi].push_back(1000.0 * n_seqs / ms);
                        round_total += ms;
                    }
                    round_ms[mi][static_cast<size_t>(r)] = round_total;
                }
            }
            // Paired comparison: each round runs every mode back to back, so the ratio of a
            // mode's time to `off`'s within the same round cancels slow drift of the machine.
            for (int mi = 0; mi < 3; ++mi) {
                std::vector<double> ratio;
                for (int r = 0; r < rounds; ++r)
                    ratio.push_back(round_ms[mi][static_cast<size_t>(r)] /
                                        round_ms[0][static_cast<size_t>(r)] -
                                    1.0);
                std::printf("| %d | %s | %.2f | %+.2f%% | %.2f | %.2f |\n", n_seqs,
                            kv::integrity_mode_name(modes[mi]), pct(tps[mi], 50),
                            100.0 * pct(ratio, 50), pct(step_ms[mi], 50), pct(step_ms[mi], 99));
            }
            // Verification cost alone (the check the executor runs once per step per sequence).
            const auto t0 = Clock::now();
            const int reps = 2000;
            int64_t bad = 0;
            for (int k = 0; k < reps; ++k)
                for (auto& q : seqs) bad += cache.verify(kv::SeqId{0}, q.table).has_value();
            const double us =
                std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / reps;
            std::printf("verify all %d tables (%zu pages): %.2f us per step%s\n", n_seqs,
                        static_cast<size_t>(cache.pool().used_pages()), us, bad ? " (FAILED)" : "");
            for (auto& q : seqs) cache.free(q.table);
        }
        // Scrub-on-free: cost of zeroing pages as they are freed.
        {
            auto kc = kv::KvCacheConfig::shaped(c.n_layers, c.n_kv_heads, c.head_dim,
                                                tensor::KvType::BF16, 16);
            const int64_t page_bytes = kv::kv_page_bytes(kc);
            kc.budget_bytes = 513 * page_bytes;
            for (bool scrub : {false, true}) {
                kc.scrub_on_free = scrub;
                kv::KvCache cache(kc);
                std::vector<double> us;
                for (int r = 0; r < 20; ++r) {
                    kv::PageTable t;
                    cache.reserve(t, 512 * 16);
                    for (const auto& p : t.pages)
                        std::memset(cache.pool().data(p.page), 1, static_cast<size_t>(page_bytes));
                    const auto t0 = Clock::now();
                    cache.free(t);
                    us.push_back(
                        std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / 512);
                }
                std::printf("free one page (%lld bytes)%s: %.2f us (median of 20 x 512 pages)\n",
                            static_cast<long long>(page_bytes), scrub ? " with scrub" : "",
                            pct(us, 50));
            }
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench: error: %s\n", e.what());
        return 1;
    }
    return 0;
}
