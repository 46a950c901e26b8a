#include "transfer/prefill_service.h"

#include <memory>
#include <mutex>

#include "kv/kv_convert.h"
#include "kv/kv_handoff.h"
#include "util/log.h"

namespace warden::transfer {

namespace {

// One request's reply, sent exactly once: the pages when the prompt is computed, else an error
// when the request ends without them.
struct ReplyOnce {
    std::mutex mu;
    KvSourceServer::Reply reply;
    bool sent = false;
    void send(PrefilledPages&& p) {
        std::lock_guard lk(mu);
        if (sent) return;
        sent = true;
        reply(std::move(p));
    }
};

}  // namespace

PrefillService::PrefillService(engine::Engine& eng, kv::KvCache& kv, std::string model_id,
                               const PrefillServiceOptions& o)
    : eng_(eng),
      kv_(kv),
      model_id_(std::move(model_id)),
      fingerprint_(kv::kv_layout_fingerprint(kv.config(), model_id_)),
      node_(UcxNodeOptions{true, o.host, o.port}),
      source_(
          node_, kv.pool().data(kv::kNullPage),
          static_cast<size_t>((static_cast<int64_t>(kv.pool().capacity()) + 1) *
                              kv.bytes_per_page()),
          [this](PrefillRequest&& req, KvSourceServer::Reply reply) {
              handle(std::move(req), std::move(reply));
          },
          o.lease) {
    node_.start();
}

PrefillService::~PrefillService() {
    node_.stop();  // no callback runs after this; the source releases what is still leased
}

void PrefillService::handle(PrefillRequest&& req, KvSourceServer::Reply reply) {
    auto once = std::make_shared<ReplyOnce>();
    once->reply = std::move(reply);
    std::string why;
    const std::optional<kv::KvCacheConfig> dst =
        kv::check_wire_format(kv_.config(), model_id_, req.format, &why);
    if (!dst || kv::kv_layout_fingerprint(*dst, model_id_) != req.fingerprint) {
        PrefilledPages p;
        p.error = dst ? "KV layout fingerprint mismatch (another build?)" : why;
        once->send(std::move(p));
        return;
    }
    const bool convert = !kv::same_storage_format(*dst, kv_.config());
    engine::Request er;
    er.prompt = std::move(req.prompt);
    er.max_new_tokens = 1;  // the token sampled here is discarded: the decode server samples
    er.tenant = "prefill";
    if (convert) {
        er.on_prompt_computed = [dst = *dst, fp = req.fingerprint, once](
                                    kv::KvCache& kv, const kv::PageTable& t,
                                    const std::vector<float>& logits) {
            // Scheduler thread: the pages are read here, so nothing of this server's pool is
            // held past this call; the converted copy lives until the decode server is done.
            PrefilledPages p;
            const auto n_src = static_cast<size_t>(kv.pages_for(t.n_tokens));
            const int64_t n_dst = (t.n_tokens + dst.page_size - 1) / dst.page_size;
            const auto page_bytes = static_cast<size_t>(kv::kv_page_bytes(dst));
            for (size_t i = 0; i < n_src; ++i)
                if (!kv.pool().is_live(t.pages[i])) {
                    p.error = "prefill page table is stale";
                    once->send(std::move(p));
                    return;
                }
            p.staging =
                std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(n_dst) * page_bytes);
            kv::convert_kv_pages(kv, std::span(t.pages.data(), n_src), t.n_tokens, dst,
                                 p.staging->data());
            for (int64_t i = 0; i < n_dst; ++i) {
                const uint8_t* pg = p.staging->data() + static_cast<size_t>(i) * page_bytes;
                p.pages.push_back(pg);
                p.checksums.push_back(kv::page_checksum(pg, page_bytes));
            }
            p.page_bytes = page_bytes;
            p.fingerprint = fp;  // equal to kv_layout_fingerprint(dst, model): checked above
            p.n_tokens = t.n_tokens;
            p.logits = logits;
            once->send(std::move(p));
        };
    } else {
        er.on_prompt_computed = [this, once](kv::KvCache& kv, const kv::PageTable& t,
                                             const std::vector<float>& logits) {
            // Scheduler thread. The pages stay held (one more reference) until the decode
            // server has read them; the release runs on this thread again (Engine::post).
            PrefilledPages p;
            const auto n_pages = static_cast<size_t>(kv.pages_for(t.n_tokens));
            std::vector<kv::PageRef> refs(t.pages.begin(),
                                          t.pages.begin() + static_cast<std::ptrdiff_t>(n_pages));
            for (const kv::PageRef& r : refs) {
                if (kv.pool().retain(r) != kv::PoolStatus::Ok) {
                    p.error = "prefill page table is stale";
                    for (const kv::PageRef& q : refs) {
                        if (q == r) break;
                        kv.pool().release(q);
                    }
                    once->send(std::move(p));
                    return;
                }
                p.pages.push_back(kv.pool().data(r.page));
            }
            p.page_bytes = static_cast<size_t>(kv.bytes_per_page());
            p.fingerprint = fingerprint_;
            p.n_tokens = t.n_tokens;
            p.checksums = kv::page_checksums(kv, refs);
            p.logits = logits;
            p.release = [this, refs] {
                eng_.post([this, refs] {
                    for (const kv::PageRef& r : refs) kv_.pool().release(r);
                });
            };
            once->send(std::move(p));
        };
    }
    auto sub = eng_.submit(std::move(er));
    if (sub.status != engine::SubmitStatus::Ok) {
        PrefilledPages p;
        p.error = sub.status == engine::SubmitStatus::QueueFull ? "prefill server queue full"
                                                                : "prefill server draining";
        once->send(std::move(p));
        return;
    }
    engine::Stream* stream = sub.stream.get();
    stream->set_notify([stream, once] {
        engine::Event ev;
        while (stream->next(ev, std::chrono::milliseconds(0))) {
            if (ev.kind != engine::Event::Kind::Finish) continue;
            PrefilledPages p;  // ignored when the pages were sent already
            p.error = std::string("prefill ended without the prompt's KV (") +
                      engine::finish_reason_name(ev.result.finish) +
                      (ev.result.error.empty() ? "" : ": " + ev.result.error) + ")";
            once->send(std::move(p));
        }
    });
}

}  // namespace warden::transfer
