#include "transfer/kv_protocol.h"

#include <cstring>

namespace warden::transfer {

namespace {

constexpr uint32_t kMagicRequest = 0x57524b34;  // "WRK4": with the KV wire format
constexpr uint32_t kMagicReady = 0x57524b32;
constexpr uint32_t kMagicRelease = 0x57524b35;  // "WRK5": with the confirm flag
constexpr uint32_t kMagicLocalPath = 0x57524b36;
constexpr uint32_t kMagicReleaseAck = 0x57524b37;
constexpr uint64_t kMaxItems = uint64_t{1} << 26;  // bound on any array length

class Writer {
  public:
    // Room for the fixed fields up front (this also spares g++ 12 a false -Warray-bounds on
    // the first small inserts).
    Writer() { out.reserve(64); }
    template <class T>
    void put(T v) {
        const auto* p = reinterpret_cast<const uint8_t*>(&v);
        out.insert(out.end(), p, p + sizeof v);
    }
    template <class T>
    void array(const std::vector<T>& v) {
        put<uint64_t>(v.size());
        const auto* p = reinterpret_cast<const uint8_t*>(v.data());
        out.insert(out.end(), p, p + v.size() * sizeof(T));
    }
    std::vector<uint8_t> out;
};

class Reader {
  public:
    explicit Reader(std::span<const uint8_t> b) : b_(b) {}
    template <class T>
    bool get(T& v) {
        if (b_.size() - pos_ < sizeof v) return false;
        std::memcpy(&v, b_.data() + pos_, sizeof v);
        pos_ += sizeof v;
        return true;
    }
    template <class T>
    bool array(std::vector<T>& v) {
        uint64_t n = 0;
        if (!get(n) || n > kMaxItems || (b_.size() - pos_) / sizeof(T) < n) return false;
        v.resize(n);
        if (n) std::memcpy(v.data(), b_.data() + pos_, n * sizeof(T));
        pos_ += n * sizeof(T);
        return true;
    }
    bool done() const { return pos_ == b_.size(); }

  private:
    std::span<const uint8_t> b_;
    size_t pos_ = 0;
};

}  // namespace

std::vector<uint8_t> encode(const PrefillRequest& m) {
    Writer w;
    w.put(kMagicRequest);
    w.put(m.transfer_id);
    w.put(m.fingerprint);
    w.put(m.format.type);
    w.put(m.format.scales);
    w.put(m.format.tensor_scale);
    w.put(m.format.page_size);
    w.put(m.format.page_bytes);
    w.put(m.format.model);
    w.put(m.n_pages);
    w.array(m.prompt);
    return std::move(w.out);
}

std::vector<uint8_t> encode(const PrefillReady& m) {
    Writer w;
    w.put(kMagicReady);
    w.put(m.transfer_id);
    w.array(std::vector<char>(m.error.begin(), m.error.end()));
    w.put(m.manifest.transfer_id);
    w.put(m.manifest.fingerprint);
    w.put(m.manifest.n_tokens);
    w.array(m.manifest.checksums);
    w.array(m.logits);
    w.put(m.page_bytes);
    w.array(m.addrs);
    w.array(m.rkey);
    return std::move(w.out);
}

std::vector<uint8_t> encode(const PrefillRelease& m) {
    Writer w;
    w.put(kMagicRelease);
    w.put(m.transfer_id);
    w.put<uint8_t>(m.confirm ? 1 : 0);
    return std::move(w.out);
}

std::vector<uint8_t> encode(const LocalPath& m) {
    Writer w;
    w.put(kMagicLocalPath);
    w.put<uint8_t>(m.step);
    w.array(m.worker_address);
    return std::move(w.out);
}

std::vector<uint8_t> encode(const ReleaseAck& m) {
    Writer w;
    w.put(kMagicReleaseAck);
    w.put(m.transfer_id);
    w.put<uint8_t>(m.held ? 1 : 0);
    return std::move(w.out);
}

std::optional<PrefillRequest> decode_request(std::span<const uint8_t> b) {
    Reader r(b);
    PrefillRequest m;
    uint32_t magic = 0;
    if (!r.get(magic) || magic != kMagicRequest || !r.get(m.transfer_id) || !r.get(m.fingerprint) ||
        !r.get(m.format.type) || !r.get(m.format.scales) || !r.get(m.format.tensor_scale) ||
        !r.get(m.format.page_size) || !r.get(m.format.page_bytes) || !r.get(m.format.model) ||
        !r.get(m.n_pages) || !r.array(m.prompt) || !r.done())
        return std::nullopt;
    return m;
}

std::optional<PrefillReady> decode_ready(std::span<const uint8_t> b) {
    Reader r(b);
    PrefillReady m;
    uint32_t magic = 0;
    std::vector<char> err;
    if (!r.get(magic) || magic != kMagicReady || !r.get(m.transfer_id) || !r.array(err) ||
        !r.get(m.manifest.transfer_id) || !r.get(m.manifest.fingerprint) ||
        !r.get(m.manifest.n_tokens) || !r.array(m.manifest.checksums) || !r.array(m.logits) ||
        !r.get(m.page_bytes) || !r.array(m.addrs) || !r.array(m.rkey) || !r.done())
        return std::nullopt;
    m.error.assign(err.begin(), err.end());
    return m;
}

std::optional<PrefillRelease> decode_release(std::span<const uint8_t> b) {
    Reader r(b);
    PrefillRelease m;
    uint32_t magic = 0;
    uint8_t confirm = 0;
    if (!r.get(magic) || magic != kMagicRelease || !r.get(m.transfer_id) || !r.get(confirm) ||
        confirm > 1 || !r.done())
        return std::nullopt;
    m.confirm = confirm == 1;
    return m;
}

std::optional<LocalPath> decode_local_path(std::span<const uint8_t> b) {
    Reader r(b);
    LocalPath m;
    uint32_t magic = 0;
    uint8_t step = 0;
    if (!r.get(magic) || magic != kMagicLocalPath || !r.get(step) || step > LocalPath::Ready ||
        !r.array(m.worker_address) || !r.done())
        return std::nullopt;
    m.step = static_cast<LocalPath::Step>(step);
    if ((m.step == LocalPath::Address) == m.worker_address.empty()) return std::nullopt;
    return m;
}

std::optional<ReleaseAck> decode_release_ack(std::span<const uint8_t> b) {
    Reader r(b);
    ReleaseAck m;
    uint32_t magic = 0;
    uint8_t held = 0;
    if (!r.get(magic) || magic != kMagicReleaseAck || !r.get(m.transfer_id) || !r.get(held) ||
        held > 1 || !r.done())
        return std::nullopt;
    m.held = held == 1;
    return m;
}

}  // namespace warden::transfer
