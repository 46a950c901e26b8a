#pragma once
// Minimal GGUF v3 writer (used by `warden quantize`): metadata values as parsed by GGUFFile,
// tensors with ggml shapes/types and their bytes, data aligned to general.alignment (32).
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "model/gguf_file.h"

namespace warden::model {

class GGUFWriter {
public:
    // Adds or replaces a metadata value (insertion order is kept).
    void set(const std::string& key, const GGUFValue& v);
    void set_u32(const std::string& key, uint32_t v);
    // shape in ggml order (shape[0] contiguous); data must hold the tensor's bytes.
    void add_tensor(const std::string& name, std::vector<int64_t> shape, tensor::GgmlType type,
                    std::vector<uint8_t> data);
    // Writes the file (atomically: to path + ".tmp", then renamed). Throws util::Error.
    void write(const std::string& path) const;

private:
    struct Tensor {
        std::string name;
        std::vector<int64_t> shape;
        tensor::GgmlType type;
        std::vector<uint8_t> data;
    };
    std::vector<std::pair<std::string, GGUFValue>> kv_;
    std::vector<Tensor> tensors_;
};

}  // namespace warden::model
