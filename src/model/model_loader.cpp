
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>

#include "formats/compressed_tensors.h"
#include "formats/fp8_block.h"
#include "formats/gguf_file.h"
#include "formats/gguf_names.h"
#include "formats/safetensors_file.h"
#include "formats/tensor_source.h"
#include "kernels/matmul_bf16_tiles.h"
#include "kernels/matmul_kquant.h"
#include "kernels/ops.h"
#include "model/deferred_layouts.h"
#include "model/gguf_native_weights.h"
#include "model/mla.h"
#include "model/model.h"
#include "model/moe.h"
#include "model/prefetch_order.h"
#include "quant/quantizer.h"
#include "tensor/float_convert.h"
#include "tensor/ggml_types.h"
#include "util/error.h"
#include "util/huge_page_arena.h"
#include "util/json_file.h"
#include "util/mapped_file.h"
#include "util/phase_timer.h"

namespace warden::model {

using util::Error;

Model::Model() = default;
Model::~Model() = default;

void Model::wait_for_deferred_layouts() const {
    if (deferred_layouts) deferred_layouts->wait();
}

namespace {

// Maps a role ("attn_q", layer 3) to the checkpoint's tensor name.
struct TensorNames {
    std::function<std::string(const std::string& role, int layer)> name;
};

std::string gguf_name(const std::string& role, int layer) {
    static const std::map<std::string, std::string> global = {{"embed", "token_embd.weight"},
                                                              {"output_norm", "output_norm.weight"},
                                                              {"output", "output.weight"},
                                                              {"rope_freqs", "rope_freqs.weight"}};
    static const std::map<std::string, std::string> per_layer = {{"attn_norm", "attn_norm.weight"},
                                                                 {"ffn_norm", "ffn_norm.weight"},
                                                                 {"wq", "attn_q.weight"},
                                                                 {"wk", "attn_k.weight"},
                                                                 {"wv", "attn_v.weight"},
                                                                 {"wo", "attn_output.weight"},
                                                                 {"bq", "attn_q.bias"},
                                                                 {"bk", "attn_k.bias"},
                                                                 {"bv", "attn_v.bias"},
                                                                 {"q_norm", "attn_q_norm.weight"},
                                                                 {"k_norm", "attn_k_norm.weight"},
                                                                 {"w_gate", "ffn_gate.weight"},
                                                                 {"w_up", "ffn_up.weight"},
                                                                 {"w_down", "ffn_down.weight"}};
    if (layer < 0) return global.at(role);
    if (role.rfind("raw:", 0) == 0)
        return "blk." + std::to_string(layer) + "." + formats::gguf_layer_name(role.substr(4));
    return "blk." + std::to_string(layer) + "." + per_layer.at(role);
}

std::string hf_name(const std::string& role, int layer) {
    static const std::map<std::string, std::string> global = {
        {"embed", "model.embed_tokens.weight"},
        {"output_norm", "model.norm.weight"},
        {"output", "lm_head.weight"},
        {"rope_freqs", ""}};
    static const std::map<std::string, std::string> per_layer = {
        {"attn_norm", "input_layernorm.weight"}, {"ffn_norm", "post_attention_layernorm.weight"},
        {"wq", "self_attn.q_proj.weight"},       {"wk", "self_attn.k_proj.weight"},
        {"wv", "self_attn.v_proj.weight"},       {"wo", "self_attn.o_proj.weight"},
        {"bq", "self_attn.q_proj.bias"},         {"bk", "self_attn.k_proj.bias"},
        {"bv", "self_attn.v_proj.bias"},         {"q_norm", "self_attn.q_norm.weight"},
        {"k_norm", "self_attn.k_norm.weight"},   {"w_gate", "mlp.gate_proj.weight"},
        {"w_up", "mlp.up_proj.weight"},          {"w_down", "mlp.down_proj.weight"}};
    if (layer < 0) return global.at(role);
    // "raw:<name>": a tensor named relative to the layer (MoE experts, model/moe.cpp).
    if (role.rfind("raw:", 0) == 0)
        return "model.layers." + std::to_string(layer) + "." + role.substr(4);
    return "model.layers." + std::to_string(layer) + "." + per_layer.at(role);
}

// A runtime weight is its own buffer once loaded, or reads the mapping in place (Matrix::mapped:
// GGUF blocks that run as stored; Matrix::mapped_rows: lookup tables). The mapped tensor data of
// the others need not stay resident: their pages go back to the page cache (a later read would
// fault them in again). Without this a model's resident memory is its runtime weights plus the
// whole file. `tensors`: the file's tensors (GGUF or safetensors: data, n_bytes); `in_place`: the
// byte ranges matrices read in place; a tensor that overlaps one keeps its pages.
template <class Tensors>
void release_tensor_pages(const Tensors& tensors,
                          std::vector<std::pair<const uint8_t*, const uint8_t*>> in_place) {
    std::sort(in_place.begin(), in_place.end());
    for (const auto& t : tensors) {
        if (t.data == nullptr || t.n_bytes == 0) continue;
        const uint8_t* lo = t.data;
        const uint8_t* hi = t.data + t.n_bytes;
        // The first range that ends after lo: the tensor overlaps it when it starts before hi.
        const auto it = std::lower_bound(in_place.begin(), in_place.end(), lo,
                                         [](const std::pair<const uint8_t*, const uint8_t*>& r,
                                            const uint8_t* p) { return r.second <= p; });
        if (it != in_place.end() && it->first < hi) continue;
        util::release_mapped_pages(lo, t.n_bytes);
    }
}

class Loader {
  public:
    Loader(Model& m, const LoadOptions& o, util::ThreadPool& pool,
           std::function<std::optional<formats::SourceTensor>(const std::string&)> find,
           std::function<std::string(const std::string&, int)> name,
           std::map<std::string, tensor::WeightFormat> head_formats = {},
           std::function<bool(const std::string&)> exists = nullptr)
        : m_(m),
          opts_(o),
          pool_(pool),
          find_(std::move(find)),
          name_(std::move(name)),
          head_formats_(std::move(head_formats)),
          exists_(std::move(exists)) {}

    // Whether the tensor is there, without resolving it: for an FP8 block-scaled checkpoint
    // find_ dequantizes the weight, which a presence test must not pay for (or hold).
    bool has(const std::string& role, int layer) const {
        const std::string n = name_(role, layer);
        if (n.empty()) return false;
        return exists_ ? exists_(n) : find_(n).has_value();
    }

    std::optional<formats::SourceTensor> get_opt(const std::string& role, int layer) const {
        const std::string n = name_(role, layer);
        if (n.empty()) return std::nullopt;
        return find_(n);
    }

    formats::SourceTensor get(const std::string& role, int layer) const {
        auto t = get_opt(role, layer);
        if (!t) throw Error("model '" + m_.path + "': missing tensor '" + name_(role, layer) + "'");
        return *t;
    }

    static std::string shape_str(const std::vector<int64_t>& d) {
        std::string s = "[";
        for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
        return s + "]";
    }

    void expect_shape(const formats::SourceTensor& t, std::vector<int64_t> want) const {
        if (t.dims != want)
            throw Error("model '" + m_.path + "': tensor '" + t.name + "' has shape " +
                        shape_str(t.dims) + ", expected " + shape_str(want));
    }

    // Runtime format of a matrix (--weights for the layers, head_weights for embeddings/output,
    // --dtype where unset), plus the optional prefill copy (--prefill-weights). Weight memory
    // is accounted per role in Model::weight_memory.
    Matrix matrix(const std::string& role, int layer, int64_t rows, int64_t cols) const {
        const formats::SourceTensor t = get(role, layer);
        expect_shape(t, {rows, cols});
        const bool embd = layer < 0;
        tensor::WeightFormat hi;
        hi.type =
            opts_.dtype == RuntimeDType::BF16 ? tensor::WeightType::BF16 : tensor::WeightType::F32;
        std::optional<tensor::WeightFormat> chosen = embd ? opts_.head_weights : opts_.weights;
        // The embedding table is only looked up, unless it is also the head (tied).
        const bool matmul_reads =
            (role != "embed" && role != "raw:embed_tokens.weight") || embed_is_head_;
        // Unset: a bf16 table that is only looked up stays bf16 (read where the file maps it,
        // mapped_lookup_table: no conversion at start-up, only the rows of the tokens seen in
        // memory, exact values); else the checkpoint's own lossless format (the caller decided
        // it: head_formats_), else the default beside these layers, named or native (int8 beside
        // int4, tensor::default_head_format), as `--weights` gives it.
        if (embd && !chosen && !matmul_reads && is_bf16(t)) chosen = bf16_format();
        if (embd && !chosen)
            if (auto it = head_formats_.find(role); it != head_formats_.end()) chosen = it->second;
        if (embd && !chosen && opts_.weights) chosen = tensor::default_head_format(*opts_.weights);
        // FP8 block-scaled weights without --weights: their codes and block scales as stored.
        if (!embd && !chosen && fp8_native && t.fp8)
            if (auto nf = formats::fp8_native_format(t.fp8->block))
                chosen = tensor::parse_weight_format(*nf);
        // A file of mixed block types that all run natively: each layer matrix in its own type's.
        if (!embd && !chosen && per_tensor_native && t.is_ggml)
            if (auto nf = gguf_mixed_native_format(t.ggml_type))
                chosen = tensor::parse_weight_format(*nf);
        const tensor::WeightFormat f = chosen.value_or(hi);
        std::optional<Matrix> mapped;
        if (!matmul_reads) mapped = mapped_lookup_table(t, f, rows, cols);
        Matrix m = mapped ? std::move(*mapped)
                          : build_matrix(t, f, rows, cols, matmul_reads && gets_bf16_tiles(f));
        (embd ? m_.weight_memory.embeddings : m_.weight_memory.layers) += m.bytes();
        if (m.is_mapped()) m_.weight_memory.in_place += m.bytes();
        if (matmul_reads) add_bf16_tiles(m);
        if (!embd && opts_.prefill_weights && f.quantized() &&
            opts_.prefill_weights->type != f.type) {
            Matrix pre = build_matrix(t, *opts_.prefill_weights, rows, cols,
                                      gets_bf16_tiles(*opts_.prefill_weights));
            m_.weight_memory.prefill_copy += pre.bytes();
            add_bf16_tiles(pre);
            m.prefill = std::make_shared<const Matrix>(std::move(pre));
        }
        return m;
    }

    static bool is_bf16(const formats::SourceTensor& t) {
        return t.is_ggml ? t.ggml_type == tensor::GgmlType::BF16 : t.st_dtype == "BF16";
    }
    static tensor::WeightFormat bf16_format() {
        tensor::WeightFormat f;
        f.type = tensor::WeightType::BF16;
        return f;
    }

    // A lookup table (an embedding table that is not also the head) stored as f32 or bf16 rows
    // that format f holds exactly (bf16 into bf16 or f32, f32 into f32) is read where the file
    // maps it: only the rows of the tokens seen are ever read, so a copy would cost start-up time
    // and memory for nothing. nullopt where it is copied as before (another dtype, --no-mmap, no
    // mapping, rows not aligned to their element).
    std::optional<Matrix> mapped_lookup_table(const formats::SourceTensor& t,
                                              const tensor::WeightFormat& f, int64_t rows,
                                              int64_t cols) const {
        if (!mapping_ || !opts_.map_weights || f.quantized() || t.data == nullptr)
            return std::nullopt;  // compressed-tensors and FP8 sources fail the dtype test below
        const bool bf16 = is_bf16(t);
        const bool f32 = t.is_ggml ? t.ggml_type == tensor::GgmlType::F32 : t.st_dtype == "F32";
        if (!(bf16 || (f32 && f.type == tensor::WeightType::F32))) return std::nullopt;
        const tensor::WeightType et = bf16 ? tensor::WeightType::BF16 : tensor::WeightType::F32;
        const size_t elem = bf16 ? 2 : 4;
        if (reinterpret_cast<uintptr_t>(t.data) % elem != 0) return std::nullopt;
        {
            std::lock_guard lock(mapped_mu_);
            mapped_ranges_.emplace_back(t.data, t.data + static_cast<size_t>(rows * cols) * elem);
        }
        return Matrix::mapped_rows(et, rows, cols, t.data, mapping_);
    }

    // A bf16 matrix that matmuls read is kept as its AMX-BF16 tile copy alone where the loaded
    // model will run on AMX-BF16 (kernels/matmul_bf16_tiles.h, "Tile-only matrices"); what the
    // tile layout adds over the panels is counted in WeightMemory::amx_tiles.
    static bool gets_bf16_tiles(const tensor::WeightFormat& f) {
        return !f.quantized() && f.type == tensor::WeightType::BF16 && kernels::bf16_tiles_wanted();
    }
    void add_bf16_tiles(Matrix& m) const {
        if (!kernels::bf16_tiles_wanted()) return;
        m_.weight_memory.amx_tiles += m.add_bf16_tiles(&arena_);
        if (m.view().tiles != nullptr) ++m_.weight_memory.amx_tile_matrices;
    }
    bool embed_is_head_ = false;  // a tied (or missing) head: token_embd is also a matmul's weights

    bool per_tensor_native = false;  // GgufNativeWeights::per_tensor (set by load_gguf)
    bool fp8_native = false;  // FP8 block-scaled layers run as stored (set by load_safetensors)
    // The file mapping that matrices may read in place (Matrix::mapped, Matrix::mapped_rows; the
    // GGUF file or the safetensors files), and the byte ranges of it they read (for a GGUF file,
    // release_tensor_pages keeps those resident).
    std::shared_ptr<const void> mapping_;
    mutable std::mutex mapped_mu_;
    mutable std::vector<std::pair<const uint8_t*, const uint8_t*>> mapped_ranges_;
    // The copies blocks_in_place_then_panels and ct_rows_in_place_then_panels deferred, built
    // from now on by a background thread (null when there are none); counted in
    // WeightMemory::deferred_copies.
    std::unique_ptr<DeferredLayouts> start_deferred_layouts() const {
        m_.weight_memory.arena = static_cast<int64_t>(arena_.allocated_bytes());
        std::lock_guard lock(mapped_mu_);
        if (deferred_jobs_.empty()) return nullptr;
        auto d = std::make_unique<DeferredLayouts>(std::move(deferred_jobs_), mapping_);
        deferred_jobs_.clear();
        m_.weight_memory.deferred_copies += d->copy_bytes();
        return d;
    }
    // Copies in a faster layout to build after loading (the *_in_place_then_panels), under
    // mapped_mu_; start_deferred_layouts hands them to the model.
    mutable std::vector<DeferredLayouts::Job> deferred_jobs_;

    // Converts a source tensor into runtime format f: f32/bf16 packing, or quantization
    // (kernels/matmul_quant.h). GGUF Q4_0/Q4_1/Q8_0 rows that map onto f without loss are
    // imported bit-exactly (quant/quantizer.h), others are dequantized and requantized.
    // transient_panels: the panels only feed a tile copy (gets_bf16_tiles) and are freed after it,
    // so they come from the heap, not from the arena, which never reuses freed bytes.
    Matrix build_matrix(const formats::SourceTensor& t, const tensor::WeightFormat& f, int64_t rows,
                        int64_t cols, bool transient_panels = false) const {
        if (!f.quantized()) {
            Matrix m = Matrix::owned(f.type, rows, cols, transient_panels ? nullptr : &arena_);
            // bf16 into bf16 panels: a copy in panel order, no round trip through f32.
            if (const uint8_t* src = t.bf16_rows(); src && f.type == tensor::WeightType::BF16) {
                pool_.parallel_for(rows, kernels::kPanelRows, [&](int64_t r0, int64_t r1) {
                    m.pack_bf16_rows(r0, r1, src + r0 * cols * 2);
                });
                return m;
            }
            if (f.type == tensor::WeightType::BF16) {
                // Other sources into bf16 panels: a panel's rows rounded to bf16 rows first, then
                // the same panel copy as a bf16 source (the same bytes as packing each f32 row,
                // without writing two bytes at a time 16 rows apart).
                pool_.parallel_for(rows, kernels::kPanelRows, [&](int64_t r0, int64_t r1) {
                    std::vector<float> row(static_cast<size_t>(cols));
                    std::vector<uint16_t> rows16(static_cast<size_t>(kernels::kPanelRows * cols));
                    for (int64_t p0 = r0; p0 < r1; p0 += kernels::kPanelRows) {
                        const int64_t p1 = std::min(r1, p0 + kernels::kPanelRows);
                        for (int64_t r = p0; r < p1; ++r) {
                            t.row_to_f32(r, row.data());
                            kernels::f32_to_bf16_row(row.data(), rows16.data() + (r - p0) * cols,
                                                     cols);
                        }
                        m.pack_bf16_rows(p0, p1, reinterpret_cast<const uint8_t*>(rows16.data()));
                    }
                });
                return m;
            }
            pool_.parallel_for(rows, kernels::kPanelRows, [&](int64_t r0, int64_t r1) {
                std::vector<float> row(static_cast<size_t>(cols));
                for (int64_t r = r0; r < r1; ++r) {
                    t.row_to_f32(r, row.data());
                    m.pack_row(r, row.data());
                }
            });
            return m;
        }
        const kernels::WeightMatrix layout = kernels::weight_layout(f, rows, cols);
        Matrix m;
        try {
            if (tensor::is_kquant(layout.type) &&
                !(t.is_ggml && t.ggml_type == tensor::kquant_ggml_type(layout.type)))
                throw Error(std::string("only a GGUF ") + tensor::kquant_type_name(layout.type) +
                            " tensor loads in this format (warden does not quantize into it)");
            // GGUF blocks that run as stored are read where the file maps them: loading them is
            // checking their scales, with no copy (a copy is fresh memory, which is most of a
            // start-up's time where first touching a page is slow, as in a VM).
            if (t.is_ggml && mapping_ && opts_.map_weights &&
                quant::runs_as_stored(t.ggml_type, layout)) {
                const int64_t row_bytes = kernels::kquant_row_bytes(layout);
                pool_.parallel_for(rows, kernels::kPanelRows, [&](int64_t r0, int64_t r1) {
                    for (int64_t r = r0; r < r1; ++r)
                        quant::check_kquant_row_scales(t.data + r * row_bytes, layout);
                });
                {
                    std::lock_guard lock(mapped_mu_);
                    mapped_ranges_.emplace_back(t.data, t.data + rows * row_bytes);
                }
                return Matrix::mapped(layout, t.data, mapping_);
            }
            const bool q8_0_panels = t.is_ggml && t.ggml_type == tensor::GgmlType::Q8_0 &&
                                     layout.type == tensor::WeightType::Q8 && layout.group == 32 &&
                                     !layout.bf16_scales;
            // Q4_0 / Q4_1 into int4-g32(-asym) W4A8: blocks of the same arithmetic as the panels.
            const bool q4_block_panels = t.is_ggml &&
                                         quant::ggml_q4_codes_map(t.ggml_type, layout) &&
                                         layout.group == 32 && !layout.act_f32;
            if ((q8_0_panels || q4_block_panels) && mapping_ && opts_.map_weights)
                return blocks_in_place_then_panels(t, layout);
            if (t.ct && mapping_ && opts_.map_weights &&
                formats::ct_q4_rows_in_place(*t.ct, layout))
                return ct_rows_in_place_then_panels(*t.ct, layout);
            const bool fp8_as_stored = t.fp8 && layout.type == tensor::WeightType::FP8 &&
                                       layout.group == t.fp8->block.block_cols;
            if (fp8_as_stored && mapping_ && opts_.map_weights && cols % 4 == 0) {
                fp8_native_matrices_ += 1;
                return fp8_rows_in_place_then_panels(t, layout);
            }
            // Allocated only here: the arena never reuses bytes, so a matrix returned in place
            // above must not have taken any.
            m = Matrix::quantized(layout, &arena_);
            const int64_t row_bytes = t.is_ggml ? tensor::ggml_row_bytes(t.ggml_type, cols) : 0;
            if (fp8_as_stored) {  // FP8 block-scaled codes and scales as stored
                fp8_native_matrices_ += 1;
                const formats::Fp8BlockRows& src = *t.fp8;
                pool_.parallel_for(rows, kernels::kPanelRows, [&](int64_t r0, int64_t r1) {
                    src.check_codes(r0, r1);
                    m.pack_fp8_codes(r0, r1, src.codes + r0 * cols);
                    for (int64_t r = r0; r < r1; ++r) m.pack_fp8_scales(r, src.row_scales(r));
                });
                return m;
            }
            if (q8_0_panels) {
                import_q8_0_panels(t, layout, m);
                return m;
            }
            const bool ggml_q4 = t.is_ggml && quant::ggml_q4_codes_map(t.ggml_type, layout);
            if (ggml_q4 || (t.ct && formats::ct_q4_codes_map(*t.ct, layout))) {
                import_q4_rows(t, layout, m);
                return m;
            }
            pool_.parallel_for(rows, kernels::kPanelRows, [&](int64_t r0, int64_t r1) {
                std::vector<float> row(static_cast<size_t>(cols));
                for (int64_t r = r0; r < r1; ++r) {
                    if (t.is_ggml) {
                        if (auto qr = quant::import_ggml_row(t.ggml_type, t.data + r * row_bytes,
                                                             layout)) {
                            m.pack_quant_row(r, *qr);
                            continue;
                        }
                        if (t.ggml_type == tensor::GgmlType::Q4_0 ||
                            t.ggml_type == tensor::GgmlType::Q4_1 ||
                            t.ggml_type == tensor::GgmlType::Q8_0)
                            ggml_requant_rows_ += 1;
                    }
                    if (t.ct) {  // compressed-tensors pack-quantized (formats/compressed_tensors.h)
                        if (auto qr = formats::ct_import_row(*t.ct, r, layout)) {
                            m.pack_quant_row(r, *qr);
                            ct_exact_rows_ += 1;
                            continue;
                        }
                        ct_requant_rows_ += 1;
                    }
                    t.row_to_f32(r, row.data());
                    m.pack_quant_row(
                        r, quant::default_quantizer().quantize_row(layout, row.data(), nullptr));
                }
            });
        } catch (const Error& e) {
            throw Error("model '" + m_.path + "': tensor '" + t.name + "' as " +
                        tensor::weight_format_name(f) + ": " + e.what());
        }
        return m;
    }

    // An int8-g32 / int4-g32(-asym) layout's rows as GGUF Q8_0 / Q4_0 / Q4_1 store them, every
    // block's scales checked as the as-stored format checks them (a NaN scale is an error naming
    // the tensor).
    kernels::WeightMatrix checked_blocks(const formats::SourceTensor& t,
                                         const kernels::WeightMatrix& layout) const {
        kernels::WeightMatrix blocks = layout;
        blocks.type = layout.type == tensor::WeightType::Q8 ? tensor::WeightType::Q8_0
                      : layout.asym                         ? tensor::WeightType::Q4_1
                                                            : tensor::WeightType::Q4_0;
        blocks.group = 0;
        blocks.asym = false;
        const int64_t row_bytes = kernels::kquant_row_bytes(blocks);
        pool_.parallel_for(layout.rows, kernels::kPanelRows, [&](int64_t r0, int64_t r1) {
            for (int64_t r = r0; r < r1; ++r)
                quant::check_kquant_row_scales(t.data + r * row_bytes, blocks);
        });
        return blocks;
    }

    // Panels [p0, p1) of m (int8-g32 or int4-g32(-asym)) from the Q8_0 / Q4_0 / Q4_1 rows at src,
    // row_bytes apart (the same values, block for block): whole panels by transposes.
    static void pack_block_panels(const uint8_t* src, int64_t row_bytes, int64_t p0, int64_t p1,
                                  Matrix& m) {
        for (int64_t p = p0; p < p1; ++p)
            m.pack_block_panel(p, src + p * kernels::kPanelRows * row_bytes, row_bytes);
    }
    static int64_t panels_of(int64_t rows) {
        return (rows + kernels::kPanelRows - 1) / kernels::kPanelRows;
    }

    // GGUF Q8_0 blocks into int8-g32 panels while loading (--no-mmap).
    void import_q8_0_panels(const formats::SourceTensor& t, const kernels::WeightMatrix& layout,
                            Matrix& m) const {
        const int64_t row_bytes = kernels::kquant_row_bytes(checked_blocks(t, layout));
        pool_.parallel_for(layout.rows, kernels::kPanelRows, [&](int64_t r0, int64_t r1) {
            pack_block_panels(t.data, row_bytes, r0 / kernels::kPanelRows, panels_of(r1), m);
        });
    }

    static std::span<const uint8_t> bytes(const uint8_t* p, int64_t n) {
        return {p, static_cast<size_t>(n)};
    }
    // Gives in-place matrix m a deferred copy in `layout` (from the arena), which `build` fills
    // after loading (DeferredLayouts); `sources` are the mapped bytes m reads: kept resident
    // through the load, released once the copy is published.
    Matrix defer_panels(Matrix m, const kernels::WeightMatrix& layout,
                        std::function<void(Matrix&)> build,
                        std::vector<std::span<const uint8_t>> sources) const {
        auto copy = std::make_shared<DeferredCopy>();
        copy->matrix = Matrix::quantized(layout, &arena_);
        m.set_deferred_copy(copy);
        DeferredLayouts::Job job;
        job.copy = std::move(copy);
        job.build = std::move(build);
        std::lock_guard lock(mapped_mu_);
        for (const std::span<const uint8_t> r : sources)
            mapped_ranges_.emplace_back(r.data(), r.data() + r.size());
        job.sources = std::move(sources);
        deferred_jobs_.push_back(std::move(job));
        return m;
    }

    // GGUF Q8_0 / Q4_0 / Q4_1 blocks into int8-g32 / int4-g32(-asym) panels without holding up
    // start-up: the blocks are read where the file maps them (the Q8_0 / Q4_0 / Q4_1 formats,
    // whose arithmetic is the panels', kernels/matmul_kquant.h) until their panels, built after
    // loading by DeferredLayouts, are published.
    Matrix blocks_in_place_then_panels(const formats::SourceTensor& t,
                                       const kernels::WeightMatrix& layout) const {
        const kernels::WeightMatrix blocks = checked_blocks(t, layout);
        const int64_t row_bytes = kernels::kquant_row_bytes(blocks);
        return defer_panels(Matrix::mapped(blocks, t.data, mapping_), layout,
                            [src = t.data, row_bytes](Matrix& panels) {
                                pack_block_panels(src, row_bytes, 0, panels_of(panels.rows()),
                                                  panels);
                            },
                            {bytes(t.data, layout.rows * row_bytes)});
    }

    // A compressed-tensors int4 weight whose codes and scales are `layout` as row-major int4
    // (formats::ct_q4_rows_in_place): read where the file maps it until its panels, built after
    // loading by DeferredLayouts, are published; both compute the same bits.
    Matrix ct_rows_in_place_then_panels(const formats::CtPacked& ct,
                                        const kernels::WeightMatrix& layout) const {
        Matrix m = Matrix::mapped_q4_rows(layout, ct.packed, ct.scale, mapping_);
        const kernels::WeightMatrix rows = m.view();
        return defer_panels(std::move(m), layout,
                            [rows](Matrix& panels) {
                                for (int64_t p = 0; p < panels_of(panels.rows()); ++p)
                                    panels.pack_q4_rows_panel(p, rows);
                            },
                            {bytes(ct.packed, layout.rows * (layout.cols / 2)),
                             bytes(ct.scale, layout.rows * (layout.cols / layout.group) * 2)});
    }

    // An FP8 block-scaled weight as stored (codes checked for NaN): read where the file maps it,
    // with its scale grid, until its fp8-bG panels, built after loading by DeferredLayouts, are
    // published; both compute the same bits.
    Matrix fp8_rows_in_place_then_panels(const formats::SourceTensor& t,
                                         const kernels::WeightMatrix& layout) const {
        const formats::Fp8BlockRows& src = *t.fp8;
        pool_.parallel_for(layout.rows, kernels::kPanelRows,
                           [&](int64_t r0, int64_t r1) { src.check_codes(r0, r1); });
        // The mapping and the scale grid (which the resolver decoded to f32) live as long as the
        // matrix and its copy's builder.
        struct Keep {
            std::shared_ptr<const void> mapping;
            std::shared_ptr<const formats::Fp8BlockRows> fp8;
        };
        std::shared_ptr<const void> keep = std::make_shared<const Keep>(Keep{mapping_, t.fp8});
        Matrix m = Matrix::mapped_fp8_rows(layout, src.codes, src.scale_inv.data(),
                                           src.block.block_rows, keep);
        const kernels::WeightMatrix rows = m.view();
        return defer_panels(std::move(m), layout,
                            [rows, keep](Matrix& panels) {
                                for (int64_t p = 0; p < panels_of(panels.rows()); ++p)
                                    panels.pack_fp8_rows_panel(p, rows);
                            },
                            {bytes(src.codes, layout.rows * layout.cols)});
    }

    // 4-bit codes that are `layout`'s codes as stored (GGUF Q4_0/Q4_1 blocks, compressed-tensors
    // int4 words): whole panels of codes by transposes, then each row's group scales. A row whose
    // scales do not map (blocks of one group with different scales, a scale the layout's dtype
    // cannot hold) is requantized from f32 over its codes.
    void import_q4_rows(const formats::SourceTensor& t, const kernels::WeightMatrix& layout,
                        Matrix& m) const {
        kernels::Q4CodeRows src;
        if (t.is_ggml) {
            src.data = t.data + (layout.asym ? 4 : 2);  // past the block's d (and m)
            src.row_stride = tensor::ggml_row_bytes(t.ggml_type, layout.cols);
            src.chunk_stride = layout.asym ? 20 : 18;
            src.split_halves = true;
        } else {
            src.data = t.ct->packed;
            src.row_stride = t.ct->words_per_row * 4;
        }
        const auto ng = static_cast<size_t>(layout.cols / layout.group);
        pool_.parallel_for(layout.rows, kernels::kPanelRows, [&](int64_t r0, int64_t r1) {
            kernels::Q4CodeRows part = src;
            part.data += r0 * src.row_stride;
            m.pack_q4_codes(r0, r1, part);
            std::vector<uint16_t> d(ng), mins(ng);
            std::vector<float> row;
            int64_t exact = 0, requant = 0;
            for (int64_t r = r0; r < r1; ++r) {
                const bool ok =
                    t.is_ggml
                        ? quant::import_ggml_q4_scales(t.ggml_type, t.data + r * src.row_stride,
                                                       layout, d.data(), mins.data())
                        : formats::ct_import_q4_scales(*t.ct, r, layout, d.data(), mins.data());
                if (ok) {
                    m.pack_q4_scales(r, d.data(), mins.data());
                    exact += 1;
                    continue;
                }
                requant += 1;
                row.resize(static_cast<size_t>(layout.cols));
                t.row_to_f32(r, row.data());
                m.pack_quant_row(
                    r, quant::default_quantizer().quantize_row(layout, row.data(), nullptr));
            }
            if (t.is_ggml) {
                ggml_requant_rows_ += requant;
            } else {
                ct_exact_rows_ += exact;
                ct_requant_rows_ += requant;
            }
        });
    }

    std::vector<float> vec(const formats::SourceTensor& t, int64_t n) const {
        expect_shape(t, {n});
        std::vector<float> v(static_cast<size_t>(n));
        t.row_to_f32(0, v.data());
        return v;
    }
    std::vector<float> vec(const std::string& role, int layer, int64_t n) const {
        return vec(get(role, layer), n);
    }
    std::vector<float> vec_opt(const std::string& role, int layer, int64_t n) const {
        auto t = get_opt(role, layer);
        return t ? vec(*t, n) : std::vector<float>{};
    }

    // Tensors of one MoE layer, named relative to the layer; the router is kept in f32.
    MoeTensorLoader moe_loader(int l) const {
        MoeTensorLoader ld;
        ld.matrix = [this, l](const std::string& nm, int64_t rows, int64_t cols) {
            return matrix("raw:" + nm, l, rows, cols);
        };
        ld.matrix_f32 = [this, l](const std::string& nm, int64_t rows, int64_t cols) {
            const formats::SourceTensor t = get("raw:" + nm, l);
            expect_shape(t, {rows, cols});
            Matrix mat = Matrix::owned(tensor::WeightType::F32, rows, cols, &arena_);
            std::vector<float> row(static_cast<size_t>(cols));
            for (int64_t r = 0; r < rows; ++r) {
                t.row_to_f32(r, row.data());
                mat.pack_row(r, row.data());
            }
            return mat;
        };
        ld.vec = [this, l](const std::string& nm, int64_t n) { return vec("raw:" + nm, l, n); };
        ld.pack = [this](int64_t rows, int64_t cols, const float* data) {
            Matrix mat = Matrix::owned(opts_.dtype == RuntimeDType::BF16 ? tensor::WeightType::BF16
                                                                         : tensor::WeightType::F32,
                                       rows, cols, &arena_);
            for (int64_t r = 0; r < rows; ++r) mat.pack_row(r, data + r * cols);
            return mat;
        };
        ld.has = [this, l](const std::string& nm) { return has("raw:" + nm, l); };
        ld.f32 = [this, l](const std::string& nm, const std::vector<int64_t>& dims) {
            const formats::SourceTensor t = get("raw:" + nm, l);
            expect_shape(t, dims);
            std::vector<float> v(static_cast<size_t>(t.n_elements()));
            for (int64_t r = 0; r < t.n_rows(); ++r) t.row_to_f32(r, v.data() + r * t.row_len());
            return v;
        };
        return ld;
    }

    void load_all() {
        const ModelConfig& c = m_.config;
        const int64_t d = c.d_model;
        ModelWeights& w = m_.weights;
        embed_is_head_ = c.tied_embeddings || !has("output", -1);
        w.token_embd = matrix("embed", -1, c.vocab_size, d);
        embed_is_head_ = false;
        w.output_norm = vec("output_norm", -1, d);
        if (c.tied_embeddings || !has("output", -1)) {
            w.output = w.token_embd.alias();
        } else {
            w.output = matrix("output", -1, c.vocab_size, d);
        }
        w.layers.resize(static_cast<size_t>(c.n_layers));
        for (int l = 0; l < static_cast<int>(c.n_layers); ++l)
            load_layer(w.layers[static_cast<size_t>(l)], l, c.moe.is_moe_layer(l));
    }

    // The first MTP (nextn) layer, stored after the decoder layers at index target.n_layers, as
    // a one-layer draft model (model/mtp.h). Its own embeddings and head where the checkpoint has
    // them, else the target's (aliased, no copy).
    void load_mtp(const Model& target) {
        const ModelConfig& c = m_.config;
        const int64_t d = c.d_model;
        const int L = static_cast<int>(target.config.n_layers);
        ModelWeights& w = m_.weights;
        w.mtp_in = std::make_unique<MtpInputWeights>();
        w.mtp_in->enorm = vec("raw:enorm.weight", L, d);
        w.mtp_in->hnorm = vec("raw:hnorm.weight", L, d);
        w.mtp_in->eh_proj = matrix("raw:eh_proj.weight", L, d, 2 * d);
        w.output_norm = vec("raw:shared_head.norm.weight", L, d);
        w.token_embd = has("raw:embed_tokens.weight", L)
                           ? matrix("raw:embed_tokens.weight", L, c.vocab_size, d)
                           : target.weights.token_embd.alias();
        w.output = has("raw:shared_head.head.weight", L)
                       ? matrix("raw:shared_head.head.weight", L, c.vocab_size, d)
                       : target.weights.output.alias();
        w.layers.resize(1);
        load_layer(w.layers[0], L, c.nextn.sparse);
    }

    // Decoder layer l of the checkpoint into L.
    void load_layer(LayerWeights& L, int l, bool moe) {
        const ModelConfig& c = m_.config;
        const int64_t d = c.d_model, hd = c.head_dim, q_dim = c.n_heads * hd,
                      kv_dim = c.n_kv_heads * hd;
        L.attn_norm = vec("attn_norm", l, d);
        L.ffn_norm = vec("ffn_norm", l, d);
        if (c.mla.enabled()) {
            L.mla = load_mla_weights(c, moe_loader(l));
        } else {
            L.wq = matrix("wq", l, q_dim, d);
            L.wk = matrix("wk", l, kv_dim, d);
            L.wv = matrix("wv", l, kv_dim, d);
            L.wo = matrix("wo", l, d, q_dim);
        }
        if (moe) {
            L.moe = load_moe_weights(c, moe_loader(l));
        } else {
            L.w_gate = matrix("w_gate", l, c.d_ff, d);
            L.w_up = matrix("w_up", l, c.d_ff, d);
            L.w_down = matrix("w_down", l, d, c.d_ff);
        }
        if (c.qkv_bias) {
            L.bq = vec("bq", l, q_dim);
            L.bk = vec("bk", l, kv_dim);
            L.bv = vec("bv", l, kv_dim);
        } else {
            L.bq = vec_opt("bq", l, q_dim);
            L.bk = vec_opt("bk", l, kv_dim);
            L.bv = vec_opt("bv", l, kv_dim);
        }
        if (c.qk_norm) {
            L.q_norm = vec("q_norm", l, hd);
            L.k_norm = vec("k_norm", l, hd);
        }
    }

    // Rows of compressed-tensors weights imported bit-exactly / requantized through f32.
    mutable std::atomic<int64_t> ct_exact_rows_{0}, ct_requant_rows_{0};
    mutable std::atomic<int64_t> fp8_native_matrices_{0};  // FP8 weights imported as stored
    // GGUF Q4_0 / Q4_1 / Q8_0 rows that do not import into the chosen format exactly and were
    // requantized (a native load checks only each tensor's first row, or trusts the declared
    // format: model/gguf_native_weights.h).
    mutable std::atomic<int64_t> ggml_requant_rows_{0};
    // Where every matrix of the model gets its bytes (2 MiB pages where the kernel allows:
    // util/huge_page_arena.h). The matrices keep their chunks alive after the loader is gone.
    mutable util::HugePageArena arena_;

  private:
    Model& m_;
    const LoadOptions& opts_;
    util::ThreadPool& pool_;
    std::function<std::optional<formats::SourceTensor>(const std::string&)> find_;
    std::function<std::string(const std::string&, int)> name_;
    // "embed" / "output" -> the format the checkpoint's own tensor imports into without loss,
    // used when no --head-weights is given (model/gguf_native_weights.h).
    std::map<std::string, tensor::WeightFormat> head_formats_;
    std::function<bool(const std::string&)> exists_;  // null: find_(name) decides
};

void count_params(Model& m, const std::vector<formats::SourceTensor>& all) {
    for (const auto& t : all) {
        m.n_params += t.n_elements();
        m.source_tensor_types[t.type_name()] += 1;
    }
}

// An MTP draft's config: the target's, one layer (the nextn block) whose FFN kind is its own.
void make_mtp_config(ModelConfig& c) {
    c.n_layers = 1;
    if (c.moe.n_experts > 0) c.moe.sparse.assign(1, c.nextn.sparse ? 1 : 0);
}

// mtp_target: load that model's first MTP layer as a draft model instead (load_mtp_model).
std::unique_ptr<Model> load_gguf(const std::string& path, const LoadOptions& opts,
                                 util::ThreadPool& pool, const Model* mtp_target = nullptr) {
    auto m = std::make_unique<Model>();
    m->path = path;
    m->format = "gguf";
    m->dtype = opts.dtype;
    m->weights_format =
        opts.weights ? tensor::weight_format_name(*opts.weights) : runtime_dtype_name(opts.dtype);
    util::PhaseTimer timer("load");
    if (opts.load_weights) util::prefetch_in_background({path});  // every block is read below
    m->gguf = std::make_shared<formats::GGUFFile>(path);
    const formats::GGUFFile& g = *m->gguf;
    timer.mark("gguf parse");
    // A type warden cannot run is refused before anything loads, by tensor name (the lattice
    // IQ types would need their code books; llama-quantize re-quantizes such a file in minutes).
    for (const auto& t : g.tensors())
        tensor::check_ggml_type_supported(t.type, "GGUF '" + path + "': tensor '" + t.name + "'");
    m->config = config_from_gguf(g);
    std::vector<formats::SourceTensor> all;
    for (const auto& t : g.tensors()) all.push_back(formats::SourceTensor::from(t));
    count_params(*m, all);
    const ModelConfig& cfg = m->config;
    auto find = [&g, &cfg](const std::string& n) -> std::optional<formats::SourceTensor> {
        // "<name>[e]": expert e of a stacked [n_expert, rows, cols] tensor (gguf_layer_name).
        const size_t br = !n.empty() && n.back() == ']' ? n.rfind('[') : std::string::npos;
        const formats::GGUFTensor* t = g.find_tensor(br == std::string::npos ? n : n.substr(0, br));
        if (!t) return std::nullopt;
        formats::SourceTensor s = formats::SourceTensor::from(*t);
        if (br == std::string::npos) return s;
        const int64_t e = std::stoll(n.substr(br + 1, n.size() - br - 2));
        if (s.dims.size() != 3 || s.dims[0] != cfg.moe.n_experts || e < 0 || e >= s.dims[0]) {
            std::string shape;
            for (size_t i = 0; i < s.dims.size(); ++i)
                shape += (i ? ", " : "") + std::to_string(s.dims[i]);
            throw Error("GGUF '" + g.path() + "': tensor '" + t->name + "' has shape [" + shape +
                        "], expected [" + std::to_string(cfg.moe.n_experts) +
                        " experts, rows, cols]");
        }
        s.name = n;
        s.data += e * s.dims[1] * tensor::ggml_row_bytes(s.ggml_type, s.dims[2]);
        s.dims = {s.dims[1], s.dims[2]};
        return s;
    };
    // glm4moe names the pre-FFN norm post_attention_norm (HF post_attention_layernorm).
    auto names = [arch = cfg.arch](const std::string& role, int layer) {
        if (arch == Arch::Glm4Moe && role == "ffn_norm" && layer >= 0)
            return "blk." + std::to_string(layer) + ".post_attention_norm.weight";
        // An MTP layer's own tensors: llama.cpp's glm4moe names (load_mtp).
        static const std::map<std::string, std::string> nextn = {
            {"raw:eh_proj.weight", "nextn.eh_proj.weight"},
            {"raw:enorm.weight", "nextn.enorm.weight"},
            {"raw:hnorm.weight", "nextn.hnorm.weight"},
            {"raw:embed_tokens.weight", "nextn.embed_tokens.weight"},
            {"raw:shared_head.norm.weight", "nextn.shared_head_norm.weight"},
            {"raw:shared_head.head.weight", "nextn.shared_head_head.weight"}};
        if (const auto it = nextn.find(role); it != nextn.end() && layer >= 0)
            return "blk." + std::to_string(layer) + "." + it->second;
        return gguf_name(role, layer);
    };
    // Without --weights, Q4_0 / Q4_1 / Q8_0 layers load in their own format (bit-exact
    // import, or the format `warden quantize` declared), and so do the embeddings and head where
    // theirs maps (model/gguf_native_weights.h); beside named quantized layers the embeddings and
    // head follow the same rule.
    LoadOptions eff = opts;
    std::map<std::string, tensor::WeightFormat> head_formats;  // role -> format
    const auto keep_heads = [&head_formats](const GgufNativeWeights& nw) {
        if (nw.embed) head_formats["embed"] = tensor::parse_weight_format(*nw.embed);
        if (nw.output) head_formats["output"] = tensor::parse_weight_format(*nw.output);
    };
    std::string named_head_note;  // heads that kept their format beside named layers
    bool per_tensor = false;      // mixed native block types (GgufNativeWeights::per_tensor)
    if (!opts.weights &&
        opts.native_weights) {  // also without load_weights: `warden info` reports it
        const GgufNativeWeights nw = gguf_native_weights(g, cfg, runtime_dtype_name(opts.dtype),
                                                         opts.head_weights.has_value());
        m->weights_note = nw.note;
        if (nw.layers) {
            eff.weights = tensor::parse_weight_format(*nw.layers);
            m->weights_format = *nw.layers;
        }
        if (nw.per_tensor) m->weights_format = nw.per_tensor_name;
        per_tensor = nw.per_tensor;
        keep_heads(nw);
    } else if (opts.weights && opts.weights->quantized() && !opts.head_weights) {
        const GgufNativeWeights nw = gguf_named_heads(g, cfg);
        named_head_note = nw.note;
        keep_heads(nw);
    }
    timer.mark("formats");
    Loader loader(*m, eff, pool, find, names, head_formats);
    loader.per_tensor_native = per_tensor;
    loader.mapping_ = m->gguf;
    // Llama 3 rope scaling: per-dimension frequency divisors stored as a tensor.
    if (auto rf = loader.get_opt("rope_freqs", -1)) {
        const auto factors = loader.vec(*rf, m->config.rope_dim / 2);
        for (size_t i = 0; i < factors.size(); ++i) {
            if (!(factors[i] > 0.0f))
                throw Error("GGUF '" + path + "': rope_freqs has a non-positive factor");
            m->config.rope_inv_freq[i] /= factors[i];
        }
    }
    m->config.validate();
    if (g.has("tokenizer.chat_template"))
        m->chat_template = g.get_string("tokenizer.chat_template");
    if (mtp_target) {
        make_mtp_config(m->config);
        loader.load_mtp(*mtp_target);
        release_tensor_pages(g.tensors(), loader.mapped_ranges_);
        m->deferred_layouts = loader.start_deferred_layouts();
        return m;
    }
    if (opts.load_weights) {
        loader.load_all();
        timer.mark("weights");
        release_tensor_pages(g.tensors(), loader.mapped_ranges_);
        timer.mark("page release");
        m->deferred_layouts = loader.start_deferred_layouts();
    }
    if (!m->weights_note.empty() && loader.ggml_requant_rows_ > 0)
        m->weights_note +=
            "; " + std::to_string(loader.ggml_requant_rows_.load()) + " rows did not import into " +
            m->weights_format +
            " exactly (e.g. Q8_0 with a scale per block into int8) and were requantized";
    if (!named_head_note.empty())
        m->weights_note += (m->weights_note.empty() ? "" : "; ") + named_head_note;
    return m;
}

std::unique_ptr<Model> load_hf_dir(const std::string& dir, const LoadOptions& opts,
                                   util::ThreadPool& pool, const Model* mtp_target = nullptr) {
    auto m = std::make_unique<Model>();
    m->path = dir;
    m->format = "safetensors";
    m->dtype = opts.dtype;
    m->weights_format =
        opts.weights ? tensor::weight_format_name(*opts.weights) : runtime_dtype_name(opts.dtype);
    const nlohmann::json config_json = util::read_json_file(dir + "/config.json");
    m->config = config_from_hf_json(config_json, dir + "/config.json");
    m->config.validate();
    // compressed-tensors pack-quantized checkpoints (formats/compressed_tensors.h), else FP8
    // block-scaled ones: F8_E4M3 weights are dequantized at load (formats/fp8_block.h).
    std::optional<formats::CtConfig> ct;
    std::optional<formats::Fp8BlockConfig> fp8;
    if (formats::is_compressed_tensors_config(config_json)) {
        ct = formats::ct_config_from_hf_json(config_json, dir + "/config.json");
    } else {
        fp8 = formats::fp8_block_config_from_hf_json(config_json, dir + "/config.json");
    }
    m->safetensors =
        std::make_shared<formats::SafetensorsModel>(formats::SafetensorsModel::open_dir(dir));
    const formats::SafetensorsModel& st = *m->safetensors;
    if (opts.load_weights)
        util::prefetch_in_background(safetensors_prefetch_order(st, m->config.tied_embeddings));
    std::vector<formats::SourceTensor> all;
    for (const auto& t : st.tensors()) {
        // Count every tensor, even of dtypes the loader cannot convert. A compressed-tensors
        // Linear counts as its logical [rows, cols] weight: its packed int32 words hold 8 (or 4)
        // parameters each, and its scale / zero-point / shape tensors are quantization metadata.
        formats::SourceTensor s;
        s.name = t.name;
        s.dims = t.shape.empty() ? std::vector<int64_t>{1} : t.shape;
        s.is_ggml = false;
        s.st_dtype = t.dtype;
        if (ct) {
            const auto logical = formats::ct_logical_name(st, t.name);
            if (!logical) continue;
            if (*logical != t.name)
                if (auto w = formats::ct_find(st, *ct, *logical, false)) s.dims = w->dims;
        }
        all.push_back(s);
    }
    count_params(*m, all);
    formats::Fp8BlockResolver fp8_resolver(st, fp8);
    // Every Loader accessor turns the tensor it resolves into runtime memory (or owned vectors)
    // before it resolves the next one, so the f32 copy of the previous FP8 block-scaled weight can
    // go: loading an FP8 checkpoint holds one weight dequantized, not all of them (all of them
    // would be 4 bytes per parameter: 32 GB for an 8B model).
    auto find = [&fp8_resolver, &ct,
                 &st](const std::string& n) -> std::optional<formats::SourceTensor> {
        if (ct)
            if (auto t = formats::ct_find(st, *ct, n)) return t;
        fp8_resolver.release();
        return fp8_resolver.find(n);
    };
    // Without --weights, a pack-quantized checkpoint loads in its own format (bit-exact import)
    // rather than being expanded to the runtime dtype.
    LoadOptions eff = opts;
    if (ct && !opts.weights && opts.native_weights) {  // also without load_weights: `warden info`
        for (const auto& t : st.tensors()) {
            static const std::string kPacked = ".weight_packed";
            if (t.name.size() <= kPacked.size() || !t.name.ends_with(kPacked)) continue;
            const auto src = formats::ct_find(
                st, *ct, t.name.substr(0, t.name.size() - kPacked.size()) + ".weight");
            const auto& grp = ct->group_for(t.name.substr(0, t.name.size() - kPacked.size()));
            if (auto f = formats::ct_native_format(grp.weights, src->ct->scale_dtype)) {
                eff.weights = tensor::parse_weight_format(*f);
                m->weights_format = *f;
                m->weights_note = "auto: the compressed-tensors " +
                                  std::to_string(grp.weights.num_bits) +
                                  "-bit checkpoint's own format";
                // The embeddings and head (unquantized in these checkpoints) get the default
                // beside those layers (Loader::matrix), as with GGUF and with --weights, except a
                // bf16 embedding table that is not the head, which is looked up as stored.
                const formats::SafetensorsTensor* embed = st.find("model.embed_tokens.weight");
                const bool embed_stays = !m->config.tied_embeddings &&
                                         st.find("lm_head.weight") != nullptr && embed &&
                                         embed->dtype == "BF16";
                if (const auto head = tensor::default_head_format(*eff.weights);
                    head && !opts.head_weights)
                    m->weights_note += (embed_stays ? "; embeddings bf16 as stored, head as "
                                                    : "; embeddings/head as ") +
                                       tensor::weight_format_name(*head);
                m->weights_note += "; --weights chooses";
            }
            break;
        }
    }
    // Without --weights, FP8 block-scaled layers run as stored (fp8-bG: e4m3 codes, a scale per
    // block of G columns), rather than being widened to the runtime dtype at load (twice the
    // memory, and a conversion of every weight). Other tensors keep the runtime dtype.
    bool fp8_native = false;
    if (fp8 && !opts.weights && opts.native_weights) {
        if (auto f = formats::fp8_native_format(*fp8)) {
            fp8_native = true;
            m->weights_format = *f;
            m->weights_note = "auto: the FP8 checkpoint's e4m3 codes and " +
                              std::to_string(fp8->block_rows) + "x" +
                              std::to_string(fp8->block_cols) +
                              " block scales as stored; --weights chooses";
        }
    }
    const std::string tc = dir + "/tokenizer_config.json";
    if (std::filesystem::exists(tc)) {
        const auto j = util::read_json_file(tc);
        if (j.is_object() && j.contains("chat_template") && j["chat_template"].is_string())
            m->chat_template = j["chat_template"].get<std::string>();
    }
    auto exists = [&ct, &st](const std::string& n) {
        return st.find(n) != nullptr || (ct && formats::ct_find(st, *ct, n, false).has_value());
    };
    Loader loader(*m, eff, pool, find, hf_name, {}, exists);
    loader.fp8_native = fp8_native;
    loader.mapping_ = m->safetensors;
    if (mtp_target) {
        make_mtp_config(m->config);
        loader.load_mtp(*mtp_target);
    } else if (opts.load_weights) {
        loader.load_all();
    }
    release_tensor_pages(st.tensors(), loader.mapped_ranges_);
    m->deferred_layouts = loader.start_deferred_layouts();
    fp8_resolver.release();
    m->fp8_dequant_peak_bytes = static_cast<int64_t>(fp8_resolver.peak_bytes());
    m->fp8_dequant_count = fp8_resolver.dequant_count() - loader.fp8_native_matrices_;
    m->fp8_native_count = loader.fp8_native_matrices_;
    if (loader.ct_requant_rows_ > 0)
        std::fprintf(stderr,
                     "warden: compressed-tensors: %lld weight rows requantized through f32 to %s "
                     "(group, symmetry or "
                     "scale dtype does not map exactly), %lld imported bit-exactly\n",
                     static_cast<long long>(loader.ct_requant_rows_.load()),
                     m->weights_format.c_str(),
                     static_cast<long long>(loader.ct_exact_rows_.load()));
    return m;
}

}  // namespace

std::unique_ptr<Model> load_model(const std::string& path, const LoadOptions& opts,
                                  util::ThreadPool& pool) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) {
        if (!std::filesystem::exists(path + "/config.json"))
            throw Error(
                "'" + path +
                "' is a directory without config.json (not a Hugging Face model directory)");
        return load_hf_dir(path, opts, pool);
    }
    if (!std::filesystem::exists(path, ec)) throw Error("model '" + path + "' does not exist");
    return load_gguf(path, opts, pool);
}

std::unique_ptr<Model> load_mtp_model(const Model& target, const LoadOptions& options,
                                      util::ThreadPool& pool) {
    const NextnConfig& nx = target.config.nextn;
    if (nx.n_layers == 0)
        throw Error("model '" + target.path + "' (" + target.config.arch_name +
                    ") has no MTP layers (num_nextn_predict_layers / nextn_predict_layers is 0 "
                    "or absent): --spec mtp needs a DeepSeek-V3 / Kimi-K2 / GLM-4.5 checkpoint "
                    "that ships its nextn layer");
    LoadOptions o = options;
    o.load_weights = true;
    if (target.format == "safetensors") return load_hf_dir(target.path, o, pool, &target);
    return load_gguf(target.path, o, pool, &target);
}

}  // namespace warden::model
