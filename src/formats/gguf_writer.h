#pragma once
// Minimal GGUF v3 writer (used by `warden quantize`): metadata values as parsed by GGUFFile,
// tensors with ggml shapes/types and their bytes, data aligned to general.alignment (32).
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "formats/gguf_file.h"

namespace warden::formats {

class GGUFWriter {
  public:
    // Adds or replaces a metadata value (insertion order is kept).
    void set(const std::string& key, const GGUFValue& v);
    void set_u32(const std::string& key, uint32_t v);
    void set_string(const std::string& key, const std::string& v);
    void set_string_array(const std::string& key, const std::vector<std::string>& v);
    // Makes a tensor's bytes when write() reaches it.
    using Producer = std::function<std::vector<uint8_t>()>;
    // shape in ggml order (shape[0] contiguous); data must hold the tensor's bytes.
    void add_tensor(const std::string& name, std::vector<int64_t> shape, tensor::GgmlType type,
                    std::vector<uint8_t> data);
    // The same, with the bytes made by `produce` as write() reaches the tensor and dropped once
    // written, so writing a model holds one tensor's bytes rather than all of them (`warden
    // quantize` of a model larger than memory). A producer's exception, or bytes of the wrong
    // count, fail write().
    void add_tensor(const std::string& name, std::vector<int64_t> shape, tensor::GgmlType type,
                    Producer produce);
    // The same with bytes that stay valid until write() (a tensor copied from a mapped source):
    // written from where they are, no copy.
    void add_tensor_view(const std::string& name, std::vector<int64_t> shape, tensor::GgmlType type,
                         const uint8_t* data);
    // Writes the file (atomically: to path + ".tmp", then renamed; on failure the .tmp is
    // removed and nothing is at path). Throws util::Error, or what a producer threw.
    void write(const std::string& path) const;

  private:
    struct Tensor {
        std::string name;
        std::vector<int64_t> shape;
        tensor::GgmlType type;
        int64_t bytes = 0;
        std::vector<uint8_t> data;  // unless produce or view
        Producer produce;
        const uint8_t* view = nullptr;
    };
    static int64_t checked_bytes(const std::string& name, const std::vector<int64_t>& shape,
                                 tensor::GgmlType type);
    std::vector<std::pair<std::string, GGUFValue>> kv_;
    std::vector<Tensor> tensors_;
};

}  // namespace warden::formats
