#include "transfer/kv_source.h"

#include <memory>

namespace warden::transfer {

KvSourceServer::KvSourceServer(UcxNode& node, void* region, size_t length, Handler handler,
                               std::chrono::milliseconds lease)
    : node_(node), handler_(std::move(handler)), lease_(lease) {
    region_ = node_.map(region, length);
    node_.on_message(kAmPrefillRequest, [this](ConnId conn, std::vector<uint8_t>&& b) {
        auto req = decode_request(b);
        if (!req) {
            ++stats_.malformed;  // the sender's id is unknown: nothing to answer
            return;
        }
        ++stats_.requests;
        const uint64_t id = req->transfer_id, n_pages = req->n_pages;
        handler_(std::move(*req), [this, conn, id, n_pages](PrefilledPages&& p) {
            auto pages = std::make_shared<PrefilledPages>(std::move(p));
            node_.post(
                [this, conn, id, n_pages, pages] { ready(conn, id, n_pages, std::move(*pages)); });
        });
    });
    node_.on_message(kAmPrefillRelease, [this](ConnId conn, std::vector<uint8_t>&& b) {
        auto m = decode_release(b);
        if (!m) {
            ++stats_.malformed;
            return;
        }
        release(conn, m->transfer_id);
    });
    node_.on_disconnect([this](ConnId conn) {
        for (auto it = leases_.begin(); it != leases_.end();) {
            if (it->first.first != conn) {
                ++it;
                continue;
            }
            ++stats_.peer_lost;
            if (it->second.release) it->second.release();
            it = leases_.erase(it);
        }
    });
    node_.on_tick([this] {
        const auto now = std::chrono::steady_clock::now();
        for (auto it = leases_.begin(); it != leases_.end();) {
            if (it->second.deadline > now) {
                ++it;
                continue;
            }
            ++stats_.lease_expired;
            if (it->second.release) it->second.release();
            it = leases_.erase(it);
        }
    });
}

KvSourceServer::~KvSourceServer() {
    for (auto& [key, l] : leases_)
        if (l.release) l.release();
    leases_.clear();
    node_.unmap(region_);
}

void KvSourceServer::release(ConnId conn, uint64_t transfer_id) {
    auto it = leases_.find({conn, transfer_id});
    if (it == leases_.end()) return;  // unknown or already released (a duplicate)
    ++stats_.released;
    if (it->second.release) it->second.release();
    leases_.erase(it);
}

void KvSourceServer::ready(ConnId conn, uint64_t transfer_id, uint64_t n_pages,
                           PrefilledPages&& p) {
    PrefillReady m;
    m.transfer_id = transfer_id;
    const UcxRegion* region = &region_;
    UcxRegion staged;  // converted pages: registered for this transfer, until its lease ends
    if (p.staging && p.error.empty()) {
        try {
            staged = node_.map(p.staging->data(), p.staging->size());
            region = &staged;
            p.release = [this, staged, buf = p.staging, inner = std::move(p.release)]() mutable {
                node_.unmap(staged);
                buf.reset();
                if (inner) inner();
            };
        } catch (const std::exception& e) {
            p.error = std::string("cannot register the converted pages: ") + e.what();
        }
    }
    if (p.error.empty() && p.pages.size() != n_pages)
        p.error = "page count mismatch: the prefill server holds the prompt in " +
                  std::to_string(p.pages.size()) + " pages, the decode server reserved " +
                  std::to_string(n_pages) + " (different --kv-page-size?)";
    for (const uint8_t* pg : p.pages) {
        const auto a = reinterpret_cast<uint64_t>(pg);
        if (p.error.empty() &&
            (a < region->base || a + p.page_bytes > region->base + region->length))
            p.error = "page outside the registered pool";
    }
    if (!p.error.empty() || !node_.connected(conn)) {
        if (p.release) p.release();
        ++stats_.refused;
        m.error = p.error.empty() ? "connection lost" : p.error;
        node_.send(conn, kAmPrefillReady, encode(m));
        return;
    }
    m.manifest.transfer_id = transfer_id;
    m.manifest.fingerprint = p.fingerprint;
    m.manifest.n_tokens = p.n_tokens;
    m.manifest.checksums = std::move(p.checksums);
    m.logits = std::move(p.logits);
    m.page_bytes = p.page_bytes;
    for (const uint8_t* pg : p.pages) m.addrs.push_back(reinterpret_cast<uint64_t>(pg));
    m.rkey = region->rkey;
    // A duplicate request id on the same connection replaces nothing: the first lease stands.
    if (leases_.count({conn, transfer_id})) {
        if (p.release) p.release();
    } else {
        leases_[{conn, transfer_id}] =
            Lease{std::chrono::steady_clock::now() + lease_, std::move(p.release)};
    }
    ++stats_.served;
    stats_.bytes += static_cast<int64_t>(p.page_bytes * p.pages.size());
    node_.send(conn, kAmPrefillReady, encode(m));
}

}  // namespace warden::transfer
