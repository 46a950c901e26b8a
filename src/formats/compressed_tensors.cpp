#include "formats/compressed_tensors.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "formats/safetensors_file.h"
#include "tensor/float_convert.h"
#include "tensor/weight_format.h"
#include "util/error.h"

namespace warden::formats {

using util::Error;

namespace {

std::string field_str(const nlohmann::json& j) {
    return j.dump();
}

CtWeightArgs parse_weight_args(const nlohmann::json& w, const std::string& where) {
    if (!w.is_object()) throw Error(where + ".weights is not an object");
    CtWeightArgs a;
    const std::string type = w.value("type", std::string("int"));
    if (type != "int")
        throw Error(where + ".weights.type is '" + type +
                    "' (only int weights are supported in pack-quantized)");
    if (!w.contains("num_bits") || !w.at("num_bits").is_number_integer())
        throw Error(where + ".weights.num_bits is missing or not an integer");
    a.num_bits = w.at("num_bits").get<int>();
    if (a.num_bits != 4 && a.num_bits != 8)
        throw Error(where + ".weights.num_bits is " + std::to_string(a.num_bits) +
                    " (supported: 4, 8)");
    if (w.contains("symmetric") && !w.at("symmetric").is_null()) {
        if (!w.at("symmetric").is_boolean())
            throw Error(where + ".weights.symmetric is not a boolean");
        a.symmetric = w.at("symmetric").get<bool>();
    }
    a.strategy = w.contains("strategy") && w.at("strategy").is_string()
                     ? w.at("strategy").get<std::string>()
                     : "";
    int64_t gs = 0;
    if (w.contains("group_size") && !w.at("group_size").is_null()) {
        if (!w.at("group_size").is_number_integer())
            throw Error(where + ".weights.group_size is not an integer");
        gs = w.at("group_size").get<int64_t>();
    }
    if (a.strategy.empty()) a.strategy = gs > 0 ? "group" : "channel";
    if (a.strategy == "group") {
        if (gs <= 0 || gs > (1 << 20))
            throw Error(where + ".weights.group_size is " + std::to_string(gs) +
                        " (group strategy needs a positive size)");
        a.group_size = gs;
    } else if (a.strategy == "channel") {
        if (a.num_bits == 4)
            throw Error(where +
                        ".weights.strategy 'channel' is not supported for 4-bit weights "
                        "(supported: group)");
        a.group_size = 0;
    } else {
        throw Error(where + ".weights.strategy '" + a.strategy +
                    "' is not supported (supported: group" +
                    std::string(a.num_bits == 8 ? ", channel" : "") + ")");
    }
    if (w.contains("actorder") && !w.at("actorder").is_null()) {
        const auto& ao = w.at("actorder");
        const bool ok = (ao.is_boolean() && !ao.get<bool>()) ||
                        (ao.is_string() &&
                         (ao.get<std::string>() == "weight" || ao.get<std::string>() == "static"));
        if (!ok)
            throw Error(where + ".weights.actorder " + field_str(ao) +
                        " is not supported (activation reordering with g_idx; supported: null, "
                        "\"weight\")");
    }
    if (w.contains("dynamic") && w.at("dynamic").is_boolean() && w.at("dynamic").get<bool>())
        throw Error(where + ".weights.dynamic is true (weights must be statically quantized)");
    return a;
}

// Python re.match semantics (anchored at the start only), with PCRE2 as the tokenizer uses it
// (std::regex is ECMAScript, not Python's dialect).
bool regex_prefix_match(const std::string& pattern, const std::string& s) {
    const std::string what = "compressed-tensors target/ignore regex '" + pattern + "'";
    int err = 0;
    PCRE2_SIZE err_off = 0;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                     PCRE2_ANCHORED | PCRE2_UTF, &err, &err_off, nullptr);
    if (!code) throw Error(what + " is not a valid regular expression");
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
    const int rc =
        md ? pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), 0, 0, md, nullptr)
           : PCRE2_ERROR_NOMEMORY;
    if (md) pcre2_match_data_free(md);
    pcre2_code_free(code);
    if (rc == PCRE2_ERROR_NOMATCH) return false;
    if (rc < 0)
        throw Error(what + ": matching '" + s + "' failed (PCRE2 error " + std::to_string(rc) +
                    ")");
    return true;
}

bool target_matches(const std::string& target, const std::string& module) {
    if (target.rfind("re:", 0) == 0) return regex_prefix_match(target.substr(3), module);
    if (target == "Linear") return true;  // every packed weight is a Linear's
    return target == module;
}

// dtype is one of F32 / F16 / BF16 (ct_find refuses others). Called per scale while loading, so
// it tells them apart by one character, not by string comparisons.
float scale_at(const uint8_t* p, const std::string& dtype, int64_t i) {
    if (dtype[1] == '3') {  // F32
        float f;
        std::memcpy(&f, p + 4 * i, 4);
        return f;
    }
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    return dtype[0] == 'B' ? tensor::bf16_to_f32(h) : tensor::f16_to_f32(h);
}

// Whether all n scales at p (dtype as scale_at's) are finite: one pass per dtype over the bits
// (exponent all ones: infinite or NaN), without a branch per scale, since a large checkpoint holds
// one scale per 32 or 128 weights and ct_find checks them all.
bool all_scales_finite(const uint8_t* p, const std::string& dtype, int64_t n) {
    if (dtype[1] == '3') {  // F32
        uint32_t bad = 0;
        for (int64_t i = 0; i < n; ++i) {
            uint32_t u;
            std::memcpy(&u, p + 4 * i, 4);
            bad |= static_cast<uint32_t>((u & 0x7f800000u) == 0x7f800000u);
        }
        return bad == 0;
    }
    const uint16_t exp = dtype[0] == 'B' ? 0x7f80 : 0x7c00;  // BF16 : F16
    uint32_t bad = 0;
    for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        bad |= static_cast<uint32_t>((h & exp) == exp);
    }
    return bad == 0;
}

std::string shape_str(const std::vector<int64_t>& d) {
    std::string s = "[";
    for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
    return s + "]";
}

}  // namespace

bool is_compressed_tensors_config(const nlohmann::json& j) {
    if (!j.is_object() || !j.contains("quantization_config")) return false;
    const auto& q = j.at("quantization_config");
    return q.is_object() && q.contains("quant_method") && q.at("quant_method").is_string() &&
           q.at("quant_method").get<std::string>() == "compressed-tensors";
}

namespace {
CtConfig parse_ct_config(const nlohmann::json& j, const std::string& path) {
    const auto& q = j.at("quantization_config");
    const std::string where = path + ": quantization_config";
    CtConfig c;
    const std::string fmt =
        q.contains("format") && q.at("format").is_string() ? q.at("format").get<std::string>() : "";
    auto check_format = [&](const std::string& f, const std::string& at) {
        if (f != "pack-quantized" && f != "dense")
            throw Error(at + ".format '" + f + "' is not supported (supported: pack-quantized)");
    };
    if (!fmt.empty()) check_format(fmt, where);
    if (!q.contains("config_groups") || !q.at("config_groups").is_object())
        throw Error(where + ".config_groups is missing or not an object");
    for (const auto& el : q.at("config_groups").items()) {
        const std::string gname = el.key();
        const nlohmann::json& g = el.value();
        const std::string gw = where + ".config_groups." + gname;
        if (!g.is_object()) throw Error(gw + " is not an object");
        if (g.contains("format") && g.at("format").is_string())
            check_format(g.at("format").get<std::string>(), gw);
        else if (fmt.empty())
            throw Error(where + ".format is missing");
        if (g.contains("input_activations") && !g.at("input_activations").is_null()) {
            const auto& ia = g.at("input_activations");
            if (ia.is_object() && ia.value("type", std::string("int")) == "float")
                throw Error(gw +
                            ".input_activations are float-quantized (not a pack-quantized scheme)");
            // Integer activation quantization (W4A8 / W8A8 schemes) is a runtime choice; warden
            // picks its own activation handling, the weights load the same.
        }
        CtGroup grp;
        grp.name = gname;
        if (!g.contains("weights") || g.at("weights").is_null())
            continue;  // activations-only group
        grp.weights = parse_weight_args(g.at("weights"), gw);
        if (g.contains("targets") && g.at("targets").is_array())
            for (const auto& t : g.at("targets"))
                if (t.is_string()) grp.targets.push_back(t.get<std::string>());
        if (grp.targets.empty()) throw Error(gw + ".targets is missing or empty");
        c.groups.push_back(std::move(grp));
    }
    if (q.contains("ignore") && q.at("ignore").is_array())
        for (const auto& t : q.at("ignore"))
            if (t.is_string()) c.ignore.push_back(t.get<std::string>());
    return c;
}
}  // namespace

CtConfig ct_config_from_hf_json(const nlohmann::json& j, const std::string& path) {
    try {
        return parse_ct_config(j, path);
    } catch (const nlohmann::json::exception& e) {
        throw Error(path +
                    ": malformed compressed-tensors quantization_config: " + std::string(e.what()));
    }
}

const CtGroup& CtConfig::group_for(const std::string& module) const {
    const CtGroup* found = nullptr;
    bool ambiguous = false;
    // Targets naming the module (exact or "re:") take precedence over the class target "Linear".
    bool specific = false;
    for (const auto& g : groups)
        for (const auto& t : g.targets)
            specific = specific || (t != "Linear" && target_matches(t, module));
    for (const auto& g : groups) {
        bool hit = false;
        for (const auto& t : g.targets)
            hit = hit || ((!specific || t != "Linear") && target_matches(t, module));
        if (!hit) continue;
        if (found && (found->weights.num_bits != g.weights.num_bits ||
                      found->weights.symmetric != g.weights.symmetric ||
                      found->weights.group_size != g.weights.group_size ||
                      found->weights.strategy != g.weights.strategy))
            ambiguous = true;
        if (!found) found = &g;
    }
    if (!found)
        throw Error("packed weight of module '" + module +
                    "' matches no quantization_config.config_groups target");
    if (ambiguous)
        throw Error(
            "packed weight of module '" + module +
            "' matches several quantization_config.config_groups with different weight arguments");
    return *found;
}

int CtPacked::code(int64_t r, int64_t c) const {
    return static_cast<int>(ct_unpack_code(packed + r * words_per_row * 4, c, num_bits)) -
           (1 << (num_bits - 1));
}

int CtPacked::zero_point(int64_t r, int64_t g) const {
    if (!zero) return 0;
    // Packed along the output dimension: column g of the [words, n_groups] tensor is the bit
    // stream of zp[0..rows)[g].
    const int64_t bit = r * num_bits;
    const int64_t word = bit / 32, off = bit % 32;
    uint32_t w;
    std::memcpy(&w, zero + (word * zero_cols + g) * 4, 4);
    uint32_t v = w >> off;
    if (off + num_bits > 32) {
        uint32_t w2;
        std::memcpy(&w2, zero + ((word + 1) * zero_cols + g) * 4, 4);
        v |= w2 << (32 - off);
    }
    return static_cast<int>(v & ((1u << num_bits) - 1)) - (1 << (num_bits - 1));
}

float CtPacked::scale_f32(int64_t r, int64_t g) const {
    return scale_at(scale, scale_dtype, r * n_groups() + g);
}

void CtPacked::dequant_row(int64_t r, float* out) const {
    const int64_t ng = n_groups();
    for (int64_t g = 0; g < ng; ++g) {
        const float s = scale_f32(r, g);
        const int z = zero_point(r, g);
        for (int64_t c = g * group; c < (g + 1) * group; ++c)
            out[c] = static_cast<float>(code(r, c) - z) * s;
    }
}

uint8_t ct_unpack_code(const uint8_t* words, int64_t i, int num_bits) {
    // Little-endian words: element i of a 4-bit stream is nibble i % 2 of byte i / 2, of an
    // 8-bit stream byte i.
    if (num_bits == 4) return static_cast<uint8_t>((words[i / 2] >> (4 * (i % 2))) & 0x0f);
    if (num_bits == 8) return words[i];
    const int64_t bit = i * num_bits;
    const int64_t word = bit / 32, off = bit % 32;
    uint32_t w;
    std::memcpy(&w, words + word * 4, 4);  // little-endian host (x86-64 / aarch64)
    uint32_t v = w >> off;
    if (off + num_bits > 32) {
        uint32_t w2;
        std::memcpy(&w2, words + (word + 1) * 4, 4);
        v |= w2 << (32 - off);
    }
    return static_cast<uint8_t>(v & ((1u << num_bits) - 1));
}

std::vector<uint32_t> ct_pack_codes(const uint8_t* codes, int64_t n, int num_bits) {
    std::vector<uint32_t> out(static_cast<size_t>((n * num_bits + 31) / 32), 0);
    for (int64_t i = 0; i < n; ++i) {
        const uint32_t v = codes[i] & ((1u << num_bits) - 1);
        const int64_t bit = i * num_bits;
        const auto word = static_cast<size_t>(bit / 32);
        const int64_t off = bit % 32;
        out[word] |= v << off;
        if (off + num_bits > 32) out[word + 1] |= v >> (32 - off);
    }
    return out;
}

std::optional<std::string> ct_logical_name(const SafetensorsModel& st, const std::string& name) {
    static const std::string kPacked = ".weight_packed";
    if (name.size() > kPacked.size() && name.ends_with(kPacked))
        return name.substr(0, name.size() - kPacked.size()) + ".weight";
    for (const char* meta :
         {".weight_scale", ".weight_zero_point", ".weight_shape", ".weight_g_idx"})
        if (name.ends_with(meta) && st.find(name.substr(0, name.rfind(".weight_")) + kPacked))
            return std::nullopt;
    return name;
}

std::optional<SourceTensor> ct_find(const SafetensorsModel& st, const CtConfig& cfg,
                                    const std::string& name, bool check_scales) {
    static const std::string kSuffix = ".weight";
    if (name.size() <= kSuffix.size() ||
        name.compare(name.size() - kSuffix.size(), kSuffix.size(), kSuffix) != 0)
        return std::nullopt;
    const std::string module = name.substr(0, name.size() - kSuffix.size());
    const SafetensorsTensor* p = st.find(module + ".weight_packed");
    if (!p) return std::nullopt;
    if (st.find(module + ".weight_g_idx"))
        throw Error("tensor '" + module +
                    ".weight_g_idx': activation-ordered (g_idx) weights are not supported");
    const CtGroup& grp = cfg.group_for(module);
    const CtWeightArgs& a = grp.weights;
    auto ct = std::make_shared<CtPacked>();
    ct->name = name;
    ct->num_bits = a.num_bits;
    // weight_shape: the logical [out, in].
    const std::string shn = module + ".weight_shape";
    const SafetensorsTensor* sh = st.find(shn);
    if (!sh) throw Error("packed weight '" + p->name + "' has no '" + shn + "'");
    if (sh->shape != std::vector<int64_t>{2} || (sh->dtype != "I64" && sh->dtype != "I32"))
        throw Error("'" + shn + "' must be I64 or I32 of shape [2], got " + sh->dtype + " " +
                    shape_str(sh->shape));
    int64_t dims[2];
    for (int i = 0; i < 2; ++i) {
        if (sh->dtype == "I64") {
            std::memcpy(&dims[i], sh->data + 8 * i, 8);
        } else {
            int32_t v;
            std::memcpy(&v, sh->data + 4 * i, 4);
            dims[i] = v;
        }
    }
    ct->rows = dims[0];
    ct->cols = dims[1];
    if (ct->rows <= 0 || ct->cols <= 0 || ct->rows > (int64_t{1} << 32) ||
        ct->cols > (int64_t{1} << 32))
        throw Error("'" + shn + "' holds an invalid shape [" + std::to_string(dims[0]) + ", " +
                    std::to_string(dims[1]) + "]");
    // weight_packed: I32 [out, ceil(in * bits / 32)].
    ct->words_per_row = (ct->cols * a.num_bits + 31) / 32;
    if (p->dtype != "I32")
        throw Error("'" + p->name + "' has dtype " + p->dtype +
                    " (pack-quantized weights are I32)");
    if (p->shape != std::vector<int64_t>{ct->rows, ct->words_per_row})
        throw Error("'" + p->name + "' has shape " + shape_str(p->shape) + ", expected [" +
                    std::to_string(ct->rows) + ", " + std::to_string(ct->words_per_row) +
                    "] for weight_shape " + shape_str({ct->rows, ct->cols}) + " at " +
                    std::to_string(a.num_bits) + " bits (config group '" + grp.name + "')");
    ct->packed = p->data;
    // weight_scale: [out, in / group] or [out, 1].
    ct->group = a.strategy == "channel" ? ct->cols : a.group_size;
    if (ct->cols % ct->group != 0)
        throw Error("'" + p->name + "': group_size " + std::to_string(ct->group) +
                    " (config group '" + grp.name + "') does not divide the " +
                    std::to_string(ct->cols) + " input columns");
    const std::string scn = module + ".weight_scale";
    const SafetensorsTensor* s = st.find(scn);
    if (!s) throw Error("packed weight '" + p->name + "' has no '" + scn + "'");
    if (s->dtype != "F32" && s->dtype != "F16" && s->dtype != "BF16")
        throw Error("'" + scn + "' has dtype " + s->dtype + " (supported: F32, F16, BF16)");
    if (s->shape != std::vector<int64_t>{ct->rows, ct->n_groups()})
        throw Error("'" + scn + "' has shape " + shape_str(s->shape) + ", expected " +
                    shape_str({ct->rows, ct->n_groups()}) + " (" + a.strategy +
                    " strategy, group_size " + std::to_string(ct->group) + ")");
    ct->scale = s->data;
    ct->scale_dtype = s->dtype;
    if (check_scales && !all_scales_finite(s->data, s->dtype, ct->rows * ct->n_groups()))
        throw Error("'" + scn + "' holds a non-finite scale");
    const std::string zpn = module + ".weight_zero_point";
    const SafetensorsTensor* z = st.find(zpn);
    if (!a.symmetric) {
        if (!z)
            throw Error("packed weight '" + p->name + "' is asymmetric (config group '" + grp.name +
                        "') but has no '" + zpn + "'");
        const int64_t zw = (ct->rows * a.num_bits + 31) / 32;
        if (z->dtype != "I32" || z->shape != std::vector<int64_t>{zw, ct->n_groups()})
            throw Error("'" + zpn + "' must be I32 of shape " + shape_str({zw, ct->n_groups()}) +
                        ", got " + z->dtype + " " + shape_str(z->shape));
        ct->zero = z->data;
        ct->zero_cols = ct->n_groups();
    }
    SourceTensor out;
    out.name = name;
    out.dims = {ct->rows, ct->cols};
    out.is_ggml = false;
    out.st_dtype = a.num_bits == 4 ? "I4" : "I8";
    out.data = nullptr;
    out.ct = std::move(ct);
    return out;
}

namespace {
// f32 -> stored scale bits of `layout`, when exactly representable.
std::optional<uint16_t> exact_scale(const kernels::WeightMatrix& w, double v) {
    const float f = static_cast<float>(v);
    if (static_cast<double>(f) != v || !std::isfinite(f)) return std::nullopt;
    const uint16_t b = w.bf16_scales ? tensor::f32_to_bf16(f) : tensor::f32_to_f16(f);
    if (kernels::quant_scale_to_f32(w, b) != f) return std::nullopt;
    return b;
}
}  // namespace

bool ct_q4_codes_map(const CtPacked& t, const kernels::WeightMatrix& w) {
    return w.type == tensor::WeightType::Q4 && w.cols == t.cols && t.num_bits == 4 && w.group > 0 &&
           t.group % w.group == 0 && (!t.zero || w.asym);
}

bool ct_q4_rows_in_place(const CtPacked& t, const kernels::WeightMatrix& w) {
    return ct_q4_codes_map(t, w) && !t.zero && !w.asym && !w.act_f32 && w.group == t.group &&
           t.scale_dtype == (w.bf16_scales ? "BF16" : "F16") && t.words_per_row * 8 == t.cols;
}

bool ct_import_q4_scales(const CtPacked& t, int64_t r, const kernels::WeightMatrix& w, uint16_t* d,
                         uint16_t* m) {
    util::check(ct_q4_codes_map(t, w), "ct_import_q4_scales: the codes do not map");
    // Symmetric scales stored in the layout's own dtype are its bits (their finiteness checked
    // by ct_find), each source group's scale repeated over the layout's groups it spans.
    if (!w.asym && t.scale_dtype == (w.bf16_scales ? "BF16" : "F16")) {
        const int64_t ng = t.n_groups(), rep = t.group / w.group;  // ct_q4_codes_map: whole
        const uint8_t* row = t.scale + r * ng * 2;
        if (rep == 1) {
            std::memcpy(d, row, static_cast<size_t>(ng) * 2);
            return true;
        }
        for (int64_t tg = 0; tg < ng; ++tg)
            for (int64_t j = 0; j < rep; ++j) std::memcpy(d + tg * rep + j, row + tg * 2, 2);
        return true;
    }
    for (int64_t g = 0; g < w.cols / w.group; ++g) {
        const int64_t tg = g * w.group / t.group;
        const double s = t.scale_f32(r, tg);
        const auto sd = exact_scale(w, s);
        if (!sd) return false;
        d[g] = *sd;
        if (w.asym) {
            // w = (u - 8 - z) * s = fma(u, s, m) with m = -(8 + z) * s.
            const auto sm = exact_scale(w, -static_cast<double>(8 + t.zero_point(r, tg)) * s);
            if (!sm) return false;
            m[g] = *sm;
        }
    }
    return true;
}

std::optional<kernels::QuantRow> ct_import_row(const CtPacked& t, int64_t r,
                                               const kernels::WeightMatrix& w) {
    if (w.cols != t.cols) return std::nullopt;
    kernels::QuantRow row;
    if (w.type == tensor::WeightType::Q4) {
        if (!ct_q4_codes_map(t, w)) return std::nullopt;
        const int64_t ng = w.cols / w.group;
        row.q.resize(static_cast<size_t>(w.cols));
        row.d.resize(static_cast<size_t>(ng));
        if (w.asym) row.m.resize(static_cast<size_t>(ng));
        if (!ct_import_q4_scales(t, r, w, row.d.data(), row.m.data())) return std::nullopt;
        const uint8_t* words = t.packed + r * t.words_per_row * 4;
        for (int64_t c = 0; c < w.cols; ++c)
            row.q[static_cast<size_t>(c)] = ct_unpack_code(words, c, 4);  // q + 8
        return row;
    }
    if (w.type == tensor::WeightType::Q8) {
        if (t.num_bits != 8 || t.zero) return std::nullopt;
        // One scale per row (int8) or per 32 columns (int8-g32): every source group a block
        // spans must carry that block's scale.
        const int64_t span = w.group == 0 ? w.cols : 32;
        row.d.resize(static_cast<size_t>(w.cols / span));
        for (int64_t b = 0; b < w.cols / span; ++b) {
            const double s = t.scale_f32(r, b * span / t.group);
            for (int64_t g = b * span / t.group + 1; g <= (b * span + span - 1) / t.group; ++g)
                if (t.scale_f32(r, g) != s) return std::nullopt;
            auto d = exact_scale(w, s);
            if (!d) return std::nullopt;
            row.d[static_cast<size_t>(b)] = *d;
        }
        row.q.resize(static_cast<size_t>(w.cols));
        for (int64_t c = 0; c < w.cols; ++c)  // int8 bits; -128 included (kernels/matmul_quant.h)
            row.q[static_cast<size_t>(c)] = static_cast<uint8_t>(static_cast<int8_t>(t.code(r, c)));
        return row;
    }
    return std::nullopt;
}

std::optional<std::string> ct_native_format(const CtWeightArgs& a, const std::string& scale_dtype) {
    tensor::WeightFormat f;
    if (a.num_bits == 8) {
        if (!a.symmetric) return std::nullopt;
        f.type = tensor::WeightType::Q8;
        if (a.strategy == "channel") {
            f.group = 0;
        } else if (a.group_size % 32 == 0) {
            f.group = 32;
        } else {
            return std::nullopt;
        }
    } else {
        f.type = tensor::WeightType::Q4;
        if (a.group_size % 128 == 0) {
            f.group = 128;
        } else if (a.group_size % 32 == 0) {
            f.group = 32;
        } else {
            return std::nullopt;
        }
        f.asym = !a.symmetric;
    }
    f.bf16_scales = scale_dtype == "BF16";
    return tensor::weight_format_name(f);
}

}  // namespace warden::formats
