#pragma once
// Writes llama.cpp's legacy imatrix.dat byte by byte, as its save_imatrix does
// (examples/imatrix/imatrix.cpp), for tests of quant/imatrix.h and of what uses it.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace warden::test {

struct ImatrixEntry {
    std::string name;
    int32_t ncall = 1;
    std::vector<float> values;  // sums over ncall chunks
};

// n; per entry {len, name, ncall, nval, f32 values}; then, with `trailer`, chunks, len, dataset.
inline std::vector<uint8_t> imatrix_dat(const std::vector<ImatrixEntry>& es, int32_t chunks = 7,
                                        const std::string& dataset = "calib.txt",
                                        bool trailer = true) {
    std::vector<uint8_t> b;
    const auto put = [&b](const void* p,
                          size_t n) {  // resize + memcpy: no insert of a pointer range
        b.resize(b.size() + n);
        if (n) std::memcpy(b.data() + b.size() - n, p, n);
    };
    const auto i32 = [&put](int32_t v) { put(&v, 4); };
    i32(static_cast<int32_t>(es.size()));
    for (const auto& e : es) {
        i32(static_cast<int32_t>(e.name.size()));
        put(e.name.data(), e.name.size());
        i32(e.ncall);
        i32(static_cast<int32_t>(e.values.size()));
        put(e.values.data(), e.values.size() * 4);
    }
    if (trailer) {
        i32(chunks);
        i32(static_cast<int32_t>(dataset.size()));
        put(dataset.data(), dataset.size());
    }
    return b;
}

}  // namespace warden::test
