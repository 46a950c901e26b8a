#pragma once
// Hugging Face safetensors reader: one file or a sharded set described by
// model.safetensors.index.json. Files are mmap'd; the JSON header is untrusted input and is
// validated (offsets in range, sizes consistent with dtype x shape, no overlaps or duplicates).
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "util/mapped_file.h"

namespace warden::formats {

struct SafetensorsTensor {
    std::string name;
    std::string dtype;           // as in the header: "F32", "F16", "BF16", "I8", "F8_E4M3", ...
    std::vector<int64_t> shape;  // row-major, outermost first (HF order)
    const uint8_t* data = nullptr;
    uint64_t n_bytes = 0;
    int64_t n_elements() const;
};

class SafetensorsModel {
  public:
    // `dir` holds model.safetensors, or model.safetensors.index.json plus the shards it names.
    static SafetensorsModel open_dir(const std::string& dir);
    // Explicit list of files (all tensors of all files; duplicate names are an error).
    explicit SafetensorsModel(const std::vector<std::string>& files);
    SafetensorsModel(SafetensorsModel&&) noexcept = default;
    SafetensorsModel& operator=(SafetensorsModel&&) noexcept = default;

    const SafetensorsTensor* find(const std::string& name) const;
    const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
    // "__metadata__" string map of the first file (may be empty).
    const std::map<std::string, std::string>& metadata() const { return metadata_; }
    // The files the tensors lie in, in the order they were opened.
    std::vector<std::string> file_paths() const;
    // Where t's bytes lie: its file and their offset in it (t one of tensors()).
    util::FileRange range_of(const SafetensorsTensor& t) const;

  private:
    SafetensorsModel() = default;
    void add_file(const std::string& path);

    std::vector<std::unique_ptr<util::MappedFile>> files_;
    std::vector<SafetensorsTensor> tensors_;
    std::map<std::string, size_t> index_;
    std::map<std::string, std::string> metadata_;
};

// Parses a safetensors buffer already in memory (fuzzing/tests); tensors point into `data`.
std::vector<SafetensorsTensor> parse_safetensors(const uint8_t* data, size_t size,
                                                 const std::string& name,
                                                 std::map<std::string, std::string>* metadata);

}  // namespace warden::formats
