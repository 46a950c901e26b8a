#include "formats/gguf_file.h"

#include <cstring>
#include <limits>

#include "util/error.h"

namespace warden::formats {

using util::Error;

namespace {

constexpr uint32_t kMaxDims = 4;        // GGML_MAX_DIMS
constexpr uint64_t kMaxArrayDepth = 8;  // nested arrays deeper than this are rejected
constexpr uint64_t kMaxDefaultAlignment = 1u << 20;

using util::printable;

// A bounds-checked cursor over the untrusted header bytes.
class Reader {
  public:
    Reader(const uint8_t* data, size_t size, const std::string& name)
        : p_(data), size_(size), name_(name) {}

    size_t pos() const { return pos_; }
    size_t remaining() const { return size_ - pos_; }

    [[noreturn]] void fail(const std::string& what) const {
        throw Error("GGUF '" + printable(name_, 4096) + "': " + what + " (at byte " +
                    std::to_string(pos_) + ")");
    }

    void need(uint64_t n, const char* what) const {
        if (n > remaining()) fail(std::string("truncated while reading ") + what);
    }

    template <typename T>
    T read(const char* what) {
        need(sizeof(T), what);
        T v;
        std::memcpy(&v, p_ + pos_, sizeof(T));
        pos_ += sizeof(T);
        return v;
    }

    std::string read_string(const char* what) {
        const auto len = read<uint64_t>(what);
        need(len, what);
        std::string s(reinterpret_cast<const char*>(p_ + pos_), static_cast<size_t>(len));
        pos_ += static_cast<size_t>(len);
        return s;
    }

  private:
    const uint8_t* p_;
    size_t size_;
    size_t pos_ = 0;
    const std::string& name_;
};

// Smallest encoded size of one element of a type: lets us reject array counts that cannot
// possibly fit in the file before allocating anything.
uint64_t min_encoded_size(GGUFValueType t) {
    switch (t) {
        case GGUFValueType::UINT8:
        case GGUFValueType::INT8:
        case GGUFValueType::BOOL:
            return 1;
        case GGUFValueType::UINT16:
        case GGUFValueType::INT16:
            return 2;
        case GGUFValueType::UINT32:
        case GGUFValueType::INT32:
        case GGUFValueType::FLOAT32:
            return 4;
        case GGUFValueType::UINT64:
        case GGUFValueType::INT64:
        case GGUFValueType::FLOAT64:
            return 8;
        case GGUFValueType::STRING:
            return 8;
        case GGUFValueType::ARRAY:
            return 12;
    }
    return 1;
}

bool valid_type(uint32_t t) {
    return t <= static_cast<uint32_t>(GGUFValueType::FLOAT64);
}

// Every array element becomes a GGUFValue (~100 bytes), so a hostile file of small elements
// could ask for ~100x its size in memory; real files (vocabularies of a few 100k tokens and
// merges) stay far below this cap on the total number of array elements.
constexpr uint64_t kMaxArrayElements = uint64_t{1} << 24;

GGUFValue read_value(Reader& r, GGUFValueType type, uint64_t depth, uint64_t& elems_left) {
    GGUFValue v;
    v.type = type;
    switch (type) {
        case GGUFValueType::UINT8:
            v.u = r.read<uint8_t>("u8");
            break;
        case GGUFValueType::INT8:
            v.i = r.read<int8_t>("i8");
            break;
        case GGUFValueType::UINT16:
            v.u = r.read<uint16_t>("u16");
            break;
        case GGUFValueType::INT16:
            v.i = r.read<int16_t>("i16");
            break;
        case GGUFValueType::UINT32:
            v.u = r.read<uint32_t>("u32");
            break;
        case GGUFValueType::INT32:
            v.i = r.read<int32_t>("i32");
            break;
        case GGUFValueType::UINT64:
            v.u = r.read<uint64_t>("u64");
            break;
        case GGUFValueType::INT64:
            v.i = r.read<int64_t>("i64");
            break;
        case GGUFValueType::FLOAT32:
            v.f = r.read<float>("f32");
            break;
        case GGUFValueType::FLOAT64:
            v.f = r.read<double>("f64");
            break;
        case GGUFValueType::BOOL: {
            const auto b = r.read<uint8_t>("bool");
            if (b > 1) r.fail("bool value " + std::to_string(b) + " is neither 0 nor 1");
            v.u = b;
            break;
        }
        case GGUFValueType::STRING:
            v.s = r.read_string("string");
            break;
        case GGUFValueType::ARRAY: {
            if (depth >= kMaxArrayDepth) r.fail("arrays nested too deeply");
            const auto et = r.read<uint32_t>("array type");
            if (!valid_type(et)) r.fail("unknown array element type " + std::to_string(et));
            const auto n = r.read<uint64_t>("array length");
            v.elem_type = static_cast<GGUFValueType>(et);
            if (n > r.remaining() / min_encoded_size(v.elem_type))
                r.fail("array of " + std::to_string(n) + " elements exceeds the file size");
            if (n > elems_left)
                r.fail("metadata arrays hold more than " + std::to_string(kMaxArrayElements) +
                       " elements in all");
            elems_left -= n;
            v.arr.reserve(static_cast<size_t>(n));
            for (uint64_t k = 0; k < n; ++k)
                v.arr.push_back(read_value(r, v.elem_type, depth + 1, elems_left));
            break;
        }
    }
    return v;
}

}  // namespace

const char* gguf_value_type_name(GGUFValueType t) {
    static const char* names[] = {"u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
                                  "bool", "string", "array", "u64", "i64", "f64"};
    const auto i = static_cast<uint32_t>(t);
    return i < 13 ? names[i] : "?";
}

bool GGUFValue::is_integer() const {
    switch (type) {
        case GGUFValueType::UINT8:
        case GGUFValueType::INT8:
        case GGUFValueType::UINT16:
        case GGUFValueType::INT16:
        case GGUFValueType::UINT32:
        case GGUFValueType::INT32:
        case GGUFValueType::UINT64:
        case GGUFValueType::INT64:
            return true;
        default:
            return false;
    }
}

int64_t GGUFValue::as_int(const std::string& what) const {
    switch (type) {
        case GGUFValueType::UINT8:
        case GGUFValueType::UINT16:
        case GGUFValueType::UINT32:
        case GGUFValueType::UINT64:
            if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
                throw Error("metadata '" + printable(what) + "' is out of range");
            return static_cast<int64_t>(u);
        case GGUFValueType::INT8:
        case GGUFValueType::INT16:
        case GGUFValueType::INT32:
        case GGUFValueType::INT64:
            return i;
        default:
            throw Error("metadata '" + printable(what) + "' is a " + gguf_value_type_name(type) +
                        ", expected an integer");
    }
}

double GGUFValue::as_float(const std::string& what) const {
    if (type == GGUFValueType::FLOAT32 || type == GGUFValueType::FLOAT64) return f;
    if (is_integer()) return static_cast<double>(as_int(what));
    throw Error("metadata '" + printable(what) + "' is a " + gguf_value_type_name(type) +
                ", expected a number");
}

bool GGUFValue::as_bool(const std::string& what) const {
    if (type == GGUFValueType::BOOL) return u != 0;
    if (is_integer()) return as_int(what) != 0;
    throw Error("metadata '" + printable(what) + "' is a " + gguf_value_type_name(type) +
                ", expected a bool");
}

const std::string& GGUFValue::as_string(const std::string& what) const {
    if (type != GGUFValueType::STRING)
        throw Error("metadata '" + printable(what) + "' is a " + gguf_value_type_name(type) +
                    ", expected a string");
    return s;
}

int64_t GGUFTensor::n_elements() const {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
}

GGUFFile::GGUFFile(const std::string& path)
    : file_(std::make_unique<util::MappedFile>(path)), name_(path) {
    parse(file_->data(), file_->size());
}

GGUFFile::GGUFFile(const uint8_t* data, size_t size, std::string name) : name_(std::move(name)) {
    parse(data, size);
}

void GGUFFile::parse(const uint8_t* data, size_t size) {
    Reader r(data, size, name_);
    const auto magic = r.read<uint32_t>("magic");
    if (magic != 0x46554747u) r.fail("not a GGUF file (bad magic)");
    version_ = r.read<uint32_t>("version");
    if (version_ == 1) r.fail("GGUF version 1 is not supported (re-convert the model)");
    if (version_ != 2 && version_ != 3)
        r.fail("unsupported GGUF version " + std::to_string(version_));
    const auto n_tensors = r.read<uint64_t>("tensor count");
    const auto n_kv = r.read<uint64_t>("metadata count");
    // Each KV needs at least 8 (key len) + 4 (type) + 1 bytes; each tensor info at least 8+4+8+4+8.
    if (n_kv > r.remaining() / 13)
        r.fail("metadata count " + std::to_string(n_kv) + " exceeds the file size");
    if (n_tensors > r.remaining() / 32)
        r.fail("tensor count " + std::to_string(n_tensors) + " exceeds the file size");

    uint64_t elems_left = kMaxArrayElements;
    for (uint64_t k = 0; k < n_kv; ++k) {
        std::string key = r.read_string("metadata key");
        const auto t = r.read<uint32_t>("metadata type");
        if (!valid_type(t))
            r.fail("metadata '" + printable(key) + "' has unknown type " + std::to_string(t));
        GGUFValue v = read_value(r, static_cast<GGUFValueType>(t), 0, elems_left);
        if (!kv_.emplace(key, std::move(v)).second)
            r.fail("duplicate metadata key '" + printable(key) + "'");
    }

    uint64_t alignment = 32;
    if (const GGUFValue* a = find("general.alignment")) {
        if (!a->is_integer()) r.fail("general.alignment is not an integer");
        if (a->type == GGUFValueType::UINT64 && a->u > kMaxDefaultAlignment)
            r.fail("general.alignment " + std::to_string(a->u) + " is not a power of two");
        const int64_t al = a->as_int("general.alignment");
        if (al <= 0 || (al & (al - 1)) != 0 || static_cast<uint64_t>(al) > kMaxDefaultAlignment)
            r.fail("general.alignment " + std::to_string(al) + " is not a power of two");
        alignment = static_cast<uint64_t>(al);
    }

    tensors_.reserve(static_cast<size_t>(n_tensors));
    for (uint64_t k = 0; k < n_tensors; ++k) {
        GGUFTensor t;
        t.name = r.read_string("tensor name");
        const auto n_dims = r.read<uint32_t>("tensor dims");
        if (n_dims == 0 || n_dims > kMaxDims)
            r.fail("tensor '" + printable(t.name) + "' has " + std::to_string(n_dims) +
                   " dimensions");
        int64_t n_el = 1;
        for (uint32_t d = 0; d < n_dims; ++d) {
            const auto dim = r.read<uint64_t>("tensor shape");
            if (dim == 0 || dim > (1ull << 40))
                r.fail("tensor '" + printable(t.name) + "' has dimension " + std::to_string(dim));
            if (static_cast<uint64_t>(n_el) > (1ull << 50) / dim)
                r.fail("tensor '" + printable(t.name) + "' is too large");
            n_el *= static_cast<int64_t>(dim);
            t.shape.push_back(static_cast<int64_t>(dim));
        }
        const auto raw_type = r.read<uint32_t>("tensor type");
        const tensor::GgmlTypeInfo* info = tensor::ggml_type_info(raw_type);
        if (!info)
            r.fail("tensor '" + printable(t.name) + "' has unknown type id " +
                   std::to_string(raw_type));
        t.type = static_cast<tensor::GgmlType>(raw_type);
        if (t.shape[0] % info->block_elems != 0)
            r.fail("tensor '" + printable(t.name) + "' row of " + std::to_string(t.shape[0]) +
                   " is not a multiple of the " + info->name + " block size");
        t.offset = r.read<uint64_t>("tensor offset");
        if (t.offset % alignment != 0)
            r.fail("tensor '" + printable(t.name) + "' offset is not aligned");
        t.n_bytes = static_cast<uint64_t>(n_el / info->block_elems) *
                    static_cast<uint64_t>(info->block_bytes);
        if (tensor_index_.count(t.name))
            r.fail("duplicate tensor name '" + printable(t.name) + "'");
        tensor_index_[t.name] = tensors_.size();
        tensors_.push_back(std::move(t));
    }

    const uint64_t data_start = (r.pos() + alignment - 1) / alignment * alignment;
    if (data_start > size && n_tensors > 0) r.fail("data section starts past the end of the file");
    for (auto& t : tensors_) {
        if (t.offset > size || t.n_bytes > size - data_start ||
            data_start + t.offset > size - t.n_bytes)
            throw Error("GGUF '" + printable(name_, 4096) + "': tensor '" + printable(t.name) +
                        "' data (" + std::to_string(t.n_bytes) + " bytes at offset " +
                        std::to_string(t.offset) + ") lies past the end of the file (truncated?)");
        t.data = data + data_start + t.offset;
    }
}

const GGUFValue* GGUFFile::find(const std::string& key) const {
    auto it = kv_.find(key);
    return it == kv_.end() ? nullptr : &it->second;
}

const GGUFValue& GGUFFile::get(const std::string& key) const {
    const GGUFValue* v = find(key);
    if (!v)
        throw Error("GGUF '" + printable(name_, 4096) + "': missing metadata '" + printable(key) +
                    "'");
    return *v;
}

std::string GGUFFile::get_string(const std::string& key) const {
    return get(key).as_string(key);
}
int64_t GGUFFile::get_int(const std::string& key) const {
    return get(key).as_int(key);
}

std::optional<int64_t> GGUFFile::get_int_opt(const std::string& key) const {
    const GGUFValue* v = find(key);
    if (!v) return std::nullopt;
    return v->as_int(key);
}

std::optional<double> GGUFFile::get_float_opt(const std::string& key) const {
    const GGUFValue* v = find(key);
    if (!v) return std::nullopt;
    return v->as_float(key);
}

std::optional<bool> GGUFFile::get_bool_opt(const std::string& key) const {
    const GGUFValue* v = find(key);
    if (!v) return std::nullopt;
    return v->as_bool(key);
}

namespace {
const GGUFValue& get_array(const GGUFFile& f, const std::string& key) {
    const GGUFValue& v = f.get(key);
    if (v.type != GGUFValueType::ARRAY)
        throw Error("metadata '" + printable(key) + "' is not an array");
    return v;
}
}  // namespace

std::vector<std::string> GGUFFile::get_string_array(const std::string& key) const {
    std::vector<std::string> out;
    for (const auto& e : get_array(*this, key).arr) out.push_back(e.as_string(key));
    return out;
}

std::vector<double> GGUFFile::get_float_array(const std::string& key) const {
    std::vector<double> out;
    for (const auto& e : get_array(*this, key).arr) out.push_back(e.as_float(key));
    return out;
}

std::vector<int64_t> GGUFFile::get_int_array(const std::string& key) const {
    std::vector<int64_t> out;
    for (const auto& e : get_array(*this, key).arr) out.push_back(e.as_int(key));
    return out;
}

const GGUFTensor* GGUFFile::find_tensor(const std::string& name) const {
    auto it = tensor_index_.find(name);
    return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace warden::formats
