#include "quant/imatrix.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>

#include "formats/gguf_file.h"
#include "util/error.h"
#include "util/mapped_file.h"

namespace warden::quant {

namespace {

// Bounds far above any real model (a name is a GGUF tensor name; a row is a matrix's input width;
// DeepSeek-V3's stacked experts are 256 x 7168 columns) that keep a corrupt count from asking for
// gigabytes before the size check.
constexpr int32_t kMaxName = 4096;
constexpr int32_t kMaxValues = 1 << 26;

class Reader {
  public:
    Reader(const uint8_t* d, size_t n, const std::string& name) : d_(d), n_(n), name_(name) {}
    bool at_end() const { return pos_ == n_; }
    size_t left() const { return n_ - pos_; }
    int32_t i32(const std::string& what) {
        need(4, what);
        int32_t v;
        std::memcpy(&v, d_ + pos_, 4);
        pos_ += 4;
        return v;
    }
    const uint8_t* bytes(size_t k, const std::string& what) {
        need(k, what);
        const uint8_t* p = d_ + pos_;
        pos_ += k;
        return p;
    }
    [[noreturn]] void fail(const std::string& why) const {
        throw util::Error("imatrix '" + name_ + "': " + why + " (at byte " + std::to_string(pos_) +
                          ")");
    }

  private:
    void need(size_t k, const std::string& what) const {
        if (k > left())
            fail("truncated: " + what + " needs " + std::to_string(k) + " bytes, " +
                 std::to_string(left()) + " left");
    }
    const uint8_t* d_;
    size_t n_;
    size_t pos_ = 0;
    const std::string& name_;
};

bool all_printable(const uint8_t* p, size_t n) {
    return std::all_of(p, p + n, [](uint8_t c) { return c >= 32 && c < 127; });
}

std::string printable(const uint8_t* p, size_t n) {
    std::string s;
    for (size_t i = 0; i < n && s.size() < 80; ++i)
        s += p[i] >= 32 && p[i] < 127 ? static_cast<char>(p[i]) : '?';
    return s;
}

}  // namespace

const float* Imatrix::find(const std::string& tensor, int64_t cols) const {
    if (const size_t br = tensor.rfind('['); br != std::string::npos && tensor.back() == ']') {
        const std::string idx = tensor.substr(br + 1, tensor.size() - br - 2),
                          base = tensor.substr(0, br);
        if (idx.empty() || idx.size() > 9 ||
            idx.find_first_not_of("0123456789") != std::string::npos)
            throw util::Error("imatrix: '" + tensor + "' is not an expert name");
        const auto it = entries.find(base);
        if (it == entries.end()) return nullptr;
        const int64_t e = std::stoll(idx), n = static_cast<int64_t>(it->second.size());
        if (cols <= 0 || n % cols != 0 || e >= n / cols)
            throw util::Error("imatrix: entry '" + base + "' has " + std::to_string(n) +
                              " values, not " + std::to_string(cols) +
                              " for each expert up to expert " + std::to_string(e) +
                              " (an importance matrix of another model?)");
        return it->second.data() + e * cols;
    }
    const auto it = entries.find(tensor);
    if (it == entries.end()) return nullptr;
    if (static_cast<int64_t>(it->second.size()) != cols)
        throw util::Error("imatrix: entry '" + tensor + "' has " +
                          std::to_string(it->second.size()) + " values, the tensor has " +
                          std::to_string(cols) +
                          " columns (an importance matrix of another model?)");
    return it->second.data();
}

namespace {

// The GGUF imatrix of llama.cpp since mid-2025 (tools/imatrix/imatrix.cpp save_imatrix; read by
// tools/quantize/quantize.cpp load_imatrix): metadata imatrix.datasets (strings),
// imatrix.chunk_count and imatrix.chunk_size; per weight matrix NAME an F32 tensor NAME.in_sum2 of
// ggml shape [cols, n_mat] (sums of squared inputs; n_mat is the expert count of a stacked MoE
// tensor, else 1) and an F32 tensor NAME.counts of n_mat values (tokens seen by each matrix). The
// importance is in_sum2 / count per matrix, and 1 for a matrix that saw no token, as llama-quantize
// computes it. Other tensors are ignored, as there.
[[noreturn]] void gguf_fail(const std::string& name, const std::string& why) {
    throw util::Error("imatrix '" + name + "' (GGUF): " + why);
}

Imatrix parse_gguf_imatrix(const uint8_t* data, size_t size, const std::string& name) {
    std::unique_ptr<formats::GGUFFile> g;
    try {
        g = std::make_unique<formats::GGUFFile>(data, size, name);
    } catch (const util::Error& e) {
        throw util::Error("imatrix '" + name + "': not a readable GGUF: " + e.what());
    }
    for (const char* key : {"imatrix.datasets", "imatrix.chunk_count", "imatrix.chunk_size"})
        if (!g->has(key))
            gguf_fail(name, std::string("no '") + key +
                                "' metadata: not an importance matrix (a model file?)");
    Imatrix m;
    int64_t chunks = 0;
    std::vector<std::string> datasets;
    try {
        chunks = g->get_int("imatrix.chunk_count");
        datasets = g->get_string_array("imatrix.datasets");
    } catch (const util::Error& e) {
        gguf_fail(name, std::string("bad metadata: ") + e.what());
    }
    if (chunks < 0 || chunks > INT32_MAX)
        gguf_fail(name, "imatrix.chunk_count " + std::to_string(chunks));
    m.chunks = static_cast<int32_t>(chunks);
    for (const std::string& d : datasets) {
        if (!m.dataset.empty()) m.dataset += ", ";
        m.dataset += printable(reinterpret_cast<const uint8_t*>(d.data()), d.size());
    }
    std::map<std::string, std::pair<const formats::GGUFTensor*, const formats::GGUFTensor*>>
        pairs;  // sums, counts
    for (const formats::GGUFTensor& t : g->tensors()) {
        if (t.name.ends_with(".in_sum2"))
            pairs[t.name.substr(0, t.name.size() - 8)].first = &t;
        else if (t.name.ends_with(".counts"))
            pairs[t.name.substr(0, t.name.size() - 7)].second = &t;
    }
    for (const auto& [tensor, sc] : pairs) {
        const auto [sums, counts] = sc;
        if (tensor.empty()) gguf_fail(name, "a tensor named only '.in_sum2' or '.counts'");
        const auto* tp = reinterpret_cast<const uint8_t*>(tensor.data());
        if (!all_printable(tp, tensor.size()))  // as the legacy reader: messages quote names
            gguf_fail(name,
                      "tensor name is not printable ('" + printable(tp, tensor.size()) + "')");
        if (!sums || !counts)
            gguf_fail(name, "'" + tensor + "' has " +
                                (sums ? "sums but no .counts" : "counts but no .in_sum2"));
        if (sums->type != tensor::GgmlType::F32 || counts->type != tensor::GgmlType::F32)
            gguf_fail(name, "'" + tensor + "': sums and counts must be F32");
        if (sums->shape.empty() || sums->shape.size() > 2)
            gguf_fail(name, "'" + tensor + "': sums of rank " + std::to_string(sums->shape.size()));
        const int64_t cols = sums->shape[0], n_mat = sums->shape.size() == 2 ? sums->shape[1] : 1;
        if (cols < 1 || n_mat < 1 || sums->n_elements() > kMaxValues)
            gguf_fail(name, "'" + tensor + "': sums of " + std::to_string(sums->n_elements()) +
                                " values");
        if (counts->n_elements() != n_mat)
            gguf_fail(name, "'" + tensor + "': " + std::to_string(counts->n_elements()) +
                                " counts for " + std::to_string(n_mat) + " matrices");
        std::vector<float> v(static_cast<size_t>(cols * n_mat));
        std::memcpy(v.data(), sums->data, v.size() * 4);
        std::vector<float> c(static_cast<size_t>(n_mat));
        std::memcpy(c.data(), counts->data, c.size() * 4);
        for (int64_t j = 0; j < n_mat; ++j) {
            const float cnt = c[static_cast<size_t>(j)];
            if (!std::isfinite(cnt) || cnt < 0.0f)
                gguf_fail(name, "'" + tensor + "': count " + std::to_string(j) + " is " +
                                    std::to_string(cnt));
            for (int64_t i = 0; i < cols; ++i) {
                float& x = v[static_cast<size_t>(j * cols + i)];
                if (!std::isfinite(x) || x < 0.0f)
                    gguf_fail(name, "'" + tensor + "': value " + std::to_string(j * cols + i) +
                                        " is " + std::to_string(x) +
                                        " (must be finite and non-negative)");
                x = mean_square_importance(x, cnt);
                if (!std::isfinite(x))
                    gguf_fail(name, "'" + tensor + "': value " + std::to_string(j * cols + i) +
                                        " / count " + std::to_string(cnt) + " overflows");
            }
        }
        m.entries.emplace(tensor, std::move(v));
    }
    if (m.entries.empty()) gguf_fail(name, "no .in_sum2 / .counts entries");
    return m;
}

}  // namespace

Imatrix parse_imatrix(const uint8_t* data, size_t size, const std::string& name) {
    if (size >= 4 && std::memcmp(data, "GGUF", 4) == 0) return parse_gguf_imatrix(data, size, name);
    Reader r(data, size, name);
    Imatrix m;
    const int32_t n_entries = r.i32("the entry count");
    if (n_entries < 1) r.fail("no entries (count " + std::to_string(n_entries) + ")");
    // Each entry takes at least 17 bytes (len, a name byte, ncall, nval, one value: 4 + 1 + 4 + 4 +
    // 4).
    if (static_cast<uint64_t>(n_entries) > r.left() / 17)
        r.fail(std::to_string(n_entries) + " entries cannot fit in the file");
    for (int32_t e = 0; e < n_entries; ++e) {
        const std::string at = "entry " + std::to_string(e + 1);
        const int32_t len = r.i32(at + " name length");
        if (len < 1 || len > kMaxName) r.fail(at + ": name length " + std::to_string(len));
        const uint8_t* np = r.bytes(static_cast<size_t>(len), at + " name");
        if (!all_printable(np, static_cast<size_t>(len)))
            r.fail(at + ": name is not printable ('" + printable(np, static_cast<size_t>(len)) +
                   "')");
        std::string tensor(reinterpret_cast<const char*>(np), static_cast<size_t>(len));
        const int32_t ncall = r.i32(at + " call count");
        const int32_t nval = r.i32(at + " value count");
        if (ncall < 0) r.fail("'" + tensor + "': call count " + std::to_string(ncall));
        if (nval < 1 || nval > kMaxValues)
            r.fail("'" + tensor + "': value count " + std::to_string(nval));
        const uint8_t* vp = r.bytes(static_cast<size_t>(nval) * 4, "'" + tensor + "' values");
        std::vector<float> v(static_cast<size_t>(nval));
        std::memcpy(v.data(), vp, v.size() * 4);
        for (int32_t i = 0; i < nval; ++i) {
            if (!std::isfinite(v[static_cast<size_t>(i)]) || v[static_cast<size_t>(i)] < 0.0f)
                r.fail("'" + tensor + "': value " + std::to_string(i) + " is " +
                       std::to_string(v[static_cast<size_t>(i)]) +
                       " (must be finite and non-negative)");
            if (ncall > 0) v[static_cast<size_t>(i)] /= static_cast<float>(ncall);
        }
        if (m.entries.contains(tensor)) r.fail("entry '" + tensor + "' appears twice");
        m.entries.emplace(std::move(tensor), std::move(v));
    }
    if (r.at_end()) return m;  // files of the oldest tool end here
    m.chunks = r.i32("the chunk count");
    if (r.at_end()) return m;
    const int32_t dlen = r.i32("the dataset name length");
    if (dlen < 0 || dlen > kMaxName) r.fail("dataset name length " + std::to_string(dlen));
    const uint8_t* dp = r.bytes(static_cast<size_t>(dlen), "the dataset name");
    m.dataset = printable(dp, static_cast<size_t>(dlen));
    if (!r.at_end()) r.fail(std::to_string(r.left()) + " bytes after the dataset name");
    return m;
}

Imatrix read_imatrix(const std::string& path) {
    const util::MappedFile f(path);
    return parse_imatrix(f.data(), f.size(), path);
}

}  // namespace warden::quant
