#include "transfer/transfer_faults.h"

namespace warden::transfer {

const char* transfer_fault_name(TransferFault f) {
    switch (f) {
        case TransferFault::None:
            return "none";
        case TransferFault::Drop:
            return "drop";
        case TransferFault::Duplicate:
            return "duplicate";
        case TransferFault::Reorder:
            return "reorder";
        case TransferFault::Corrupt:
            return "corrupt";
        case TransferFault::Delay:
            return "delay";
        case TransferFault::KillPeer:
            return "kill-peer";
    }
    return "?";
}

void TransferFaultInjector::arm(TransferFault f) {
    std::lock_guard<std::mutex> lk(mu_);
    armed_ = f;
}

void TransferFaultInjector::set_rate(double p) {
    std::lock_guard<std::mutex> lk(mu_);
    rate_ = p;
}

void TransferFaultInjector::set_delay(std::chrono::milliseconds d) {
    std::lock_guard<std::mutex> lk(mu_);
    delay_ = d;
}

std::chrono::milliseconds TransferFaultInjector::delay() const {
    std::lock_guard<std::mutex> lk(mu_);
    return delay_;
}

TransferFault TransferFaultInjector::take() {
    std::lock_guard<std::mutex> lk(mu_);
    TransferFault f = armed_;
    armed_ = TransferFault::None;
    if (f == TransferFault::None && rate_ > 0.0 &&
        std::uniform_real_distribution<double>(0, 1)(rng_) < rate_)
        f = static_cast<TransferFault>(1 + rng_() % (kTransferFaultKinds - 1));
    ++injected_[static_cast<size_t>(f)];
    return f;
}

uint64_t TransferFaultInjector::draw() {
    std::lock_guard<std::mutex> lk(mu_);
    return rng_();
}

std::array<int64_t, kTransferFaultKinds> TransferFaultInjector::injected() const {
    std::lock_guard<std::mutex> lk(mu_);
    return injected_;
}

}  // namespace warden::transfer
