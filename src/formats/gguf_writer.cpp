#include "formats/gguf_writer.h"

#include <cstdio>
#include <cstring>

#include "util/error.h"
#include "util/replace_file.h"

namespace warden::formats {

namespace {

constexpr uint64_t kAlign = 32;

struct Out {
    std::string buf;
    template <typename T>
    void pod(T v) {
        char tmp[sizeof(T)];
        std::memcpy(tmp, &v, sizeof(T));
        buf.append(tmp, sizeof(T));
    }
    void str(const std::string& s) {
        pod<uint64_t>(s.size());
        buf.append(s);
    }
    void value(GGUFValueType t, const GGUFValue& v) {
        switch (t) {
            case GGUFValueType::UINT8:
                pod<uint8_t>(static_cast<uint8_t>(v.u));
                break;
            case GGUFValueType::INT8:
                pod<int8_t>(static_cast<int8_t>(v.i));
                break;
            case GGUFValueType::UINT16:
                pod<uint16_t>(static_cast<uint16_t>(v.u));
                break;
            case GGUFValueType::INT16:
                pod<int16_t>(static_cast<int16_t>(v.i));
                break;
            case GGUFValueType::UINT32:
                pod<uint32_t>(static_cast<uint32_t>(v.u));
                break;
            case GGUFValueType::INT32:
                pod<int32_t>(static_cast<int32_t>(v.i));
                break;
            case GGUFValueType::FLOAT32:
                pod<float>(static_cast<float>(v.f));
                break;
            case GGUFValueType::BOOL:
                pod<uint8_t>(v.u ? 1 : 0);
                break;
            case GGUFValueType::STRING:
                str(v.s);
                break;
            case GGUFValueType::UINT64:
                pod<uint64_t>(v.u);
                break;
            case GGUFValueType::INT64:
                pod<int64_t>(v.i);
                break;
            case GGUFValueType::FLOAT64:
                pod<double>(v.f);
                break;
            case GGUFValueType::ARRAY:
                pod<uint32_t>(static_cast<uint32_t>(v.elem_type));
                pod<uint64_t>(v.arr.size());
                for (const auto& e : v.arr) value(v.elem_type, e);
                break;
        }
    }
    void pad() {
        while (buf.size() % kAlign) buf.push_back('\0');
    }
};

}  // namespace

void GGUFWriter::set(const std::string& key, const GGUFValue& v) {
    for (auto& [k, old] : kv_)
        if (k == key) {
            old = v;
            return;
        }
    kv_.emplace_back(key, v);
}

void GGUFWriter::set_u32(const std::string& key, uint32_t v) {
    GGUFValue g;
    g.type = GGUFValueType::UINT32;
    g.u = v;
    set(key, g);
}

void GGUFWriter::set_string(const std::string& key, const std::string& v) {
    GGUFValue g;
    g.type = GGUFValueType::STRING;
    g.s = v;
    set(key, g);
}

void GGUFWriter::set_string_array(const std::string& key, const std::vector<std::string>& v) {
    GGUFValue g;
    g.type = GGUFValueType::ARRAY;
    g.elem_type = GGUFValueType::STRING;
    for (const std::string& s : v) {
        GGUFValue x;
        x.type = GGUFValueType::STRING;
        x.s = s;
        g.arr.push_back(std::move(x));
    }
    set(key, g);
}

int64_t GGUFWriter::checked_bytes(const std::string& name, const std::vector<int64_t>& shape,
                                  tensor::GgmlType type) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    const auto& info = tensor::ggml_type_info(type);
    util::check(!shape.empty() && shape[0] % info.block_elems == 0,
                "GGUFWriter: tensor '" + name + "': row not a multiple of the block");
    return n / info.block_elems * info.block_bytes;
}

void GGUFWriter::add_tensor(const std::string& name, std::vector<int64_t> shape,
                            tensor::GgmlType type, std::vector<uint8_t> data) {
    const int64_t bytes = checked_bytes(name, shape, type);
    util::check(static_cast<int64_t>(data.size()) == bytes,
                "GGUFWriter: tensor '" + name + "' has the wrong byte count");
    tensors_.push_back({name, std::move(shape), type, bytes, std::move(data), nullptr, nullptr});
}

void GGUFWriter::add_tensor(const std::string& name, std::vector<int64_t> shape,
                            tensor::GgmlType type, Producer produce) {
    const int64_t bytes = checked_bytes(name, shape, type);
    tensors_.push_back({name, std::move(shape), type, bytes, {}, std::move(produce), nullptr});
}

void GGUFWriter::add_tensor_view(const std::string& name, std::vector<int64_t> shape,
                                 tensor::GgmlType type, const uint8_t* data) {
    const int64_t bytes = checked_bytes(name, shape, type);
    tensors_.push_back({name, std::move(shape), type, bytes, {}, nullptr, data});
}

void GGUFWriter::write(const std::string& path) const {
    Out o;
    o.buf.append("GGUF");
    o.pod<uint32_t>(3);
    o.pod<uint64_t>(tensors_.size());
    uint64_t n_kv = kv_.size();
    bool has_align = false;
    for (const auto& [k, v] : kv_) has_align |= k == "general.alignment";
    if (!has_align) ++n_kv;
    o.pod<uint64_t>(n_kv);
    for (const auto& [k, v] : kv_) {
        o.str(k);
        if (k == "general.alignment") {  // we always align to 32
            o.pod<uint32_t>(static_cast<uint32_t>(GGUFValueType::UINT32));
            o.pod<uint32_t>(static_cast<uint32_t>(kAlign));
            continue;
        }
        o.pod<uint32_t>(static_cast<uint32_t>(v.type));
        o.value(v.type, v);
    }
    if (!has_align) {
        o.str("general.alignment");
        o.pod<uint32_t>(static_cast<uint32_t>(GGUFValueType::UINT32));
        o.pod<uint32_t>(static_cast<uint32_t>(kAlign));
    }
    uint64_t off = 0;
    for (const auto& t : tensors_) {
        o.str(t.name);
        o.pod<uint32_t>(static_cast<uint32_t>(t.shape.size()));
        for (int64_t d : t.shape) o.pod<uint64_t>(static_cast<uint64_t>(d));
        o.pod<uint32_t>(static_cast<uint32_t>(t.type));
        o.pod<uint64_t>(off);
        off += (static_cast<uint64_t>(t.bytes) + kAlign - 1) / kAlign * kAlign;
    }
    o.pad();
    util::replace_file(path, [&](std::ostream& f) {
        f.write(reinterpret_cast<const char*>(o.buf.data()),
                static_cast<std::streamsize>(o.buf.size()));
        static const char zeros[kAlign] = {};
        for (const auto& t : tensors_) {
            const uint8_t* data = t.view ? t.view : t.data.data();
            std::vector<uint8_t> made;
            if (t.produce) {
                made = t.produce();
                util::check(
                    static_cast<int64_t>(made.size()) == t.bytes,
                    "GGUFWriter: tensor '" + t.name + "' was made with the wrong byte count");
                data = made.data();
            }
            f.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(t.bytes));
            const size_t pad = (kAlign - static_cast<uint64_t>(t.bytes) % kAlign) % kAlign;
            f.write(zeros, static_cast<std::streamsize>(pad));
            if (!f) return;  // disk full: replace_file reports it
        }
    });
}

}  // namespace warden::formats
