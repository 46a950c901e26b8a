#pragma once
// GGUF reader (versions 2 and 3). The file is mmap'd; metadata is parsed into values and
// tensor descriptors point into the mapping. Every read is bounds-checked because model files
// are untrusted input: a corrupt file yields util::Error naming the problem, never UB.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tensor/ggml_types.h"
#include "util/mapped_file.h"

namespace warden::formats {

enum class GGUFValueType : uint32_t {
    UINT8 = 0,
    INT8 = 1,
    UINT16 = 2,
    INT16 = 3,
    UINT32 = 4,
    INT32 = 5,
    FLOAT32 = 6,
    BOOL = 7,
    STRING = 8,
    ARRAY = 9,
    UINT64 = 10,
    INT64 = 11,
    FLOAT64 = 12,
};

const char* gguf_value_type_name(GGUFValueType t);

// One metadata value. Integers keep their sign in the variant they were stored with; the
// accessors convert with range checks.
struct GGUFValue {
    GGUFValueType type = GGUFValueType::UINT8;
    uint64_t u = 0;                                  // unsigned ints and bool
    int64_t i = 0;                                   // signed ints
    double f = 0.0;                                  // floats
    std::string s;                                   // STRING
    GGUFValueType elem_type = GGUFValueType::UINT8;  // ARRAY element type
    std::vector<GGUFValue> arr;                      // ARRAY items

    bool is_integer() const;
    int64_t as_int(const std::string& what) const;   // throws if not an integer / out of range
    double as_float(const std::string& what) const;  // any numeric
    bool as_bool(const std::string& what) const;
    const std::string& as_string(const std::string& what) const;
};

struct GGUFTensor {
    std::string name;
    std::vector<int64_t> shape;  // ggml order: shape[0] is the contiguous (row) dimension
    tensor::GgmlType type;
    uint64_t offset = 0;  // relative to the data section
    const uint8_t* data = nullptr;
    uint64_t n_bytes = 0;

    int64_t n_elements() const;
};

class GGUFFile {
  public:
    // Maps and parses `path`. Throws util::Error on any malformed content.
    explicit GGUFFile(const std::string& path);
    // Parses an in-memory buffer that outlives this object (used by the fuzzer and tests).
    GGUFFile(const uint8_t* data, size_t size, std::string name = "<memory>");

    uint32_t version() const { return version_; }
    const std::string& path() const { return name_; }
    const std::map<std::string, GGUFValue>& metadata() const { return kv_; }
    const std::vector<GGUFTensor>& tensors() const { return tensors_; }

    bool has(const std::string& key) const { return kv_.count(key) != 0; }
    const GGUFValue* find(const std::string& key) const;
    const GGUFValue& get(const std::string& key) const;  // throws naming the missing key
    std::string get_string(const std::string& key) const;
    int64_t get_int(const std::string& key) const;
    std::optional<int64_t> get_int_opt(const std::string& key) const;
    std::optional<double> get_float_opt(const std::string& key) const;
    std::optional<bool> get_bool_opt(const std::string& key) const;
    std::vector<std::string> get_string_array(const std::string& key) const;
    std::vector<double> get_float_array(const std::string& key) const;
    std::vector<int64_t> get_int_array(const std::string& key) const;

    const GGUFTensor* find_tensor(const std::string& name) const;

  private:
    void parse(const uint8_t* data, size_t size);

    std::unique_ptr<util::MappedFile> file_;
    std::string name_;
    uint32_t version_ = 0;
    std::map<std::string, GGUFValue> kv_;
    std::vector<GGUFTensor> tensors_;
    std::map<std::string, size_t> tensor_index_;
};

}  // namespace warden::formats
