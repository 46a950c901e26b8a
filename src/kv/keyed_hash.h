#pragma once
// SipHash-2-4 (Aumasson & Bernstein, 2012): a keyed 64-bit PRF. The prefix cache keys its page
// hashes with a per-process random secret, so nobody outside the process can compute, predict
// or deliberately collide a key (no weak std::hash anywhere on this path).
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

namespace warden::kv {

using HashKey = std::array<uint64_t, 2>;  // k0, k1 (the 16-byte key, little-endian halves)

// One-shot SipHash-2-4 of `data` under `key`.
uint64_t siphash24(const HashKey& key, std::span<const uint8_t> data);

// Incremental SipHash-2-4: feed bytes in any split, finish() equals siphash24 of the
// concatenation.
class SipHasher {
  public:
    explicit SipHasher(const HashKey& key);
    void update(const void* data, size_t n);
    void u32(uint32_t x) { update(&x, sizeof x); }  // little-endian hosts only (x86-64, aarch64)
    void u64(uint64_t x) { update(&x, sizeof x); }
    uint64_t finish() const;

  private:
    void compress(uint64_t m);
    uint64_t v0_, v1_, v2_, v3_;
    uint64_t tail_ = 0;   // pending bytes, little-endian
    size_t n_tail_ = 0;   // 0..7
    uint64_t total_ = 0;  // bytes fed
};

// 16 random bytes from the OS (std::random_device, i.e. getrandom/urandom on Linux).
HashKey random_hash_key();

}  // namespace warden::kv
