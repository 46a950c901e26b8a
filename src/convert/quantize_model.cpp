#include "convert/quantize_model.h"

#include <cstring>
#include <optional>

#include "formats/gguf_file.h"
#include "formats/gguf_writer.h"
#include "formats/tensor_source.h"
#include "model/gguf_native_weights.h"
#include "model/model_config.h"
#include "quant/quantizer.h"
#include "util/error.h"

namespace warden::convert {

std::vector<const float*> matrix_importance(const quant::Imatrix* imatrix, const std::string& name,
                                            int64_t n_mat, int64_t cols, const std::string& what) {
    std::vector<const float*> importance(static_cast<size_t>(n_mat), nullptr);
    if (!imatrix) return importance;
    try {
        for (int64_t e = 0; e < n_mat; ++e)
            importance[static_cast<size_t>(e)] =
                imatrix->find(n_mat == 1 ? name : name + "[" + std::to_string(e) + "]", cols);
    } catch (const util::Error& e) {
        throw util::Error(what + e.what());
    }
    return importance;
}

bool is_embedding_weight(const std::string& name) {
    return name == "token_embd.weight" || name == "output.weight" ||
           name == "model.embed_tokens.weight" || name == "lm_head.weight";
}

QuantizeStats quantize_gguf(const std::string& in, const std::string& out,
                            const tensor::WeightFormat& f, const HeadOptions& head,
                            util::ThreadPool& pool, const quant::Imatrix* imatrix) {
    // A format with a GGUF block type, or a clear error naming what asked for it.
    const auto gguf_type = [](const tensor::WeightFormat& w, const char* what) {
        if (!w.quantized() || w.type == tensor::WeightType::FP8)
            throw util::Error(std::string(what) +
                              ": GGUF output needs an int4 or int8 format (fp8/bf16 have no GGUF "
                              "block type here), got '" +
                              tensor::weight_format_name(w) + "'");
        try {
            return quant::ggml_type_for(kernels::weight_layout(w, 32, w.group ? w.group : 32));
        } catch (const util::Error& e) {
            throw util::Error(std::string(what) + " '" + tensor::weight_format_name(w) +
                              "': " + e.what());
        }
    };
    const tensor::GgmlType out_type = gguf_type(f, "--weights");
    if (head.mode == HeadOptions::Mode::Format) gguf_type(head.format, "--head-weights");
    const std::optional<tensor::WeightFormat> default_head = tensor::default_head_format(f);
    formats::GGUFFile src(in);
    formats::GGUFWriter w;
    for (const auto& [k, v] : src.metadata()) w.set(k, v);
    // llama_ftype: MOSTLY_Q4_0 = 2, MOSTLY_Q4_1 = 3, MOSTLY_Q8_0 = 7.
    w.set_u32("general.file_type", out_type == tensor::GgmlType::Q4_0
                                       ? 2u
                                       : (out_type == tensor::GgmlType::Q4_1 ? 3u : 7u));
    w.set_u32("general.quantization_version", 2);
    // The runtime format the blocks were written from, which loading without --weights uses: the
    // block types alone cannot tell int4-g128 (four Q4_0 blocks sharing a scale) from int4-g32
    // without reading every row (model/gguf_native_weights.h).
    tensor::WeightFormat stored = f;
    stored.act_f32 = false;  // a kernel choice (-a16), not part of the stored blocks
    w.set_string(std::string(model::kGgufDeclaredWeightsKey), tensor::weight_format_name(stored));
    // The layers the model runs, for the matrices --weights applies to at load (attention, MLP,
    // MLA projections, shared and stacked routed experts; not routers, MLA's kv_b, MTP blocks).
    const model::ModelConfig cfg = model::config_from_gguf(src);
    const int64_t n_layers = cfg.n_layers;
    // A bf16 token_embd that is not the head is looked up as stored at load, so by default it is
    // copied: the file holds what runs.
    const bool embd_copied = model::gguf_bf16_lookup_table(src, cfg);
    QuantizeStats st;
    for (const auto& t : src.tensors()) {
        st.bytes_in += static_cast<int64_t>(t.n_bytes);
        // The format this tensor is written in; unset: copied.
        std::optional<tensor::WeightFormat> fmt;
        if (model::is_layer_matrix(t, n_layers) && t.shape.size() <= 3) {
            fmt = f;
        } else if (t.shape.size() == 2 && is_embedding_weight(t.name)) {
            if (head.mode == HeadOptions::Mode::Format)
                fmt = head.format;
            else if (head.mode == HeadOptions::Mode::Default && tensor::ggml_is_float(t.type) &&
                     !(embd_copied && t.name == "token_embd.weight"))
                fmt = default_head;
            if (fmt) {
                tensor::WeightFormat named = *fmt;
                named.act_f32 = false;
                st.heads += (st.heads.empty() ? "" : ", ") + t.name.substr(0, t.name.find('.')) +
                            " as " + tensor::weight_format_name(named);
            }
        }
        // Bytes are made as the writer reaches each tensor (one tensor in memory, not the model);
        // every check that can fail before a row is quantized runs here, before anything is
        // written.
        if (!fmt) {
            w.add_tensor_view(t.name, t.shape, t.type,
                              t.data);  // the source stays mapped until written
            st.bytes_out += static_cast<int64_t>(t.n_bytes);
            ++st.tensors_copied;
            continue;
        }
        // A stacked [n_expert, rows, cols] tensor (ggml shape [cols, rows, n_expert]) is quantized
        // row by row like a matrix of n_expert x rows rows; the loader slices it per expert.
        const int64_t cols = t.shape[0], rows_per = t.shape[1],
                      n_mat = t.shape.size() == 3 ? t.shape[2] : 1;
        const int64_t rows = rows_per * n_mat;
        const kernels::WeightMatrix layout = kernels::weight_layout(*fmt, rows, cols);
        // By value: the producer runs after this iteration's locals are gone.
        const std::string what =
            "'" + in + "': tensor '" + t.name + "' as " + tensor::weight_format_name(*fmt) + ": ";
        try {
            kernels::check_quant_shape(layout);
        } catch (const util::Error& e) {
            throw util::Error(what + e.what());
        }
        const tensor::GgmlType tensor_type = quant::ggml_type_for(layout);
        const int64_t in_row = tensor::ggml_row_bytes(t.type, cols),
                      out_row = tensor::ggml_row_bytes(tensor_type, cols);
        const std::vector<const float*> importance =
            matrix_importance(imatrix, t.name, n_mat, cols, what);
        if (importance[0]) ++st.imatrix_weighted;
        w.add_tensor(t.name, t.shape, tensor_type,
                     [&t, &pool, layout, rows, rows_per, cols, in_row, out_row, what, importance] {
                         const formats::SourceTensor s = formats::SourceTensor::from(t);
                         std::vector<uint8_t> data(static_cast<size_t>(rows * out_row), 0);
                         try {
                             pool.parallel_for(rows, 16, [&](int64_t r0, int64_t r1) {
                                 std::vector<float> row(static_cast<size_t>(cols));
                                 for (int64_t r = r0; r < r1; ++r) {
                                     auto qr = quant::import_ggml_row(t.type, t.data + r * in_row,
                                                                      layout);
                                     if (!qr) {
                                         s.row_to_f32(r, row.data());
                                         qr = quant::default_quantizer().quantize_row(
                                             layout, row.data(),
                                             importance[static_cast<size_t>(r / rows_per)]);
                                     }
                                     quant::export_ggml_row(layout, *qr, data.data() + r * out_row);
                                 }
                             });
                         } catch (const util::Error& e) {
                             throw util::Error(what + e.what());
                         }
                         return data;
                     });
        st.bytes_out += rows * out_row;
        ++st.tensors_quantized;
    }
    w.write(out);
    return st;
}

}  // namespace warden::convert
