#include "formats/safetensors_writer.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <numeric>

#include "util/error.h"
#include "util/replace_file.h"

namespace warden::formats {

namespace {
int64_t dtype_bytes(const std::string& d) {
    static const std::map<std::string, int64_t> sizes = {
        {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8},     {"I32", 4},
        {"I16", 2}, {"I8", 1},  {"U8", 1},  {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
    auto it = sizes.find(d);
    if (it == sizes.end()) throw util::Error("SafetensorsWriter: unknown dtype '" + d + "'");
    return it->second;
}
}  // namespace

void SafetensorsWriter::add_tensor(const std::string& name, const std::string& dtype,
                                   std::vector<int64_t> shape, std::vector<uint8_t> data) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    if (static_cast<int64_t>(data.size()) != n * dtype_bytes(dtype))
        throw util::Error("SafetensorsWriter: tensor '" + name + "' has " +
                          std::to_string(data.size()) + " bytes, its dtype and shape need " +
                          std::to_string(n * dtype_bytes(dtype)));
    for (const auto& t : tensors_)
        if (t.name == name) throw util::Error("SafetensorsWriter: duplicate tensor '" + name + "'");
    tensors_.push_back({name, dtype, std::move(shape), std::move(data)});
}

int64_t SafetensorsWriter::data_bytes() const {
    int64_t n = 0;
    for (const auto& t : tensors_) n += static_cast<int64_t>(t.data.size());
    return n;
}

void SafetensorsWriter::write(const std::string& path) const {
    // Data in decreasing element size (as the safetensors package writes it), so every tensor
    // starts aligned to its element size (the header is padded to 8 bytes).
    std::vector<size_t> order(tensors_.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
        return dtype_bytes(tensors_[a].dtype) > dtype_bytes(tensors_[b].dtype);
    });
    nlohmann::ordered_json h;
    h["__metadata__"] = metadata_;
    uint64_t off = 0;
    for (size_t i : order) {
        const Tensor& t = tensors_[i];
        h[t.name] = {
            {"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {off, off + t.data.size()}}};
        off += t.data.size();
    }
    std::string header = h.dump();
    while (header.size() % 8) header.push_back(' ');
    util::replace_file(path, [&](std::ostream& f) {
        uint64_t n = header.size();
        unsigned char len[8];
        for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
        f.write(reinterpret_cast<const char*>(len), 8);
        f.write(header.data(), static_cast<std::streamsize>(header.size()));
        for (size_t i : order)
            f.write(reinterpret_cast<const char*>(tensors_[i].data.data()),
                    static_cast<std::streamsize>(tensors_[i].data.size()));
    });
}

}  // namespace warden::formats
