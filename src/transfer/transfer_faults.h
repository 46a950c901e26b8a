#pragma once
// Fault injection on the sending side of the KV hand-off, for tests and chaos runs: each
// transfer takes at most one fault, armed explicitly (arm) or drawn at a rate (set_rate).
//   Drop       one page is never put (its destination keeps whatever it held)
//   Duplicate  every page is put twice and the completion message is sent twice
//   Reorder    two pages' payloads land in each other's destination
//   Corrupt    one byte of one page is flipped on the way
//   Delay      the completion message is held back by delay()
//   KillPeer   the connection is closed half-way through the puts
// A receiver must refuse every transfer whose pages are not exactly what was sent, and may
// accept Duplicate (the data is right; the second completion is stale and must be ignored).
#include <array>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <random>

namespace warden::transfer {

enum class TransferFault { None, Drop, Duplicate, Reorder, Corrupt, Delay, KillPeer };
constexpr int kTransferFaultKinds = 7;
const char* transfer_fault_name(TransferFault f);

class TransferFaultInjector {
  public:
    explicit TransferFaultInjector(uint64_t seed = 1) : rng_(seed) {}
    void arm(TransferFault f);  // the next transfer takes f
    void set_rate(double p);    // else each transfer takes a random fault with prob. p
    void set_delay(std::chrono::milliseconds d);
    std::chrono::milliseconds delay() const;
    TransferFault take();  // the sender, once per transfer
    uint64_t draw();       // a random number (which page, which byte)
    std::array<int64_t, kTransferFaultKinds> injected() const;

  private:
    mutable std::mutex mu_;
    std::mt19937_64 rng_;
    TransferFault armed_ = TransferFault::None;
    double rate_ = 0.0;
    std::chrono::milliseconds delay_{100};
    std::array<int64_t, kTransferFaultKinds> injected_{};
};

}  // namespace warden::transfer
