// KV pages converted into another server's format: the converted bytes equal, page for page,
// what that format's write_kv stores for the same K/V values (values exactly representable in
// the source format, so the source holds them without loss); a different page size regroups
// positions; the same format is an exact copy. What cannot convert (another model or
// attention shape, an unknown or unstorable format) is refused with a reason.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "kv/kv_convert.h"
#include "kv/kv_handoff.h"
#include "tensor/float_convert.h"

using namespace warden;
using namespace warden::kv;

namespace {

KvCacheConfig config(tensor::KvType t, int32_t page_size, int64_t heads = 2, int64_t dim = 32) {
    auto c = KvCacheConfig::shaped(3, heads, dim, t, page_size);
    c.budget_bytes = kv_budget_for_tokens(c, 256);
    return c;
}

// K and V of n positions, every value a bf16 number (so a bf16 pool holds it exactly).
struct Values {
    std::vector<std::vector<float>> k, v;  // per layer, [n, heads * dim]
};
Values random_values(const KvCacheConfig& c, int64_t n, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> d(0.0f, 2.0f);
    Values out;
    const auto row = static_cast<size_t>(c.n_kv_heads * c.head_dim);
    for (int64_t l = 0; l < c.n_layers; ++l) {
        std::vector<float> k(static_cast<size_t>(n) * row), v(k.size());
        for (auto* a : {&k, &v})
            for (float& x : *a) x = tensor::bf16_to_f32(tensor::f32_to_bf16(d(rng)));
        out.k.push_back(std::move(k));
        out.v.push_back(std::move(v));
    }
    return out;
}

// Reserves pages for n positions in kv and stores the values there with write_kv.
PageTable store(KvCache& kv, const Values& vals, int64_t n) {
    PageTable t;
    EXPECT_TRUE(kv.reserve(t, n));
    std::vector<int32_t> ids;
    for (const PageRef& r : t.pages) ids.push_back(r.page.v);
    for (int64_t l = 0; l < kv.config().n_layers; ++l)
        kernels::write_kv(kv.storage().layer(l), ids.data(), 0, n, vals.k[l].data(),
                          vals.v[l].data());
    t.n_tokens = n;
    return t;
}

// Converts src's pages for n positions into dst's format and compares them with the pages
// write_kv filled directly in a pool of dst's format. Positions past n in the last page are
// zero in the converted copy; the reference pool's unused slots are zero too (fresh pool).
void expect_converted_equals_direct(tensor::KvType from, int32_t from_ps, tensor::KvType to,
                                    int32_t to_ps, int64_t n) {
    const KvCacheConfig sc = config(from, from_ps), dc = config(to, to_ps);
    KvCache src(sc), ref(dc);
    const Values vals = random_values(sc, n, 7 + static_cast<uint64_t>(n));
    PageTable st = store(src, vals, n);
    PageTable rt = store(ref, vals, n);
    const int64_t pages = (n + to_ps - 1) / to_ps;
    const auto pb = static_cast<size_t>(kv_page_bytes(dc));
    std::vector<uint8_t> out(static_cast<size_t>(pages) * pb, 0xAB);
    convert_kv_pages(src, st.pages, n, dc, out.data());
    ASSERT_EQ(static_cast<int64_t>(rt.pages.size()), pages);
    for (int64_t p = 0; p < pages; ++p)
        EXPECT_EQ(std::memcmp(out.data() + static_cast<size_t>(p) * pb,
                              ref.pool().data(rt.pages[static_cast<size_t>(p)].page), pb),
                  0)
            << "page " << p << " of " << tensor::kv_type_name(from) << " -> "
            << tensor::kv_type_name(to);
    src.free(st);
    ref.free(rt);
}

}  // namespace

TEST(KvConvert, Bf16ToFp8EqualsTheFp8PoolsOwnWrite) {
    expect_converted_equals_direct(tensor::KvType::BF16, 16, tensor::KvType::FP8_E4M3, 16, 37);
    expect_converted_equals_direct(tensor::KvType::BF16, 16, tensor::KvType::INT8, 16, 16);
    expect_converted_equals_direct(tensor::KvType::F32, 16, tensor::KvType::FP8_E5M2, 16, 5);
}

TEST(KvConvert, PageSizeChangesRegroupPositions) {
    expect_converted_equals_direct(tensor::KvType::BF16, 16, tensor::KvType::FP8_E4M3, 8, 37);
    expect_converted_equals_direct(tensor::KvType::BF16, 8, tensor::KvType::BF16, 32, 41);
}

TEST(KvConvert, SameFormatIsAnExactCopy) {
    expect_converted_equals_direct(tensor::KvType::BF16, 16, tensor::KvType::BF16, 16, 33);
    // Exactly representable bf16 values widen to f32 without loss.
    expect_converted_equals_direct(tensor::KvType::BF16, 16, tensor::KvType::F32, 16, 20);
}

TEST(KvConvert, ModelFingerprintIgnoresTheStorageFormat) {
    const auto a = config(tensor::KvType::BF16, 16), b = config(tensor::KvType::FP8_E4M3, 8);
    EXPECT_EQ(kv_model_fingerprint(a, "m"), kv_model_fingerprint(b, "m"));
    EXPECT_NE(kv_model_fingerprint(a, "m"), kv_model_fingerprint(a, "other"));
    EXPECT_NE(kv_model_fingerprint(a, "m"),
              kv_model_fingerprint(config(tensor::KvType::BF16, 16, 4), "m"));
    EXPECT_FALSE(same_storage_format(a, b));
    EXPECT_TRUE(same_storage_format(a, config(tensor::KvType::BF16, 16)));
}

TEST(KvConvert, WireFormatRefusesWhatCannotConvert) {
    const auto own = config(tensor::KvType::BF16, 16);
    std::string why;
    // Another format of the same model: accepted, the receiver's config comes back.
    const auto fp8 = config(tensor::KvType::FP8_E4M3, 8);
    auto d = check_wire_format(own, "m", kv_wire_format(fp8, "m"), &why);
    ASSERT_TRUE(d.has_value()) << why;
    EXPECT_EQ(kv_layout_fingerprint(*d, "m"), kv_layout_fingerprint(fp8, "m"));
    // Another model or attention shape: refused, saying so.
    EXPECT_FALSE(check_wire_format(own, "m", kv_wire_format(fp8, "other"), &why));
    EXPECT_NE(why.find("model mismatch"), std::string::npos) << why;
    EXPECT_FALSE(check_wire_format(
        own, "m", kv_wire_format(config(tensor::KvType::BF16, 16, 2, 64), "m"), &why));
    EXPECT_NE(why.find("model mismatch"), std::string::npos) << why;
    // Formats this build cannot store, or a page size that does not add up.
    auto w = kv_wire_format(fp8, "m");
    w.type = 99;
    EXPECT_FALSE(check_wire_format(own, "m", w, &why));
    EXPECT_NE(why.find("unknown KV format"), std::string::npos) << why;
    w = kv_wire_format(fp8, "m");
    w.page_size = 0;
    EXPECT_FALSE(check_wire_format(own, "m", w, &why));
    w = kv_wire_format(fp8, "m");
    w.scales = static_cast<uint32_t>(kernels::KvScales::Tensor);
    EXPECT_FALSE(check_wire_format(own, "m", w, &why));  // page bytes differ without scales
    EXPECT_NE(why.find("page size mismatch"), std::string::npos) << why;
    w = kv_wire_format(config(tensor::KvType::INT8, 16), "m");
    w.scales = static_cast<uint32_t>(kernels::KvScales::Tensor);
    EXPECT_FALSE(check_wire_format(own, "m", w, &why));
}
