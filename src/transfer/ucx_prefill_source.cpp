#include "transfer/ucx_prefill_source.h"

#include "util/error.h"
#include "util/thread_priority.h"

namespace warden::transfer {

std::pair<std::string, uint16_t> parse_host_port(const std::string& s, const std::string& what,
                                                 bool allow_any_port) {
    const size_t colon = s.rfind(':');
    util::check(colon != std::string::npos && colon > 0 && colon + 1 < s.size(),
                what + ": expected HOST:PORT, got '" + s + "'");
    int port = -1;
    try {
        size_t used = 0;
        port = std::stoi(s.substr(colon + 1), &used);
        if (used != s.size() - colon - 1) port = -1;
    } catch (const std::exception&) {
        port = -1;
    }
    util::check(port >= (allow_any_port ? 0 : 1) && port < 65536,
                what + ": bad port in '" + s + "'");
    return {s.substr(0, colon), static_cast<uint16_t>(port)};
}

UcxPrefillSource::UcxPrefillSource(const std::vector<std::string>& endpoints, uint64_t fingerprint,
                                   const kv::KvWireFormat& format,
                                   std::chrono::milliseconds timeout)
    : fingerprint_(fingerprint),
      format_(format),
      timeout_(timeout),
      node_(UcxNodeOptions{false, "127.0.0.1", 0, util::kHandoffNice}),
      client_(node_) {
    util::check(!endpoints.empty(), "--role decode needs --prefill-kv HOST:PORT[,HOST:PORT...]");
    for (const std::string& e : endpoints) {
        auto [h, p] = parse_host_port(e, "--prefill-kv");
        endpoints_.push_back(Endpoint{h, p, 0, {}, h + ":" + std::to_string(p)});
    }
    node_.start();
}

UcxPrefillSource::~UcxPrefillSource() {
    node_.stop();
}

std::optional<size_t> UcxPrefillSource::find(const std::string& endpoint) const {
    for (size_t i = 0; i < endpoints_.size(); ++i)
        if (endpoints_[i].name == endpoint) return i;
    return std::nullopt;
}

bool UcxPrefillSource::knows(const std::string& endpoint) const {
    return find(endpoint).has_value();  // endpoints_ never changes after construction
}

size_t UcxPrefillSource::choose(int attempt, const std::string& hint) {
    // Fewest in flight among the servers not marked down; the hinted server first; on a
    // retry, a server other than the one tried before when there is one.
    const auto now = std::chrono::steady_clock::now();
    const std::optional<size_t> hinted = hint.empty() ? std::nullopt : find(hint);
    size_t best = 0;
    int64_t best_score = INT64_MAX;
    for (size_t i = 0; i < endpoints_.size(); ++i) {
        int64_t score = endpoints_[i].in_flight;
        if (endpoints_[i].down_until > now) score += 1'000'000;
        if (hinted && i == *hinted) score += attempt == 0 ? -100'000 : 1000;
        if (!hinted && attempt > 0 && i == (static_cast<size_t>(attempt) - 1) % endpoints_.size())
            score += 1000;
        if (score < best_score) {
            best_score = score;
            best = i;
        }
    }
    return best;
}

void UcxPrefillSource::fetch(uint64_t transfer_id, const std::vector<int32_t>& prompt,
                             std::vector<uint8_t*> dest, size_t page_bytes, int attempt,
                             const std::string& hint,
                             std::function<void(engine::RemotePrefill&&)> done) {
    size_t which = 0;
    std::string host;
    uint16_t port = 0;
    {
        std::lock_guard lk(mu_);
        which = choose(attempt, hint);
        ++endpoints_[which].in_flight;
        host = endpoints_[which].host;
        port = endpoints_[which].port;
    }
    PrefillRequest req;
    req.transfer_id = transfer_id;
    req.fingerprint = fingerprint_;
    req.format = format_;
    req.prompt = prompt;
    client_.start(
        host, port, std::move(req), std::move(dest), page_bytes, timeout_,
        [this, which, done = std::move(done)](FetchResult&& r) {
            {
                std::lock_guard lk(mu_);
                Endpoint& e = endpoints_[which];
                --e.in_flight;
                if (r.status == FetchStatus::PeerLost || r.status == FetchStatus::Unreachable ||
                    r.status == FetchStatus::Timeout)
                    e.down_until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
            }
            engine::RemotePrefill out;
            out.ok = r.ok();
            out.retryable = r.status != FetchStatus::Cancelled && !r.ok();
            if (!r.ok())
                out.error = std::string(fetch_status_name(r.status)) +
                            (r.error.empty() ? "" : ": " + r.error);
            out.manifest = std::move(r.ready.manifest);
            out.logits = std::move(r.ready.logits);
            out.transfer_ms = r.transfer_ms;
            out.fetch_ms = r.fetch_ms;
            out.bytes = r.bytes;
            done(std::move(out));
        });
}

void UcxPrefillSource::cancel(uint64_t transfer_id) {
    client_.cancel(transfer_id);
}

}  // namespace warden::transfer
