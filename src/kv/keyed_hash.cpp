#include "kv/keyed_hash.h"

#include <bit>
#include <random>

namespace warden::kv {

namespace {
inline void sip_round(uint64_t& v0, uint64_t& v1, uint64_t& v2, uint64_t& v3) {
    v0 += v1;
    v1 = std::rotl(v1, 13);
    v1 ^= v0;
    v0 = std::rotl(v0, 32);
    v2 += v3;
    v3 = std::rotl(v3, 16);
    v3 ^= v2;
    v0 += v3;
    v3 = std::rotl(v3, 21);
    v3 ^= v0;
    v2 += v1;
    v1 = std::rotl(v1, 17);
    v1 ^= v2;
    v2 = std::rotl(v2, 32);
}
static_assert(std::endian::native == std::endian::little,
              "keyed_hash assumes a little-endian host");
}  // namespace

SipHasher::SipHasher(const HashKey& key)
    : v0_(key[0] ^ 0x736f6d6570736575ULL),
      v1_(key[1] ^ 0x646f72616e646f6dULL),
      v2_(key[0] ^ 0x6c7967656e657261ULL),
      v3_(key[1] ^ 0x7465646279746573ULL) {}

void SipHasher::compress(uint64_t m) {
    v3_ ^= m;
    sip_round(v0_, v1_, v2_, v3_);
    sip_round(v0_, v1_, v2_, v3_);
    v0_ ^= m;
}

void SipHasher::update(const void* data, size_t n) {
    const auto* p = static_cast<const uint8_t*>(data);
    total_ += n;
    while (n > 0 && n_tail_ != 0) {  // top up the pending word
        tail_ |= static_cast<uint64_t>(*p++) << (8 * n_tail_);
        --n;
        if (++n_tail_ == 8) {
            compress(tail_);
            tail_ = 0;
            n_tail_ = 0;
        }
    }
    while (n >= 8) {
        uint64_t m = 0;
        for (int i = 0; i < 8; ++i) m |= static_cast<uint64_t>(p[i]) << (8 * i);
        compress(m);
        p += 8;
        n -= 8;
    }
    while (n > 0) {
        tail_ |= static_cast<uint64_t>(*p++) << (8 * n_tail_);
        ++n_tail_;
        --n;
    }
}

uint64_t SipHasher::finish() const {
    uint64_t v0 = v0_, v1 = v1_, v2 = v2_, v3 = v3_;
    const uint64_t b = (total_ << 56) | tail_;
    v3 ^= b;
    sip_round(v0, v1, v2, v3);
    sip_round(v0, v1, v2, v3);
    v0 ^= b;
    v2 ^= 0xff;
    for (int i = 0; i < 4; ++i) sip_round(v0, v1, v2, v3);
    return v0 ^ v1 ^ v2 ^ v3;
}

uint64_t siphash24(const HashKey& key, std::span<const uint8_t> data) {
    SipHasher h(key);
    h.update(data.data(), data.size());
    return h.finish();
}

HashKey random_hash_key() {
    std::random_device rd;
    HashKey k{};
    for (auto& w : k) w = (static_cast<uint64_t>(rd()) << 32) ^ static_cast<uint64_t>(rd());
    return k;
}

}  // namespace warden::kv
