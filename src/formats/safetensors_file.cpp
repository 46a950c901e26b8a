#include "formats/safetensors_file.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "util/error.h"

namespace warden::formats {

using nlohmann::json;
using util::Error;

namespace {

// The header is untrusted: cap its size (the reference implementation uses the same 100 MB
// limit) and its nesting (a valid header is at most 3 levels deep).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr int kMaxJsonDepth = 16;
// No tensor can have more bytes than this; keeps every size computation far from overflow.
constexpr uint64_t kMaxTensorBytes = uint64_t{1} << 56;

using util::printable;

[[noreturn]] void fail(const std::string& file, const std::string& what) {
    throw Error("safetensors '" + printable(file, 4096) + "': " + what);
}

// Bytes per element of a safetensors dtype, 0 if unknown.
uint64_t dtype_size(const std::string& dtype) {
    static const std::pair<const char*, uint64_t> kSizes[] = {
        {"F64", 8}, {"F32", 4}, {"F16", 2},  {"BF16", 2},    {"I64", 8},
        {"I32", 4}, {"I16", 2}, {"I8", 1},   {"U64", 8},     {"U32", 4},
        {"U16", 2}, {"U8", 1},  {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1},
    };
    for (const auto& [name, size] : kSizes)
        if (dtype == name) return size;
    return 0;
}

// Rejects JSON nested deeper than kMaxJsonDepth, and NUL bytes, before the parser sees them.
void precheck_json(const char* p, size_t n, const std::string& file, const char* what) {
    int depth = 0;
    bool in_string = false;
    for (size_t i = 0; i < n; ++i) {
        const char c = p[i];
        // nlohmann treats a NUL byte as the end of the input and would ignore whatever follows.
        if (c == '\0') fail(file, std::string(what) + " contains a NUL byte");
        if (in_string) {
            if (c == '\\')
                ++i;
            else if (c == '"')
                in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '{' || c == '[') {
            if (++depth > kMaxJsonDepth) fail(file, std::string(what) + " is nested too deeply");
        } else if (c == '}' || c == ']') {
            --depth;
        }
    }
}

// Parses untrusted JSON; duplicate keys in any object are an error (nlohmann would silently
// keep the last one, so two readers could disagree about the same file).
json parse_json(const char* p, size_t n, const std::string& file, const char* what) {
    precheck_json(p, n, file, what);
    std::vector<std::set<std::string>> keys;  // one set per open object
    bool duplicate = false;
    std::string duplicate_key;
    json::parser_callback_t cb = [&](int /*depth*/, json::parse_event_t event, json& parsed) {
        switch (event) {
            case json::parse_event_t::object_start:
                keys.emplace_back();
                break;
            case json::parse_event_t::object_end:
                if (!keys.empty()) keys.pop_back();
                break;
            case json::parse_event_t::key:
                if (!keys.empty() && parsed.is_string() &&
                    !keys.back().insert(parsed.get_ref<const std::string&>()).second &&
                    !duplicate) {
                    duplicate = true;
                    duplicate_key = parsed.get_ref<const std::string&>();
                }
                break;
            default:
                break;
        }
        return true;
    };
    json j;
    try {
        j = json::parse(p, p + n, cb);
    } catch (const json::exception& e) {
        fail(file, std::string(what) + " is not valid JSON: " + printable(e.what(), 400));
    }
    if (duplicate)
        fail(file, std::string(what) + " has duplicate key '" + printable(duplicate_key) + "'");
    return j;
}

// A non-negative JSON integer (not a float, not a bool).
bool get_u64(const json& v, uint64_t& out) {
    if (v.is_number_unsigned()) {
        out = v.get<uint64_t>();
        return true;
    }
    if (v.is_number_integer()) {
        const auto i = v.get<int64_t>();
        if (i < 0) return false;
        out = static_cast<uint64_t>(i);
        return true;
    }
    return false;
}

struct Range {
    uint64_t begin, end;
    size_t index;
};

}  // namespace

int64_t SafetensorsTensor::n_elements() const {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
}

std::vector<SafetensorsTensor> parse_safetensors(const uint8_t* data, size_t size,
                                                 const std::string& name,
                                                 std::map<std::string, std::string>* metadata) {
    if (size < 8)
        fail(name, "file of " + std::to_string(size) + " bytes is too short for a header");
    uint64_t header_len = 0;
    for (int k = 7; k >= 0; --k) header_len = (header_len << 8) | data[k];
    if (header_len > kMaxHeaderBytes)
        fail(name, "header length " + std::to_string(header_len) + " is larger than the limit");
    if (header_len > size - 8)
        fail(name, "header length " + std::to_string(header_len) + " exceeds the file size " +
                       std::to_string(size) + " (truncated?)");
    if (header_len < 2) fail(name, "header of " + std::to_string(header_len) + " bytes is empty");

    const auto* hp = reinterpret_cast<const char*>(data + 8);
    if (hp[0] != '{') fail(name, "header does not start with '{'");
    const json header = parse_json(hp, static_cast<size_t>(header_len), name, "header");
    if (!header.is_object()) fail(name, "header is not a JSON object");

    const uint8_t* body = data + 8 + header_len;
    const uint64_t body_size = size - 8 - header_len;

    std::vector<SafetensorsTensor> tensors;
    std::vector<Range> ranges;
    for (const auto& [key, value] : header.items()) {
        if (key == "__metadata__") {
            if (!value.is_object()) fail(name, "__metadata__ is not a JSON object");
            for (const auto& [mk, mv] : value.items()) {
                if (!mv.is_string())
                    fail(name, "__metadata__ value '" + printable(mk) + "' is not a string");
                if (metadata) (*metadata)[mk] = mv.get<std::string>();
            }
            continue;
        }
        const std::string where = "tensor '" + printable(key) + "'";
        if (!value.is_object()) fail(name, where + " is not a JSON object");
        for (const auto& [field, unused] : value.items())
            if (field != "dtype" && field != "shape" && field != "data_offsets")
                fail(name, where + " has unknown field '" + printable(field) + "'");
        const auto dt = value.find("dtype");
        const auto sh = value.find("shape");
        const auto of = value.find("data_offsets");
        if (dt == value.end() || !dt->is_string()) fail(name, where + " has no string 'dtype'");
        if (sh == value.end() || !sh->is_array()) fail(name, where + " has no array 'shape'");
        if (of == value.end() || !of->is_array() || of->size() != 2)
            fail(name, where + " has no 'data_offsets' pair");

        SafetensorsTensor t;
        t.name = key;
        t.dtype = dt->get<std::string>();
        const uint64_t esize = dtype_size(t.dtype);
        if (esize == 0) fail(name, where + " has unknown dtype '" + printable(t.dtype) + "'");

        uint64_t n_el = 1;
        for (const auto& d : *sh) {
            uint64_t dim = 0;
            if (!get_u64(d, dim))
                fail(name, where + " has a shape entry that is not a non-negative integer");
            if (dim > kMaxTensorBytes) fail(name, where + " has dimension " + std::to_string(dim));
            // n_el * dim stays <= kMaxTensorBytes; a zero dimension makes everything fit.
            if (dim != 0 && n_el > kMaxTensorBytes / dim) fail(name, where + " is too large");
            n_el *= dim;
            t.shape.push_back(static_cast<int64_t>(dim));
        }
        if (n_el > kMaxTensorBytes / esize) fail(name, where + " is too large");

        uint64_t begin = 0, end = 0;
        if (!get_u64((*of)[0], begin) || !get_u64((*of)[1], end))
            fail(name, where + " data_offsets are not non-negative integers");
        if (begin > end)
            fail(name, where + " data_offsets [" + std::to_string(begin) + ", " +
                           std::to_string(end) + "] are reversed");
        if (end > body_size)
            fail(name, where + " data [" + std::to_string(begin) + ", " + std::to_string(end) +
                           ") lies past the end of the data section (" + std::to_string(body_size) +
                           " bytes; truncated?)");
        if (end - begin != n_el * esize)
            fail(name, where + " has " + std::to_string(end - begin) + " bytes but " + t.dtype +
                           " x " + std::to_string(n_el) + " elements needs " +
                           std::to_string(n_el * esize));
        t.data = body + begin;
        t.n_bytes = end - begin;
        ranges.push_back({begin, end, tensors.size()});
        tensors.push_back(std::move(t));
    }

    // No two tensors may share a byte (empty tensors own no bytes and cannot overlap).
    std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
        return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
    });
    const Range* prev = nullptr;
    for (const auto& r : ranges) {
        if (r.begin == r.end) continue;
        if (prev && r.begin < prev->end)
            fail(name, "tensors '" + printable(tensors[prev->index].name) + "' and '" +
                           printable(tensors[r.index].name) + "' overlap");
        prev = &r;
    }
    return tensors;
}

SafetensorsModel::SafetensorsModel(const std::vector<std::string>& files) {
    for (const auto& f : files) add_file(f);
}

void SafetensorsModel::add_file(const std::string& path) {
    auto file = std::make_unique<util::MappedFile>(path);
    std::map<std::string, std::string> meta;
    auto tensors = parse_safetensors(file->data(), file->size(), path, &meta);
    if (files_.empty()) metadata_ = std::move(meta);
    for (auto& t : tensors) {
        auto it = index_.find(t.name);
        if (it != index_.end()) {
            std::string other = "?";
            const uint8_t* p = tensors_[it->second].data;
            for (const auto& f : files_)
                if (p >= f->data() && p <= f->data() + f->size()) other = f->path();
            fail(path,
                 "tensor '" + printable(t.name) + "' is also in '" + printable(other, 4096) + "'");
        }
        index_.emplace(t.name, tensors_.size());
        tensors_.push_back(std::move(t));
    }
    files_.push_back(std::move(file));
}

std::vector<std::string> SafetensorsModel::file_paths() const {
    std::vector<std::string> out;
    out.reserve(files_.size());
    for (const auto& f : files_) out.push_back(f->path());
    return out;
}

util::FileRange SafetensorsModel::range_of(const SafetensorsTensor& t) const {
    for (const auto& f : files_)
        if (t.data >= f->data() && t.data + t.n_bytes <= f->data() + f->size())
            return {f->path(), static_cast<uint64_t>(t.data - f->data()), t.n_bytes};
    throw util::Error("safetensors: tensor '" + t.name + "' lies in none of the model's files");
}

const SafetensorsTensor* SafetensorsModel::find(const std::string& name) const {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : &tensors_[it->second];
}

SafetensorsModel SafetensorsModel::open_dir(const std::string& dir) {
    namespace fs = std::filesystem;
    std::error_code ec;
    const fs::path base(dir);
    const fs::path single = base / "model.safetensors";
    if (fs::is_regular_file(single, ec)) {
        SafetensorsModel m;
        m.add_file(single.string());
        return m;
    }
    const fs::path index_path = base / "model.safetensors.index.json";
    if (!fs::is_regular_file(index_path, ec))
        throw Error("safetensors directory '" + printable(dir, 4096) +
                    "': neither model.safetensors nor model.safetensors.index.json found");

    const std::string ipath = index_path.string();
    std::map<std::string, std::string> weight_map;  // tensor -> shard
    std::set<std::string> shards;
    {
        util::MappedFile index_file(ipath);
        if (index_file.size() > kMaxHeaderBytes) fail(ipath, "index file is too large");
        const json index = parse_json(reinterpret_cast<const char*>(index_file.data()),
                                      index_file.size(), ipath, "index");
        if (!index.is_object()) fail(ipath, "index is not a JSON object");
        const auto wm = index.find("weight_map");
        if (wm == index.end() || !wm->is_object()) fail(ipath, "index has no 'weight_map' object");
        for (const auto& [tensor, shard] : wm->items()) {
            if (!shard.is_string())
                fail(ipath, "weight_map entry '" + printable(tensor) + "' is not a string");
            const auto& s = shard.get_ref<const std::string&>();
            if (s.empty() || s == "." || s.find('/') != std::string::npos ||
                s.find('\\') != std::string::npos || s.find("..") != std::string::npos ||
                s.find('\0') != std::string::npos)
                fail(ipath, "weight_map entry '" + printable(tensor) + "' names shard '" +
                                printable(s) + "' outside the directory");
            weight_map.emplace(tensor, s);
            shards.insert(s);
        }
    }
    if (shards.empty()) fail(ipath, "weight_map is empty");

    SafetensorsModel m;
    std::map<std::string, size_t> first_tensor;  // shard -> index of its first tensor
    for (const auto& s : shards) {
        const size_t before = m.tensors_.size();
        m.add_file((base / s).string());
        first_tensor[s] = before;
    }
    // Every tensor the index lists must be in the shard it names.
    for (const auto& [tensor, shard] : weight_map) {
        const SafetensorsTensor* t = m.find(tensor);
        const std::string shard_path = (base / shard).string();
        if (!t)
            fail(shard_path, "tensor '" + printable(tensor) + "' listed in the index is missing");
        const size_t pos = static_cast<size_t>(t - m.tensors_.data());
        auto it = first_tensor.find(shard);
        auto next = std::next(it);
        const size_t lo = it->second;
        const size_t hi = next == first_tensor.end() ? m.tensors_.size() : next->second;
        if (pos < lo || pos >= hi)
            fail(shard_path,
                 "tensor '" + printable(tensor) + "' listed in the index is in another shard");
    }
    return m;
}

}  // namespace warden::formats
