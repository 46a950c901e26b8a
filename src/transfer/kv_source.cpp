#include "transfer/kv_source.h"

#include <algorithm>
#include <cstring>
#include <memory>

#include "util/log.h"

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
        release(conn, m->transfer_id, m->confirm);
    });
    node_.on_message(kAmLocalPath, [this](ConnId conn, std::vector<uint8_t>&& b) {
        auto m = decode_local_path(b);
        if (!m || m->step == LocalPath::Address) {
            ++stats_.malformed;
            return;
        }
        if (m->step == LocalPath::Ready) {
            if (node_.connected(conn)) local_peers_.insert(conn);
            return;
        }
        LocalPath a;
        a.step = LocalPath::Address;
        try {
            a.worker_address = node_.worker_address();
        } catch (const std::exception& e) {
            spdlog::warn("KV transfer: no worker address for a local peer: {}", e.what());
            return;  // the peer keeps reading over its connection
        }
        node_.send(conn, kAmLocalPath, encode(a));
    });
    node_.on_disconnect([this](ConnId conn) {
        local_peers_.erase(conn);
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
    for (UcxRegion& r : spare_) node_.unmap(r);
    spare_.clear();
    node_.unmap(region_);
}

void KvSourceServer::release(ConnId conn, uint64_t transfer_id, bool confirm) {
    auto it = leases_.find({conn, transfer_id});
    const bool held = it != leases_.end();
    if (confirm) node_.send(conn, kAmReleaseAck, encode(ReleaseAck{transfer_id, held}));
    if (!held) return;  // unknown or already released (a duplicate)
    ++stats_.released;
    if (it->second.release) it->second.release();
    leases_.erase(it);
}

bool KvSourceServer::stage_local(PrefilledPages& p, const UcxRegion*& region) {
    const size_t need = p.page_bytes * p.pages.size();
    if (need == 0) return false;
    // The smallest spare region that fits, else a new one (2 MiB multiples, so regions are
    // reused across prompts of similar length). At most 4 spare regions are kept.
    auto best = spare_.end();
    for (auto it = spare_.begin(); it != spare_.end(); ++it)
        if (it->length >= need && (best == spare_.end() || it->length < best->length)) best = it;
    auto staged = std::make_shared<UcxRegion>();
    if (best != spare_.end()) {
        *staged = std::move(*best);
        spare_.erase(best);
    } else {
        try {
            constexpr size_t kGrain = size_t{2} << 20;
            *staged = node_.allocate((need + kGrain - 1) / kGrain * kGrain);
        } catch (const std::exception& e) {
            spdlog::warn(
                "KV transfer: no UCX-allocated staging memory ({}); pages are read "
                "over the connection instead",
                e.what());
            return false;
        }
    }
    auto* dst = reinterpret_cast<uint8_t*>(staged->base);
    for (size_t i = 0; i < p.pages.size(); ++i) {
        std::memcpy(dst + i * p.page_bytes, p.pages[i], p.page_bytes);
        p.pages[i] = dst + i * p.page_bytes;
    }
    // The application's pages (or its converted copy) are not read any more.
    if (p.release) p.release();
    p.staging.reset();
    p.release = [this, staged] {
        spare_.push_back(std::move(*staged));
        if (spare_.size() > 4) {
            auto smallest = std::min_element(
                spare_.begin(), spare_.end(),
                [](const UcxRegion& a, const UcxRegion& b) { return a.length < b.length; });
            node_.unmap(*smallest);
            spare_.erase(smallest);
        }
    };
    region = staged.get();
    ++stats_.staged_local;
    return true;
}

void KvSourceServer::ready(ConnId conn, uint64_t transfer_id, uint64_t n_pages,
                           PrefilledPages&& p) {
    PrefillReady m;
    m.transfer_id = transfer_id;
    if (p.error.empty() && p.pages.size() != n_pages)
        p.error = "page count mismatch: the prefill server holds the prompt in " +
                  std::to_string(p.pages.size()) + " pages, the decode server reserved " +
                  std::to_string(n_pages) + " (different --kv-page-size?)";
    // Every page lies in the registered pool, or in the converted copy when there is one.
    const uint64_t lo = p.staging ? reinterpret_cast<uint64_t>(p.staging->data()) : region_.base;
    const uint64_t len = p.staging ? p.staging->size() : region_.length;
    for (const uint8_t* pg : p.pages) {
        const auto a = reinterpret_cast<uint64_t>(pg);
        if (p.error.empty() && (a < lo || a + p.page_bytes > lo + len))
            p.error = "page outside the registered pool";
    }
    const UcxRegion* region = &region_;
    UcxRegion staged;  // converted pages: registered for this transfer, until its lease ends
    const bool local = p.error.empty() && node_.connected(conn) && local_peers_.count(conn) &&
                       stage_local(p, region);
    if (!local && p.staging && p.error.empty()) {
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
