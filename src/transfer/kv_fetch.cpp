#include "transfer/kv_fetch.h"

#include <algorithm>
#include <memory>

#include "util/log.h"

namespace warden::transfer {

const char* fetch_status_name(FetchStatus s) {
    switch (s) {
        case FetchStatus::Ok:
            return "ok";
        case FetchStatus::Refused:
            return "refused by the prefill server";
        case FetchStatus::PeerLost:
            return "prefill server connection lost";
        case FetchStatus::Timeout:
            return "KV transfer timed out";
        case FetchStatus::Cancelled:
            return "cancelled";
        case FetchStatus::Unreachable:
            return "prefill server unreachable";
        case FetchStatus::Malformed:
            return "malformed or inconsistent ready message";
    }
    return "?";
}

KvFetchClient::KvFetchClient(UcxNode& node, TransferFaultInjector* faults)
    : node_(node), faults_(faults) {
    node_.on_message(kAmPrefillReady, [this](ConnId conn, std::vector<uint8_t>&& b) {
        on_ready(conn, std::move(b), false);
    });
    node_.on_message(kAmLocalPath,
                     [this](ConnId conn, std::vector<uint8_t>&& b) { on_local_path(conn, b); });
    node_.on_message(kAmReleaseAck,
                     [this](ConnId conn, std::vector<uint8_t>&& b) { on_release_ack(conn, b); });
    node_.on_disconnect([this](ConnId conn) {
        for (auto it = conns_.begin(); it != conns_.end();)
            it = it->second == conn ? conns_.erase(it) : std::next(it);
        // The shared-memory endpoint has no failure detection of its own: it goes with its
        // connection. Its reads are local copies, so none is in flight here.
        if (auto l = local_.find(conn); l != local_.end()) {
            node_.close(l->second);  // destroys its remote keys too
            local_keys_.erase(l->second);
            local_.erase(l);
        }
        std::vector<uint64_t> ids;
        for (auto& [id, p] : pending_)
            if (p.conn == conn && (!p.fetching || p.confirming)) ids.push_back(id);
        // Transfers already fetching end when their gets fail (the connection closing fails
        // them); the ones still waiting for Ready or for the ReleaseAck end now.
        for (uint64_t id : ids) finish(id, FetchStatus::PeerLost);
    });
    node_.on_tick([this] {
        const auto now = std::chrono::steady_clock::now();
        for (size_t i = 0; i < held_.size();) {
            if (held_[i].at > now) {
                ++i;
                continue;
            }
            Held h = std::move(held_[i]);
            held_.erase(held_.begin() + static_cast<std::ptrdiff_t>(i));
            on_ready(h.conn, std::move(h.msg), true);
        }
        std::vector<uint64_t> late;
        for (auto& [id, p] : pending_)
            if (p.deadline <= now && !p.abandoned) late.push_back(id);
        for (uint64_t id : late) finish(id, FetchStatus::Timeout);
    });
}

ConnId KvFetchClient::conn_to(const std::string& host, uint16_t port) {
    const std::string key = host + ":" + std::to_string(port);
    auto it = conns_.find(key);
    if (it != conns_.end() && node_.connected(it->second)) return it->second;
    const ConnId c = node_.connect(host, port);
    if (c) {
        conns_[key] = c;
        // Ask for the prefill server's worker address: on this host, a shared-memory endpoint
        // to it (on_local_path). Until then, and where there is none, pages come over c.
        node_.send(c, kAmLocalPath, encode(LocalPath{}));
    }
    return c;
}

KvFetchClient::LocalKey* KvFetchClient::local_key(ConnId local,
                                                  const std::vector<uint8_t>& packed) {
    // The prefill server reuses its staging regions, so their keys repeat: a key stays
    // unpacked (the region mapped here) across transfers, which spares every transfer the
    // mapping and the page faults of first touch. At most kLocalKeys per endpoint, the least
    // recently used key not in use goes first.
    constexpr size_t kLocalKeys = 8;
    std::deque<LocalKey>& keys = local_keys_[local];
    for (auto it = keys.begin(); it != keys.end(); ++it)
        if (it->packed == packed) {
            LocalKey k = std::move(*it);
            keys.erase(it);
            keys.push_back(std::move(k));
            return &keys.back();
        }
    ucp_rkey_h key = node_.unpack_rkey(local, packed);
    if (key == nullptr) return nullptr;
    for (auto it = keys.begin(); keys.size() >= kLocalKeys && it != keys.end();) {
        if (it->users > 0) {
            ++it;
            continue;
        }
        node_.release_rkey(local, it->key);
        it = keys.erase(it);
    }
    keys.push_back(LocalKey{packed, key, 0});
    return &keys.back();
}

void KvFetchClient::unuse_local_key(ConnId local, ucp_rkey_h key) {
    auto it = local_keys_.find(local);
    if (it == local_keys_.end()) return;  // the endpoint closed (and released its keys)
    for (LocalKey& k : it->second)
        if (k.key == key && k.users > 0) --k.users;
}

std::string KvFetchClient::local_lanes() const {
    std::lock_guard lk(lanes_mu_);
    return local_lanes_;
}

void KvFetchClient::on_local_path(ConnId conn, const std::vector<uint8_t>& b) {
    auto m = decode_local_path(b);
    if (!m || m->step != LocalPath::Address || local_.count(conn) || !node_.connected(conn)) {
        ++stats_.stale_messages;
        return;
    }
    std::string lanes;
    const ConnId l = node_.connect_local(m->worker_address, &lanes);
    {
        std::lock_guard lk(lanes_mu_);
        local_lanes_ = lanes;
    }
    if (l == 0) {
        spdlog::debug("KV transfer: no shared-memory path to the prefill server (UCX lanes: {})",
                      lanes.empty() ? "none" : lanes);
        return;
    }
    local_[conn] = l;
    ++stats_.local_paths;
    spdlog::info("KV transfer: shared-memory path to a prefill server (UCX lanes: {})", lanes);
    LocalPath ready;
    ready.step = LocalPath::Ready;
    node_.send(conn, kAmLocalPath, encode(ready));
}

void KvFetchClient::on_release_ack(ConnId conn, const std::vector<uint8_t>& b) {
    auto m = decode_release_ack(b);
    auto it = m ? pending_.find(m->transfer_id) : pending_.end();
    if (it == pending_.end() || !it->second.confirming || it->second.conn != conn) {
        ++stats_.stale_messages;
        return;
    }
    if (m->held)
        finish(m->transfer_id, FetchStatus::Ok);
    else
        finish(m->transfer_id, FetchStatus::PeerLost,
               "the prefill server let the pages go before they were read");
}

void KvFetchClient::start(const std::string& host, uint16_t port, PrefillRequest req,
                          std::vector<uint8_t*> dest, size_t page_bytes,
                          std::chrono::milliseconds timeout, Done done) {
    ++stats_.started;
    req.n_pages = dest.size();
    node_.post([this, host, port, req = std::move(req), dest = std::move(dest), page_bytes, timeout,
                done = std::move(done)]() mutable {
        const uint64_t id = req.transfer_id;
        if (pending_.count(id)) {
            ++stats_.failed;
            FetchResult r;
            r.status = FetchStatus::Malformed;
            r.error = "transfer id in use";
            done(std::move(r));
            return;
        }
        const ConnId c = conn_to(host, port);
        const auto now = std::chrono::steady_clock::now();
        Pending& p = pending_[id];
        p.conn = c;
        p.started = now;
        p.deadline = now + timeout;
        p.dest = std::move(dest);
        p.page_bytes = page_bytes;
        p.done = std::move(done);
        if (c == 0) {
            finish(id, FetchStatus::Unreachable,
                   "cannot connect to " + host + ":" + std::to_string(port));
            return;
        }
        node_.send(c, kAmPrefillRequest, encode(req), [this, id](bool ok) {
            auto it = pending_.find(id);
            if (!ok && it != pending_.end() && !it->second.fetching)
                finish(id, FetchStatus::PeerLost, "request not delivered");
        });
    });
}

void KvFetchClient::cancel(uint64_t transfer_id) {
    node_.post([this, transfer_id] {
        if (pending_.count(transfer_id)) finish(transfer_id, FetchStatus::Cancelled);
    });
}

void KvFetchClient::release_remote(ConnId conn, uint64_t id) {
    node_.send(conn, kAmPrefillRelease, encode(PrefillRelease{id}));
}

void KvFetchClient::on_ready(ConnId conn, std::vector<uint8_t>&& b, bool replay) {
    auto m = decode_ready(b);
    if (!m) {
        ++stats_.stale_messages;
        return;  // whose it was is unknown; its transfer ends by its timeout
    }
    const uint64_t id = m->transfer_id;
    auto it = pending_.find(id);
    if (it == pending_.end() || it->second.fetching || it->second.conn != conn) {
        // A duplicate, or late after a timeout or cancel: never fetched, but the prefill
        // server may free the pages it holds for it.
        ++stats_.stale_messages;
        if (it == pending_.end() && m->error.empty()) release_remote(conn, id);
        return;
    }
    const TransferFault fault = faults_ && !replay ? faults_->take() : TransferFault::None;
    if (fault == TransferFault::Delay) {
        held_.push_back({std::chrono::steady_clock::now() + faults_->delay(), conn, std::move(b)});
        return;
    }
    if (!m->error.empty()) {
        finish(id, FetchStatus::Refused, m->error);
        return;
    }
    Pending& p = it->second;
    if (m->addrs.size() != p.dest.size() || m->page_bytes != p.page_bytes) {
        release_remote(conn, id);
        finish(id, FetchStatus::Malformed,
               "the prefill server offers " + std::to_string(m->addrs.size()) + " pages of " +
                   std::to_string(m->page_bytes) + " bytes, " + std::to_string(p.dest.size()) +
                   " of " + std::to_string(p.page_bytes) + " were reserved");
        return;
    }
    // Shared memory where the prefill server staged the pages in memory this node maps (local
    // copies); else over the connection.
    p.read_conn = conn;
    if (auto l = local_.find(conn); l != local_.end() && !m->addrs.empty()) {
        if (LocalKey* k = local_key(l->second, m->rkey);
            k && UcxNode::maps_locally(k->key, m->addrs.front()) &&
            UcxNode::maps_locally(k->key, m->addrs.back())) {
            ++k->users;
            p.rkey = k->key;
            p.read_conn = l->second;
            p.local = true;
        }
    }
    if (p.rkey == nullptr) p.rkey = node_.unpack_rkey(conn, m->rkey);
    if (p.rkey == nullptr) {
        release_remote(conn, id);
        finish(id, FetchStatus::Malformed, "cannot unpack the prefill server's remote key");
        return;
    }
    const size_t n = p.dest.size();
    std::vector<size_t> src(n);
    for (size_t i = 0; i < n; ++i) src[i] = i;
    const size_t victim = faults_ && n ? static_cast<size_t>(faults_->draw() % n) : 0;
    if (fault == TransferFault::Reorder && n >= 2)
        std::swap(src[victim], src[(victim + 1 + faults_->draw() % (n - 1)) % n]);
    const uint64_t flip = faults_ ? faults_->draw() : 0;
    p.fetching = true;
    p.fetch_started = std::chrono::steady_clock::now();
    p.result.ready = std::move(*m);
    const std::vector<uint64_t> addrs = std::move(p.result.ready.addrs);
    p.result.ready.rkey.clear();
    const ConnId c = p.read_conn;
    const ucp_rkey_h rkey = p.rkey;
    const size_t page_bytes = p.page_bytes;
    const std::vector<uint8_t*> dest = p.dest;
    const int reps = fault == TransferFault::Duplicate ? 2 : 1;
    ++p.outstanding;  // held while issuing, so no get completing early finishes the transfer
    for (size_t i = 0; i < n; ++i) {
        if (fault == TransferFault::KillPeer && i == n / 2 && kill_peer_) kill_peer_();
        if (fault == TransferFault::Drop && i == victim) continue;
        for (int r = 0; r < reps; ++r) {
            ++pending_[id].outstanding;
            uint8_t* d = dest[i];
            const bool corrupt = fault == TransferFault::Corrupt && i == victim && r == 0;
            node_.get(c, d, page_bytes, addrs[src[i]], rkey,
                      [this, id, d, corrupt, flip, page_bytes](bool ok) {
                          // A bit flipped on the wire, as the receiver would see it.
                          if (ok && corrupt) d[flip % page_bytes] ^= 0x5a;
                          get_done(id, ok);
                      });
        }
    }
    get_done(id, true);  // the issuing hold
}

void KvFetchClient::get_done(uint64_t id, bool ok) {
    auto it = pending_.find(id);
    if (it == pending_.end()) return;
    Pending& p = it->second;
    if (!ok) p.get_failed = true;
    if (--p.outstanding > 0) return;
    // Every get has completed or failed: nothing more lands in the pages.
    p.fetch_done = std::chrono::steady_clock::now();
    if (p.local)
        unuse_local_key(p.read_conn, p.rkey);  // stays mapped for the next transfer
    else
        node_.release_rkey(p.read_conn, p.rkey);
    p.rkey = nullptr;
    if (p.local && !p.abandoned && !p.get_failed) {
        // Local copies succeed even when the prefill server died meanwhile: accept the pages
        // once it confirms that it still held them (on_release_ack).
        p.confirming = true;
        node_.send(p.conn, kAmPrefillRelease, encode(PrefillRelease{id, true}),
                   [this, id](bool sent) {
                       if (!sent) finish(id, FetchStatus::PeerLost, "release not delivered");
                   });
        return;
    }
    release_remote(p.conn, id);
    if (p.abandoned)
        finish(id, *p.abandoned);
    else if (p.get_failed)
        finish(id, FetchStatus::PeerLost, "a page fetch failed");
    else
        finish(id, FetchStatus::Ok);
}

void KvFetchClient::finish(uint64_t id, FetchStatus s, std::string error) {
    auto it = pending_.find(id);
    if (it == pending_.end()) return;
    Pending& p = it->second;
    if (p.outstanding > 0) {
        // Gets still in flight write into the caller's pages: the outcome waits for them.
        if (!p.abandoned) p.abandoned = s;
        return;
    }
    FetchResult r = std::move(p.result);
    r.status = s;
    r.error = std::move(error);
    r.transfer_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - p.started)
            .count();
    if (s == FetchStatus::Ok) {
        r.fetch_ms =
            std::chrono::duration<double, std::milli>(p.fetch_done - p.fetch_started).count();
        r.bytes = static_cast<int64_t>(p.page_bytes * p.dest.size());
        r.local = p.local;
        stats_.bytes += r.bytes;
        stats_.local_reads += p.local;
        ++stats_.completed;
    } else {
        ++stats_.failed;
        if (s == FetchStatus::Timeout) ++stats_.timeouts;
        if (s == FetchStatus::PeerLost) ++stats_.peer_lost;
    }
    Done done = std::move(p.done);
    pending_.erase(it);
    done(std::move(r));
}

}  // namespace warden::transfer
