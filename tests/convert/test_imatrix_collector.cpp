// `warden imatrix`'s collector (convert/imatrix_collector.h): what it sums is each layer matrix's
// input. Layer 0's q/k/v input is computed here from the weights alone (the normed embeddings),
// independently of the transformer; matrices that share an input (q/k/v, gate/up) get equal
// entries; every dense matrix counts every token, routed experts exactly the tokens routed to
// them; and the GGUF it writes reads back through quant/imatrix.h to the same importances.
// Agreement with llama.cpp's llama-imatrix on a real model is a measurement in
// docs/WEIGHT_QUANT.md (bench/imatrix_compare.py), not a test: CI has no llama.cpp.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

#include "convert/imatrix_collector.h"
#include "convert/quantize_ct.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "model/transformer.h"
#include "quant/imatrix.h"
#include "tensor/weight_format.h"
#include "test_paths.h"
#include "util/thread_pool.h"

namespace warden::quant {
namespace {

using tensor::parse_weight_format;

std::unique_ptr<model::Model> load(const std::string& path, util::ThreadPool& pool) {
    model::LoadOptions o;
    o.dtype = model::RuntimeDType::F32;
    o.load_tokenizer = false;
    return model::load_model(path, o, pool);
}

// Runs `tokens` through the model with `col` observing (one sequence from position 0).
void collect(const model::Model& m, model::ActivationObserver& col,
             const std::vector<int32_t>& tokens, util::ThreadPool& pool) {
    model::Transformer tf(m, pool);
    tf.set_observer(&col);
    model::ContiguousKvCache cache(m.config, static_cast<int64_t>(tokens.size()),
                                   tensor::KvType::F32);
    tf.forward(tokens.data(), static_cast<int64_t>(tokens.size()), cache, nullptr, false);
}

std::vector<int32_t> some_tokens(int64_t n, int64_t vocab) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
        t[static_cast<size_t>(i)] = static_cast<int32_t>((i * 37 + 11) % vocab);
    return t;
}

const std::vector<float>& entry(const Imatrix& m, const std::string& name) {
    const auto it = m.entries.find(name);
    if (it == m.entries.end()) throw std::runtime_error("no entry " + name);
    return it->second;
}

TEST(ImatrixCollector, DenseModelSumsEachMatrixsInput) {
    util::ThreadPool pool(2);
    const auto m = load(test::golden_model("tiny-llama.gguf"), pool);
    const auto& c = m->config;
    const std::vector<int32_t> toks = some_tokens(40, c.vocab_size);
    convert::ImatrixCollector col(*m);
    collect(*m, col, toks, pool);
    const Imatrix imp = col.importance(1, "t");
    ASSERT_EQ(col.entries().size(), static_cast<size_t>(7 * c.n_layers));
    for (const auto& [name, e] : col.entries()) {
        EXPECT_EQ(e.n_mat, 1) << name;
        EXPECT_EQ(e.counts, std::vector<double>{40.0}) << name;
    }
    for (int64_t l = 0; l < c.n_layers; ++l) {
        const std::string p = "blk." + std::to_string(l) + ".";
        EXPECT_EQ(entry(imp, p + "attn_q.weight"), entry(imp, p + "attn_k.weight"));
        EXPECT_EQ(entry(imp, p + "attn_q.weight"), entry(imp, p + "attn_v.weight"));
        EXPECT_EQ(entry(imp, p + "ffn_gate.weight"), entry(imp, p + "ffn_up.weight"));
        EXPECT_EQ(entry(imp, p + "ffn_down.weight").size(), static_cast<size_t>(c.d_ff));
        EXPECT_NE(entry(imp, p + "attn_q.weight"),
                  entry(imp, p + "ffn_up.weight"));  // other inputs
    }
    // Layer 0's attention input, from the weights alone: mean over tokens of
    // (x / rms(x) * attn_norm)^2, x the token's embedding row.
    const int64_t d = c.d_model;
    std::vector<double> want(static_cast<size_t>(d), 0.0);
    std::vector<float> x(static_cast<size_t>(d));
    for (int32_t t : toks) {
        m->weights.token_embd.row_f32(t, x.data());
        double ss = 0.0;
        for (float v : x) ss += static_cast<double>(v) * v;
        const double inv =
            1.0 / std::sqrt(ss / static_cast<double>(d) + static_cast<double>(c.rms_eps));
        for (int64_t i = 0; i < d; ++i) {
            const double y = x[static_cast<size_t>(i)] * inv *
                             m->weights.layers[0].attn_norm[static_cast<size_t>(i)];
            want[static_cast<size_t>(i)] += y * y / static_cast<double>(toks.size());
        }
    }
    const auto& got = entry(imp, "blk.0.attn_q.weight");
    for (int64_t i = 0; i < d; ++i)
        EXPECT_NEAR(got[static_cast<size_t>(i)], want[static_cast<size_t>(i)],
                    1e-5 * want[static_cast<size_t>(i)] + 1e-12)
            << i;

    // Written as llama.cpp's GGUF imatrix and read back: the same importances, bit for bit.
    const std::string path = (std::filesystem::temp_directory_path() /
                              ("warden_imc_" + std::to_string(::getpid()) + ".gguf"))
                                 .string();
    col.write_gguf(path, {"calib.txt"}, 3, 40);
    const Imatrix back = read_imatrix(path);
    std::filesystem::remove(path);
    EXPECT_EQ(back.entries, col.importance(3, "calib.txt").entries);
    EXPECT_EQ(back.chunks, 3);
    EXPECT_EQ(back.dataset, "calib.txt");
    // A second run adds to the sums: twice the same tokens, the same means and twice the counts.
    collect(*m, col, toks, pool);
    EXPECT_EQ(col.entries().at("blk.1.ffn_down.weight").counts, std::vector<double>{80.0});
    const auto again = col.importance(2, "t");
    for (size_t i = 0; i < got.size(); ++i)
        EXPECT_NEAR(entry(again, "blk.0.attn_q.weight")[i], got[i], 1e-6 * got[i]);
}

// Passes every observation on to the collector and keeps the rows of one matrix.
struct Recorder final : model::ActivationObserver {
    convert::ImatrixCollector& col;
    const model::Matrix* watch;
    std::vector<float> rows;
    Recorder(convert::ImatrixCollector& c, const model::Matrix* w) : col(c), watch(w) {}
    void observe(const model::Matrix& m, const float* x, int64_t n) override {
        if (&m == watch) rows.insert(rows.end(), x, x + n * m.cols());
        col.observe(m, x, n);
    }
};

TEST(ImatrixCollector, RoutedExpertsCountTheirTokens) {
    const std::string dir = test::golden_model("tiny-qwen3-moe");
    if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << "no tiny-qwen3-moe";
    util::ThreadPool pool(2);
    const auto m = load(dir, pool);
    const auto& c = m->config;
    const int64_t n = 24;
    convert::ImatrixCollector col(*m);
    collect(*m, col, some_tokens(n, c.vocab_size), pool);
    // Layers 0 and 2 are MoE (8 experts, top 3), layer 1 dense.
    for (int l : {0, 2}) {
        const std::string p = "blk." + std::to_string(l) + ".";
        const auto& up = col.entries().at(p + "ffn_up_exps.weight");
        EXPECT_EQ(up.n_mat, c.moe.n_experts);
        EXPECT_EQ(std::accumulate(up.counts.begin(), up.counts.end(), 0.0),
                  static_cast<double>(n * c.moe.top_k));
        EXPECT_EQ(col.entries().at(p + "ffn_gate_exps.weight").counts, up.counts);
        EXPECT_EQ(col.entries().at(p + "ffn_down_exps.weight").counts, up.counts);
        EXPECT_EQ(col.entries().at(p + "ffn_gate_inp.weight").counts,
                  std::vector<double>{static_cast<double>(n)});
        EXPECT_EQ(col.entries().at(p + "ffn_down_exps.weight").cols, c.moe.d_expert);
        EXPECT_FALSE(col.entries().contains(p + "ffn_up.weight"));
        // Stacked entries serve --imatrix per expert ("name[e]"), as llama-imatrix's do.
        const Imatrix imp = col.importance(1, "t");
        for (int64_t e = 0; e < c.moe.n_experts; ++e)
            EXPECT_NE(imp.find(p + "ffn_up_exps.weight[" + std::to_string(e) + "]", c.d_model),
                      nullptr);
    }
    EXPECT_EQ(col.entries().at("blk.1.ffn_up.weight").counts,
              std::vector<double>{static_cast<double>(n)});
    // Each token reaches top_k experts with the router's input row: over the experts, the gate and
    // up sums are top_k times the router's.
    for (int l : {0, 2}) {
        const std::string p = "blk." + std::to_string(l) + ".";
        const auto& r = col.entries().at(p + "ffn_gate_inp.weight");
        for (const char* w : {"ffn_gate_exps.weight", "ffn_up_exps.weight"}) {
            const auto& e = col.entries().at(p + w);
            for (int64_t i = 0; i < c.d_model; ++i) {
                double sum = 0.0;
                for (int64_t x = 0; x < e.n_mat; ++x)
                    sum += e.sums[static_cast<size_t>(x * e.cols + i)];
                EXPECT_NEAR(sum, static_cast<double>(c.moe.top_k) * r.sums[static_cast<size_t>(i)],
                            1e-9 * sum + 1e-12)
                    << w << " " << i;
            }
        }
    }
    // An expert's down_proj input is silu(gate x) * up x of the rows routed to it: recompute it
    // from the rows its gate_proj saw and the expert's weights.
    const model::MoeWeights& moe = *m->weights.layers[0].moe;
    size_t ex = 0;
    while (ex < moe.gate.size() && col.entries().at("blk.0.ffn_up_exps.weight").counts[ex] == 0)
        ++ex;
    ASSERT_LT(ex, moe.gate.size());
    convert::ImatrixCollector col2(*m);
    Recorder rec(col2, &moe.gate[ex]);
    collect(*m, rec, some_tokens(n, c.vocab_size), pool);
    const int64_t de = c.moe.d_expert, d = c.d_model,
                  rows = static_cast<int64_t>(rec.rows.size()) / d;
    ASSERT_EQ(static_cast<double>(rows),
              col2.entries().at("blk.0.ffn_down_exps.weight").counts[ex]);
    std::vector<double> want(static_cast<size_t>(de), 0.0);
    std::vector<float> g(static_cast<size_t>(d)), u(static_cast<size_t>(d));
    for (int64_t j = 0; j < de; ++j) {
        moe.gate[ex].row_f32(j, g.data());
        moe.up[ex].row_f32(j, u.data());
        for (int64_t t = 0; t < rows; ++t) {
            double a = 0.0, b = 0.0;
            for (int64_t i = 0; i < d; ++i) {
                a += static_cast<double>(rec.rows[static_cast<size_t>(t * d + i)]) *
                     g[static_cast<size_t>(i)];
                b += static_cast<double>(rec.rows[static_cast<size_t>(t * d + i)]) *
                     u[static_cast<size_t>(i)];
            }
            const double h = a / (1.0 + std::exp(-a)) * b;
            want[static_cast<size_t>(j)] += h * h;
        }
    }
    const auto& down = col2.entries().at("blk.0.ffn_down_exps.weight");
    for (int64_t j = 0; j < de; ++j)
        EXPECT_NEAR(down.sums[static_cast<size_t>(static_cast<int64_t>(ex) * de + j)],
                    want[static_cast<size_t>(j)], 1e-4 * want[static_cast<size_t>(j)] + 1e-9)
            << j;
}

TEST(ImatrixCollector, MlaProjectionsAndSharedExperts) {
    const std::string dir = test::golden_model("tiny-deepseek-v3");
    if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << "no tiny-deepseek-v3";
    util::ThreadPool pool(2);
    const auto m = load(dir, pool);
    convert::ImatrixCollector col(*m);
    collect(*m, col, some_tokens(20, m->config.vocab_size), pool);
    for (const char* n : {"attn_q_a", "attn_q_b", "attn_kv_a_mqa", "attn_output"})
        for (int l = 0; l < 3; ++l) {
            const std::string name = "blk." + std::to_string(l) + "." + n + ".weight";
            ASSERT_TRUE(col.entries().contains(name)) << name;
            EXPECT_EQ(col.entries().at(name).counts, std::vector<double>{20.0}) << name;
        }
    EXPECT_EQ(col.entries().at("blk.0.attn_q_b.weight").cols, m->config.mla.q_lora_rank);
    EXPECT_FALSE(col.entries().contains("blk.0.attn_q.weight"));
    EXPECT_FALSE(col.entries().contains("blk.0.ffn_up_exps.weight"));  // first_k_dense_replace 1
    EXPECT_EQ(col.entries().at("blk.1.ffn_up_shexp.weight").counts, std::vector<double>{20.0});
    EXPECT_EQ(col.entries().at("blk.1.ffn_up_exps.weight").n_mat, 8);
}

// The names the collector gives a Hugging Face checkpoint's matrices are the ones `warden quantize`
// looks up for it (via formats/gguf_names.h): every matrix the compressed-tensors writer packs,
// routed and shared experts and MLA projections included, finds its entry.
TEST(ImatrixCollector, EveryMatrixTheWriterPacksFindsItsEntry) {
    for (const char* name : {"tiny-qwen3-moe", "tiny-deepseek-v3-qproj"}) {
        const std::string dir = test::golden_model(name);
        if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << "no " << name;
        util::ThreadPool pool(2);
        const auto m = load(dir, pool);
        convert::ImatrixCollector col(*m);
        collect(*m, col, some_tokens(16, m->config.vocab_size), pool);
        const Imatrix imp = col.importance(1, "t");
        const std::string out = (std::filesystem::temp_directory_path() /
                                 ("warden_imc_ct_" + std::to_string(::getpid()) + "_" + name))
                                    .string();
        const auto st = convert::quantize_hf_compressed_tensors(
            dir, out, parse_weight_format("int4"), false, pool, std::nullopt, &imp);
        std::filesystem::remove_all(out);
        EXPECT_GT(st.tensors_quantized, 50) << name;
        EXPECT_EQ(st.imatrix_weighted, st.tensors_quantized) << name;
    }
}

// --process-output: the head's entry is "output.weight" over every row whose logits are computed.
// The observed rows are the head's input: multiplied by the head they give the logits the forward
// step returned, and each is an RMS-normed row under output_norm (sum of (h / g)^2 = d). A head
// tied to the embeddings is not collected (llama-imatrix skips token_embd.weight).
TEST(ImatrixCollector, ProcessOutputSumsTheHeadsInput) {
    util::ThreadPool pool(2);
    const auto m = load(test::golden_model("tiny-llama.gguf"), pool);  // its own output.weight
    const auto& c = m->config;
    const int64_t n = 24, d = c.d_model, vocab = c.vocab_size;
    const std::vector<int32_t> toks = some_tokens(n, vocab);
    EXPECT_EQ(convert::ImatrixCollector(*m).entries().count("output.weight"),
              0u);  // off by default
    convert::ImatrixCollector col(*m, true);
    ASSERT_EQ(col.entries().size(), static_cast<size_t>(7 * c.n_layers + 1));
    Recorder rec(col, &m->weights.output);
    model::Transformer tf(*m, pool);
    tf.set_observer(&rec);
    model::ContiguousKvCache cache(c, n, tensor::KvType::F32);
    std::vector<float> logits(static_cast<size_t>(n * vocab));
    tf.forward(toks.data(), n, cache, logits.data(), true);
    ASSERT_EQ(rec.rows.size(), static_cast<size_t>(n * d));
    const convert::ImatrixCollector::Entry& e = col.entries().at("output.weight");
    EXPECT_EQ(e.counts, std::vector<double>{static_cast<double>(n)});
    std::vector<double> sums(static_cast<size_t>(d), 0.0);
    std::vector<float> w(static_cast<size_t>(d));
    for (int64_t t = 0; t < n; ++t) {
        const float* h = rec.rows.data() + t * d;
        double normed = 0.0;
        for (int64_t j = 0; j < d; ++j) {
            sums[static_cast<size_t>(j)] += static_cast<double>(h[j]) * h[j];
            const double u = h[j] / m->weights.output_norm[static_cast<size_t>(j)];
            normed += u * u;
        }
        EXPECT_NEAR(normed, static_cast<double>(d), 1e-3 * static_cast<double>(d)) << t;
        for (int64_t v = 0; v < vocab; v += 7) {
            m->weights.output.row_f32(v, w.data());
            double dot = 0.0;
            for (int64_t j = 0; j < d; ++j)
                dot += static_cast<double>(w[static_cast<size_t>(j)]) * h[j];
            EXPECT_NEAR(logits[static_cast<size_t>(t * vocab + v)], dot,
                        1e-4 + 1e-4 * std::fabs(dot))
                << t << " " << v;
        }
    }
    for (int64_t j = 0; j < d; ++j)
        EXPECT_NEAR(e.sums[static_cast<size_t>(j)], sums[static_cast<size_t>(j)],
                    1e-9 * sums[static_cast<size_t>(j)] + 1e-12);

    const std::string tied = test::golden_model("tiny-qwen3");
    if (!std::filesystem::exists(tied + "/config.json")) GTEST_SKIP() << "no tiny-qwen3";
    const auto mt = load(tied, pool);
    ASSERT_TRUE(mt->config.tied_embeddings);
    EXPECT_EQ(convert::ImatrixCollector(*mt, true).entries().count("output.weight"), 0u);
}

}  // namespace
}  // namespace warden::quant
