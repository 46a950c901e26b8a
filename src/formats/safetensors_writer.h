#pragma once
// Minimal safetensors writer (used by `warden quantize` for compressed-tensors output): an
// 8-byte little-endian header length, the JSON header ({name: {dtype, shape, data_offsets}},
// "__metadata__": {"format": "pt", ...}) padded with spaces to a multiple of 8, then the tensor
// bytes back to back in insertion order.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace warden::formats {

class SafetensorsWriter {
  public:
    // dtype as in the safetensors header ("F32", "BF16", "I32", "I64", ...); data must hold
    // exactly n_elements(shape) * dtype size bytes. Duplicate names are an error.
    void add_tensor(const std::string& name, const std::string& dtype, std::vector<int64_t> shape,
                    std::vector<uint8_t> data);
    void set_metadata(const std::string& key, const std::string& value) { metadata_[key] = value; }
    int64_t data_bytes() const;
    // Writes the file (to path + ".tmp", then renamed; on failure the .tmp is removed). Throws
    // util::Error.
    void write(const std::string& path) const;

  private:
    struct Tensor {
        std::string name, dtype;
        std::vector<int64_t> shape;
        std::vector<uint8_t> data;
    };
    std::vector<Tensor> tensors_;
    std::map<std::string, std::string> metadata_{{"format", "pt"}};
};

}  // namespace warden::formats
