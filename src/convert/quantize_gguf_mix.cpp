// `warden quantize --weights q4_k_m` and the other K-quant file types (convert/quantize_model.h).
#include <algorithm>
#include <map>
#include <optional>

#include "convert/quantize_model.h"
#include "formats/gguf_file.h"
#include "formats/gguf_writer.h"
#include "formats/tensor_source.h"
#include "model/gguf_native_weights.h"
#include "model/model_config.h"
#include "quant/ggml_block_quantizer.h"
#include "tensor/float_convert.h"
#include "util/error.h"

namespace warden::convert {

QuantizeStats quantize_gguf_mix(const std::string& in, const std::string& out,
                                const GgufTypeMix& mix, util::ThreadPool& pool,
                                const quant::Imatrix* imatrix) {
    formats::GGUFFile src(in);
    const model::ModelConfig cfg = model::config_from_gguf(src);
    formats::GGUFWriter w;
    // A source written by `warden quantize --weights int4...` declares its runtime format; the
    // K-quant output has none (each matrix runs in its own block type).
    for (const auto& [k, v] : src.metadata())
        if (k != model::kGgufDeclaredWeightsKey) w.set(k, v);
    w.set_u32("general.file_type", mix.ftype);
    w.set_u32("general.quantization_version", 2);

    std::vector<const formats::GGUFTensor*> quantized;
    bool has_output = false;
    for (const auto& t : src.tensors()) {
        if (t.name == "output.weight") has_output = true;
        if ((model::is_layer_matrix(t, cfg.n_layers) && t.shape.size() <= 3) ||
            (t.shape.size() == 2 && is_embedding_weight(t.name)))
            quantized.push_back(&t);
    }
    const std::vector<tensor::GgmlType> types =
        choose_gguf_types(mix, quantized, cfg.n_layers, cfg.moe.n_experts, has_output);
    std::map<const formats::GGUFTensor*, tensor::GgmlType> type_of;
    for (size_t i = 0; i < quantized.size(); ++i) type_of[quantized[i]] = types[i];

    QuantizeStats st;
    std::map<tensor::GgmlType, int64_t> counts;
    for (const auto& t : src.tensors()) {
        st.bytes_in += static_cast<int64_t>(t.n_bytes);
        const auto it = type_of.find(&t);
        if (it == type_of.end()) {
            w.add_tensor_view(t.name, t.shape, t.type, t.data);
            st.bytes_out += static_cast<int64_t>(t.n_bytes);
            ++st.tensors_copied;
            continue;
        }
        const tensor::GgmlType type = it->second;
        ++counts[type];
        const int64_t cols = t.shape[0], rows_per = t.shape[1],
                      n_mat = t.shape.size() == 3 ? t.shape[2] : 1;
        const int64_t rows = rows_per * n_mat;
        const std::string what =
            "'" + in + "': tensor '" + t.name + "' as " + tensor::ggml_type_name(type) + ": ";
        const std::vector<const float*> importance =
            matrix_importance(imatrix, t.name, n_mat, cols, what);
        if (importance[0]) ++st.imatrix_weighted;
        const int64_t out_row = tensor::ggml_row_bytes(type, cols);
        if (type == tensor::GgmlType::F16) {
            // Rows no block type divides: f16, as llama-quantize writes them.
            w.add_tensor(t.name, t.shape, type, [&t, rows, cols, out_row] {
                const formats::SourceTensor s = formats::SourceTensor::from(t);
                std::vector<uint8_t> data(static_cast<size_t>(rows * out_row));
                std::vector<float> row(static_cast<size_t>(cols));
                for (int64_t r = 0; r < rows; ++r) {
                    s.row_to_f32(r, row.data());
                    auto* dst = reinterpret_cast<tensor::f16_t*>(data.data() + r * out_row);
                    for (int64_t c = 0; c < cols; ++c) dst[c] = tensor::f32_to_f16(row[c]);
                }
                return data;
            });
        } else {
            w.add_tensor(t.name, t.shape, type,
                         [&t, &pool, type, rows, rows_per, cols, out_row, what, importance] {
                             const formats::SourceTensor s = formats::SourceTensor::from(t);
                             std::vector<uint8_t> data(static_cast<size_t>(rows * out_row), 0);
                             try {
                                 pool.parallel_for(rows, 4, [&](int64_t r0, int64_t r1) {
                                     // Up to four rows of one matrix at a time: their
                                     // statistics are computed side by side.
                                     constexpr int64_t kBatch = 4;
                                     std::vector<float> batch(static_cast<size_t>(kBatch * cols));
                                     for (int64_t r = r0; r < r1;) {
                                         const int64_t m =
                                             std::min({kBatch, r1 - r, rows_per - r % rows_per});
                                         for (int64_t k = 0; k < m; ++k)
                                             s.row_to_f32(r + k, batch.data() + k * cols);
                                         quant::quantize_ggml_rows(
                                             type, batch.data(), m, cols,
                                             importance[static_cast<size_t>(r / rows_per)],
                                             data.data() + r * out_row);
                                         r += m;
                                     }
                                 });
                             } catch (const util::Error& e) {
                                 throw util::Error(what + e.what());
                             }
                             return data;
                         });
        }
        st.bytes_out += rows * out_row;
        ++st.tensors_quantized;
    }
    for (const auto& [type, n] : counts)
        st.types += (st.types.empty() ? "" : ", ") + tensor::ggml_type_name(type) + " x" +
                    std::to_string(n);
    w.write(out);
    return st;
}

}  // namespace warden::convert
