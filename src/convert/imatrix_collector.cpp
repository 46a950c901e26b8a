#include "convert/imatrix_collector.h"

#include <cmath>
#include <cstring>

#include "formats/gguf_writer.h"
#include "util/error.h"

namespace warden::convert {

void ImatrixCollector::add(const model::Matrix& m, const std::string& name, int64_t index,
                           int64_t n_mat) {
    if (m.rows() == 0) return;  // absent (an MLA model's GQA matrices, no shared experts, ...)
    Entry& e = entries_[name];
    if (e.sums.empty()) {
        e.cols = m.cols();
        e.n_mat = n_mat;
        e.sums.assign(static_cast<size_t>(n_mat * m.cols()), 0.0);
        e.counts.assign(static_cast<size_t>(n_mat), 0.0);
    }
    util::check(e.cols == m.cols() && e.n_mat == n_mat,
                "imatrix: '" + name + "' matrices of different widths");
    slots_[&m] = Slot{&e, index};
}

ImatrixCollector::ImatrixCollector(const model::Model& m, bool process_output) {
    // The loader makes a tied head (or a missing one) an alias of token_embd: the same bytes.
    if (process_output && !m.weights.output.shares_weights_with(m.weights.token_embd))
        add(m.weights.output, "output.weight");
    const auto& layers = m.weights.layers;
    for (size_t l = 0; l < layers.size(); ++l) {
        const model::LayerWeights& L = layers[l];
        const std::string p = "blk." + std::to_string(l) + ".";
        if (L.mla) {
            const model::MlaWeights& a = *L.mla;
            add(a.wq, p + "attn_q.weight");
            add(a.wq_a, p + "attn_q_a.weight");
            add(a.wq_b, p + "attn_q_b.weight");
            add(a.wkv_a, p + "attn_kv_a_mqa.weight");
            add(a.wo, p + "attn_output.weight");
        } else {
            add(L.wq, p + "attn_q.weight");
            add(L.wk, p + "attn_k.weight");
            add(L.wv, p + "attn_v.weight");
            add(L.wo, p + "attn_output.weight");
        }
        if (L.moe) {
            const model::MoeWeights& e = *L.moe;
            add(e.router, p + "ffn_gate_inp.weight");
            const auto n = static_cast<int64_t>(e.gate.size());
            for (int64_t x = 0; x < n; ++x) {
                const auto u = static_cast<size_t>(x);
                add(e.gate[u], p + "ffn_gate_exps.weight", x, n);
                add(e.up[u], p + "ffn_up_exps.weight", x, n);
                add(e.down[u], p + "ffn_down_exps.weight", x, n);
            }
            add(e.shared_gate, p + "ffn_gate_shexp.weight");
            add(e.shared_up, p + "ffn_up_shexp.weight");
            add(e.shared_down, p + "ffn_down_shexp.weight");
        } else {
            add(L.w_gate, p + "ffn_gate.weight");
            add(L.w_up, p + "ffn_up.weight");
            add(L.w_down, p + "ffn_down.weight");
        }
    }
}

void ImatrixCollector::observe(const model::Matrix& m, const float* x, int64_t n_rows) {
    const auto it = slots_.find(&m);
    if (it == slots_.end() || n_rows <= 0) return;
    Entry& e = *it->second.entry;
    double* s = e.sums.data() + it->second.index * e.cols;
    for (int64_t r = 0; r < n_rows; ++r) {
        const float* row = x + r * e.cols;
        for (int64_t c = 0; c < e.cols; ++c)
            s[c] += static_cast<double>(row[c]) * static_cast<double>(row[c]);
    }
    e.counts[static_cast<size_t>(it->second.index)] += static_cast<double>(n_rows);
}

quant::Imatrix ImatrixCollector::importance(int32_t chunks, const std::string& dataset) const {
    // Through the same f32 values write_gguf stores, so that this equals reading the file back.
    quant::Imatrix m;
    m.chunks = chunks;
    m.dataset = dataset;
    for (const auto& [name, e] : entries_) {
        std::vector<float> v(e.sums.size());
        for (int64_t j = 0; j < e.n_mat; ++j) {
            const auto cnt = static_cast<float>(e.counts[static_cast<size_t>(j)]);
            for (int64_t c = 0; c < e.cols; ++c) {
                const auto k = static_cast<size_t>(j * e.cols + c);
                v[k] = quant::mean_square_importance(static_cast<float>(e.sums[k]), cnt);
            }
        }
        m.entries.emplace(name, std::move(v));
    }
    return m;
}

void ImatrixCollector::write_gguf(const std::string& path, const std::vector<std::string>& datasets,
                                  int64_t chunks, int64_t chunk_size) const {
    util::check(chunks >= 0 && chunks <= UINT32_MAX && chunk_size > 0 && chunk_size <= UINT32_MAX,
                "imatrix: chunk count / size out of range");
    formats::GGUFWriter w;
    w.set_string("general.type", "imatrix");
    w.set_string_array("imatrix.datasets", datasets);
    w.set_u32("imatrix.chunk_count", static_cast<uint32_t>(chunks));
    w.set_u32("imatrix.chunk_size", static_cast<uint32_t>(chunk_size));
    const auto f32 = [](const std::vector<double>& v) {
        std::vector<uint8_t> b(v.size() * 4);
        for (size_t i = 0; i < v.size(); ++i) {
            const auto f = static_cast<float>(v[i]);
            util::check(std::isfinite(f),
                        "imatrix: a non-finite sum of squares (activations overflow f32)");
            std::memcpy(b.data() + i * 4, &f, 4);
        }
        return b;
    };
    for (const auto& [name, e] : entries_) {
        w.add_tensor(name + ".in_sum2", {e.cols, e.n_mat}, tensor::GgmlType::F32, f32(e.sums));
        w.add_tensor(name + ".counts", {1, e.n_mat}, tensor::GgmlType::F32, f32(e.counts));
    }
    w.write(path);
}

}  // namespace warden::convert
