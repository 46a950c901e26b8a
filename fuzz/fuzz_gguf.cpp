// libFuzzer target for the untrusted model-file parsers: every input is fed to the GGUF reader,
// the safetensors header parser and the llama.cpp imatrix reader (each rejects the others' files
// within a few bytes, so one target explores all three; scripts/fuzz.sh seeds it with a file of
// each kind).
//
// Besides ASan/UBSan, the target checks the parsers' promises itself and traps when one is
// broken: every tensor lies inside the input, sizes agree with type x shape, safetensors tensors
// do not overlap, and errors are util::Error with a one-line message.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "formats/gguf_file.h"
#include "formats/safetensors_file.h"
#include "quant/imatrix.h"
#include "tensor/ggml_types.h"
#include "util/error.h"

using namespace warden;

namespace {

volatile uint8_t g_sink = 0;

void require(bool cond) {
    if (!cond) __builtin_trap();
}

void touch(const uint8_t* p, uint64_t n) {
    if (n == 0) return;
    g_sink = static_cast<uint8_t>(g_sink + p[0]);
    g_sink = static_cast<uint8_t>(g_sink + p[n - 1]);
}

void check_error(const util::Error& e) {
    const std::string msg = e.what();
    require(!msg.empty() && msg.find('\n') == std::string::npos);
}

void visit_value(const formats::GGUFValue& v, const std::string& key, int depth) {
    require(depth <= 64);
    (void)formats::gguf_value_type_name(v.type);
    (void)v.is_integer();
    try {
        (void)v.as_int(key);
    } catch (const util::Error& e) {
        check_error(e);
    }
    try {
        (void)v.as_float(key);
    } catch (const util::Error& e) {
        check_error(e);
    }
    try {
        (void)v.as_bool(key);
    } catch (const util::Error& e) {
        check_error(e);
    }
    try {
        (void)v.as_string(key);
    } catch (const util::Error& e) {
        check_error(e);
    }
    for (const auto& e : v.arr) visit_value(e, key, depth + 1);
}

void fuzz_gguf(const uint8_t* data, size_t size) {
    try {
        formats::GGUFFile f(data, size, "fuzz.gguf");
        require(f.version() == 2 || f.version() == 3);
        for (const auto& t : f.tensors()) {
            require(t.data >= data && t.n_bytes <= size && t.data + t.n_bytes <= data + size);
            require(f.find_tensor(t.name) == &t);
            require(!t.shape.empty() && t.shape.size() <= 4);
            const tensor::GgmlTypeInfo& info = tensor::ggml_type_info(t.type);
            require(t.shape[0] % info.block_elems == 0);
            require(static_cast<uint64_t>(t.n_elements() / info.block_elems * info.block_bytes) ==
                    t.n_bytes);
            touch(t.data, t.n_bytes);
            (void)tensor::ggml_type_name(t.type);
            // Dequantize the first and the last block.
            if (info.supported && t.n_bytes >= static_cast<uint64_t>(info.block_bytes)) {
                float out[256];
                tensor::dequantize_row(t.type, t.data, out, info.block_elems);
                tensor::dequantize_row(t.type,
                                       t.data + t.n_bytes - static_cast<uint64_t>(info.block_bytes),
                                       out, info.block_elems);
            }
        }
        for (const auto& [key, v] : f.metadata()) {
            require(f.find(key) == &v && f.has(key));
            visit_value(v, key, 0);
            try {
                (void)f.get_string(key);
            } catch (const util::Error& e) {
                check_error(e);
            }
            try {
                (void)f.get_int(key);
            } catch (const util::Error& e) {
                check_error(e);
            }
            try {
                (void)f.get_int_opt(key);
            } catch (const util::Error& e) {
                check_error(e);
            }
            try {
                (void)f.get_float_opt(key);
            } catch (const util::Error& e) {
                check_error(e);
            }
            try {
                (void)f.get_bool_opt(key);
            } catch (const util::Error& e) {
                check_error(e);
            }
            try {
                (void)f.get_string_array(key);
            } catch (const util::Error& e) {
                check_error(e);
            }
            try {
                (void)f.get_float_array(key);
            } catch (const util::Error& e) {
                check_error(e);
            }
            try {
                (void)f.get_int_array(key);
            } catch (const util::Error& e) {
                check_error(e);
            }
        }
        try {
            (void)f.get("no.such.key");
        } catch (const util::Error& e) {
            check_error(e);
        }
    } catch (const util::Error& e) {
        check_error(e);
    }
}

uint64_t st_dtype_size(const std::string& d) {
    if (d == "F64" || d == "I64" || d == "U64") return 8;
    if (d == "F32" || d == "I32" || d == "U32") return 4;
    if (d == "F16" || d == "BF16" || d == "I16" || d == "U16") return 2;
    if (d == "I8" || d == "U8" || d == "BOOL" || d == "F8_E4M3" || d == "F8_E5M2") return 1;
    return 0;
}

void fuzz_safetensors(const uint8_t* data, size_t size) {
    try {
        std::map<std::string, std::string> meta;
        const auto tensors = formats::parse_safetensors(data, size, "fuzz.safetensors", &meta);
        std::vector<std::pair<const uint8_t*, const uint8_t*>> ranges;
        for (const auto& t : tensors) {
            require(t.data >= data && t.n_bytes <= size && t.data + t.n_bytes <= data + size);
            const uint64_t es = st_dtype_size(t.dtype);
            require(es != 0);
            uint64_t n = 1;
            for (auto d : t.shape) {
                require(d >= 0);
                n *= static_cast<uint64_t>(d);
            }
            require(n * es == t.n_bytes && static_cast<uint64_t>(t.n_elements()) == n);
            touch(t.data, t.n_bytes);
            if (t.n_bytes) ranges.emplace_back(t.data, t.data + t.n_bytes);
        }
        std::sort(ranges.begin(), ranges.end());
        for (size_t i = 1; i < ranges.size(); ++i) require(ranges[i - 1].second <= ranges[i].first);
    } catch (const util::Error& e) {
        check_error(e);
    }
}

// imatrix: every value read is finite and non-negative, every entry has values, and the entries'
// values fit in the input (4 bytes each).
void fuzz_imatrix(const uint8_t* data, size_t size) {
    try {
        const quant::Imatrix m = quant::parse_imatrix(data, size, "fuzz");
        size_t values = 0;
        for (const auto& [name, v] : m.entries) {
            require(!name.empty() && !v.empty());
            for (float x : v) require(x >= 0.0f && std::isfinite(x));
            values += v.size();
        }
        require(!m.entries.empty() && values * 4 <= size);
    } catch (const util::Error& e) {
        check_error(e);
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    fuzz_gguf(data, size);
    fuzz_safetensors(data, size);
    fuzz_imatrix(data, size);
    return 0;
}
