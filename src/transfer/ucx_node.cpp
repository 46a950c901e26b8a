#include "transfer/ucx_node.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <regex>

#include "util/error.h"
#include "util/log.h"
#include "util/thread_priority.h"

namespace warden::transfer {

namespace {

void check_ucs(ucs_status_t s, const char* what) {
    if (s != UCS_OK) throw util::Error(std::string("UCX: ") + what + ": " + ucs_status_string(s));
}

sockaddr_in make_addr(const std::string& host, uint16_t port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    if (inet_pton(AF_INET, host.c_str(), &a.sin_addr) != 1)
        throw util::Error("UCX: not an IPv4 address: '" + host + "'");
    return a;
}

// The completion of one non-blocking operation: the user's callback, owned by the request.
// Runs it on the progress thread after the UCX progress call that completed it (no UCX call
// from inside a UCX callback).
struct OpDone {
    std::vector<std::function<void()>>* deferred;
    std::function<void(bool)> fn;
};

void op_cb(void* request, ucs_status_t status, void* user_data) {
    auto* d = static_cast<OpDone*>(user_data);
    if (d->fn) d->deferred->push_back([fn = std::move(d->fn), ok = status == UCS_OK] { fn(ok); });
    delete d;
    ucp_request_free(request);
}

// Closes `ep` at once (no flush) and waits for the close: it completes within a few progress
// calls, and the request is freed when it has.
void force_close(ucp_worker_h worker, ucp_ep_h ep) {
    ucp_request_param_t rp{};
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    rp.flags = UCP_EP_CLOSE_FLAG_FORCE;
    ucs_status_ptr_t sp = ucp_ep_close_nbx(ep, &rp);
    if (UCS_PTR_IS_PTR(sp)) {
        while (ucp_request_check_status(sp) == UCS_INPROGRESS) ucp_worker_progress(worker);
        ucp_request_free(sp);
    }
}

}  // namespace

UcxNode::UcxNode(const UcxNodeOptions& opts) : lower_priority_by_(opts.lower_priority_by) {
    ucp_params_t p{};
    p.field_mask = UCP_PARAM_FIELD_FEATURES;
    p.features = UCP_FEATURE_AM | UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP;
    ucp_config_t* cfg = nullptr;
    check_ucs(ucp_config_read(nullptr, nullptr, &cfg), "config");
    const ucs_status_t s = ucp_init(&p, cfg, &ctx_);
    ucp_config_release(cfg);
    check_ucs(s, "init");
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    check_ucs(ucp_worker_create(ctx_, &wp, &worker_), "worker");
    wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    util::check(wake_fd_ >= 0, "UCX: eventfd failed");
    if (opts.listen) {
        const sockaddr_in a = make_addr(opts.host, opts.port);
        ucp_listener_params_t lp{};
        lp.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
        lp.sockaddr.addr = reinterpret_cast<const sockaddr*>(&a);
        lp.sockaddr.addrlen = sizeof a;
        lp.conn_handler.cb = &UcxNode::on_conn_request;
        lp.conn_handler.arg = this;
        check_ucs(ucp_listener_create(worker_, &lp, &listener_),
                  ("listen on " + opts.host + ":" + std::to_string(opts.port)).c_str());
        ucp_listener_attr_t la{};
        la.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
        check_ucs(ucp_listener_query(listener_, &la), "listener query");
        port_ = ntohs(reinterpret_cast<const sockaddr_in*>(&la.sockaddr)->sin_port);
    }
}

void UcxNode::stop() {
    stop_ = true;
    if (wake_fd_ >= 0) {
        const uint64_t one = 1;
        (void)!write(wake_fd_, &one, sizeof one);
    }
    if (thread_.joinable()) thread_.join();
}

UcxNode::~UcxNode() {
    stop();
    for (auto& [id, keys] : rkeys_)
        for (ucp_rkey_h r : keys) ucp_rkey_destroy(r);
    rkeys_.clear();
    for (auto& [id, ep] : eps_) force_close(worker_, ep);
    eps_.clear();
    if (listener_) ucp_listener_destroy(listener_);
    if (worker_) ucp_worker_destroy(worker_);
    if (ctx_) ucp_cleanup(ctx_);
    if (wake_fd_ >= 0) ::close(wake_fd_);
}

void UcxNode::on_message(uint16_t am_id, MessageFn fn) {
    handlers_[am_id] = std::move(fn);
    slots_.push_back(std::make_unique<AmSlot>(AmSlot{this, am_id}));
    ucp_am_handler_param_t hp{};
    hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                    UCP_AM_HANDLER_PARAM_FIELD_ARG;
    hp.id = am_id;
    hp.cb = &UcxNode::on_am;
    hp.arg = slots_.back().get();
    check_ucs(ucp_worker_set_am_recv_handler(worker_, &hp), "set AM handler");
}

void UcxNode::on_disconnect(std::function<void(ConnId)> fn) {
    on_disconnect_ = std::move(fn);
}

void UcxNode::on_tick(std::function<void()> fn) {
    on_tick_ = std::move(fn);
}

void UcxNode::start() {
    thread_ = std::thread([this, nice = lower_priority_by_] {
        if (nice > 0) (void)util::lower_this_thread_priority(nice);
        loop();
    });
}

void UcxNode::post(std::function<void()> fn) {
    {
        std::lock_guard<std::mutex> lk(mu_);
        inbox_.push_back(std::move(fn));
    }
    const uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof one);
}

void UcxNode::loop() {
    int ucx_fd = -1;
    check_ucs(ucp_worker_get_efd(worker_, &ucx_fd), "worker event fd");
    while (!stop_) {
        std::vector<std::function<void()>> work;
        {
            std::lock_guard<std::mutex> lk(mu_);
            work.swap(inbox_);
        }
        for (auto& fn : work) fn();
        while (ucp_worker_progress(worker_) != 0) {
        }
        while (!deferred_.empty()) {
            auto d = std::move(deferred_);
            deferred_.clear();
            for (auto& fn : d) fn();
            while (ucp_worker_progress(worker_) != 0) {
            }
        }
        if (on_tick_) on_tick_();
        {
            std::lock_guard<std::mutex> lk(mu_);
            if (!inbox_.empty()) continue;
        }
        if (!deferred_.empty()) continue;
        const ucs_status_t s = ucp_worker_arm(worker_);
        if (s == UCS_ERR_BUSY) continue;
        pollfd fds[2] = {{ucx_fd, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
        (void)poll(fds, 2, 10);
        if (fds[1].revents & POLLIN) {
            uint64_t v;
            (void)!read(wake_fd_, &v, sizeof v);
        }
    }
}

ConnId UcxNode::adopt(ucp_ep_h ep) {
    const ConnId id = next_conn_++;
    eps_[id] = ep;
    ids_[ep] = id;
    return id;
}

void UcxNode::on_conn_request(ucp_conn_request_h req, void* arg) {
    auto* self = static_cast<UcxNode*>(arg);
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                    UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.conn_request = req;
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ep.err_handler.cb = &UcxNode::on_ep_error;
    ep.err_handler.arg = self;
    ucp_ep_h h = nullptr;
    if (ucp_ep_create(self->worker_, &ep, &h) == UCS_OK) self->adopt(h);
}

void UcxNode::on_ep_error(void* arg, ucp_ep_h ep, ucs_status_t status) {
    auto* self = static_cast<UcxNode*>(arg);
    auto it = self->ids_.find(ep);
    if (it == self->ids_.end()) return;
    const ConnId id = it->second;
    spdlog::debug("UCX connection {} failed: {}", id, ucs_status_string(status));
    self->deferred_.push_back([self, id] {
        if (!self->connected(id)) return;
        self->close(id);
        if (self->on_disconnect_) self->on_disconnect_(id);
    });
}

ucs_status_t UcxNode::on_am(void* arg, const void* /*header*/, size_t /*header_length*/, void* data,
                            size_t length, const ucp_am_recv_param_t* param) {
    auto* slot = static_cast<AmSlot*>(arg);
    UcxNode* self = slot->node;
    ConnId from = 0;
    if (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) {
        auto it = self->ids_.find(param->reply_ep);
        from = it != self->ids_.end() ? it->second : self->adopt(param->reply_ep);
    }
    const uint16_t id = slot->id;
    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
        // The payload is still at the sender: fetch it, deliver on completion.
        struct Fetch {
            UcxNode* self;
            uint16_t id;
            ConnId from;
            std::vector<uint8_t> buf;
        };
        auto* f = new Fetch{self, id, from, std::vector<uint8_t>(length)};
        ucp_request_param_t rp{};
        rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
        rp.cb.recv_am = [](void* req, ucs_status_t st, size_t, void* ud) {
            auto* fe = static_cast<Fetch*>(ud);
            if (st == UCS_OK)
                fe->self->deferred_.push_back([fe] {
                    auto it = fe->self->handlers_.find(fe->id);
                    if (it != fe->self->handlers_.end()) it->second(fe->from, std::move(fe->buf));
                    delete fe;
                });
            else
                delete fe;
            ucp_request_free(req);
        };
        rp.user_data = f;
        ucs_status_ptr_t sp = ucp_am_recv_data_nbx(self->worker_, data, f->buf.data(), length, &rp);
        if (UCS_PTR_IS_ERR(sp)) {
            delete f;
        } else if (sp == nullptr) {
            self->deferred_.push_back([f] {
                auto it = f->self->handlers_.find(f->id);
                if (it != f->self->handlers_.end()) it->second(f->from, std::move(f->buf));
                delete f;
            });
        }
        return UCS_OK;
    }
    std::vector<uint8_t> buf(static_cast<const uint8_t*>(data),
                             static_cast<const uint8_t*>(data) + length);
    self->deferred_.push_back([self, id, from, b = std::move(buf)]() mutable {
        auto it = self->handlers_.find(id);
        if (it != self->handlers_.end()) it->second(from, std::move(b));
    });
    return UCS_OK;
}

ConnId UcxNode::connect(const std::string& host, uint16_t port) {
    sockaddr_in a{};
    try {
        a = make_addr(host, port);
    } catch (const util::Error&) {
        return 0;
    }
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
                    UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
    ep.sockaddr.addr = reinterpret_cast<const sockaddr*>(&a);
    ep.sockaddr.addrlen = sizeof a;
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ep.err_handler.cb = &UcxNode::on_ep_error;
    ep.err_handler.arg = this;
    ucp_ep_h h = nullptr;
    if (ucp_ep_create(worker_, &ep, &h) != UCS_OK) return 0;
    return adopt(h);
}

bool UcxNode::complete(ucs_status_ptr_t sp, std::function<void(bool)> done) {
    if (UCS_PTR_IS_ERR(sp)) {
        if (done) deferred_.push_back([d = std::move(done)] { d(false); });
        return false;
    }
    if (sp == nullptr && done) deferred_.push_back([d = std::move(done)] { d(true); });
    return true;
}

bool UcxNode::start_op(
    ConnId c, bool can_start, std::function<void(bool)> done,
    const std::function<ucs_status_ptr_t(ucp_ep_h, ucp_request_param_t&)>& issue) {
    auto it = eps_.find(c);
    if (it == eps_.end() || !can_start) {
        if (done) deferred_.push_back([d = std::move(done)] { d(false); });
        return false;
    }
    auto* d = new OpDone{&deferred_, std::move(done)};
    ucp_request_param_t rp{};
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    rp.cb.send = &op_cb;
    rp.user_data = d;
    ucs_status_ptr_t sp = issue(it->second, rp);
    if (UCS_PTR_IS_PTR(sp)) return true;  // op_cb runs `done` and frees d
    auto fn = std::move(d->fn);
    delete d;
    return complete(sp, std::move(fn));
}

bool UcxNode::send(ConnId c, uint16_t am_id, std::vector<uint8_t> payload,
                   std::function<void(bool)> done) {
    // The payload lives until the send completes: the completion owns it.
    auto buf = std::make_shared<std::vector<uint8_t>>(std::move(payload));
    auto owner = [buf, done = std::move(done)](bool ok) {
        if (done) done(ok);
    };
    return start_op(c, true, std::move(owner), [&](ucp_ep_h ep, ucp_request_param_t& rp) {
        rp.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
        rp.flags = UCP_AM_SEND_FLAG_REPLY;
        return ucp_am_send_nbx(ep, am_id, nullptr, 0, buf->data(), buf->size(), &rp);
    });
}

ucp_rkey_h UcxNode::unpack_rkey(ConnId c, const std::vector<uint8_t>& packed) {
    auto it = eps_.find(c);
    if (it == eps_.end() || packed.empty()) return nullptr;
    ucp_rkey_h k = nullptr;
    if (ucp_ep_rkey_unpack(it->second, packed.data(), &k) != UCS_OK) return nullptr;
    rkeys_[c].push_back(k);
    return k;
}

void UcxNode::release_rkey(ConnId c, ucp_rkey_h k) {
    auto it = rkeys_.find(c);
    if (it == rkeys_.end()) return;
    auto& v = it->second;
    auto pos = std::find(v.begin(), v.end(), k);
    if (pos == v.end()) return;
    ucp_rkey_destroy(k);
    v.erase(pos);
}

bool UcxNode::get(ConnId c, void* dst, size_t n, uint64_t remote_addr, ucp_rkey_h rkey,
                  std::function<void(bool)> done) {
    return start_op(c, rkey != nullptr, std::move(done), [&](ucp_ep_h ep, ucp_request_param_t& rp) {
        return ucp_get_nbx(ep, dst, n, remote_addr, rkey, &rp);
    });
}

bool UcxNode::flush(ConnId c, std::function<void(bool)> done) {
    return start_op(c, true, std::move(done),
                    [](ucp_ep_h ep, ucp_request_param_t& rp) { return ucp_ep_flush_nbx(ep, &rp); });
}

void UcxNode::close(ConnId c) {
    auto it = eps_.find(c);
    if (it == eps_.end()) return;
    ucp_ep_h ep = it->second;
    eps_.erase(it);
    ids_.erase(ep);
    if (auto k = rkeys_.find(c); k != rkeys_.end()) {
        for (ucp_rkey_h r : k->second) ucp_rkey_destroy(r);
        rkeys_.erase(k);
    }
    force_close(worker_, ep);
}

UcxRegion UcxNode::register_region(const ucp_mem_map_params_t& mp) {
    UcxRegion r;
    check_ucs(ucp_mem_map(ctx_, &mp, &r.memh), "register memory");
    ucp_mem_attr_t ma{};
    ma.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
    void* packed = nullptr;
    size_t n = 0;
    ucs_status_t s = ucp_mem_query(r.memh, &ma);
    if (s == UCS_OK) s = ucp_rkey_pack(ctx_, r.memh, &packed, &n);
    if (s != UCS_OK) {
        ucp_mem_unmap(ctx_, r.memh);
        check_ucs(s, "pack remote key");
    }
    r.rkey.assign(static_cast<uint8_t*>(packed), static_cast<uint8_t*>(packed) + n);
    ucp_rkey_buffer_release(packed);
    r.base = reinterpret_cast<uint64_t>(ma.address);
    r.length = std::min(ma.length, mp.length);
    return r;
}

UcxRegion UcxNode::map(void* base, size_t length) {
    ucp_mem_map_params_t mp{};
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    mp.address = base;
    mp.length = length;
    UcxRegion r = register_region(mp);
    r.base = reinterpret_cast<uint64_t>(base);
    r.length = length;
    return r;
}

UcxRegion UcxNode::allocate(size_t length) {
    ucp_mem_map_params_t mp{};
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                    UCP_MEM_MAP_PARAM_FIELD_FLAGS;
    mp.address = nullptr;
    mp.length = length;
    mp.flags = UCP_MEM_MAP_ALLOCATE;
    return register_region(mp);
}

std::vector<uint8_t> UcxNode::worker_address() {
    ucp_address_t* a = nullptr;
    size_t n = 0;
    check_ucs(ucp_worker_get_address(worker_, &a, &n), "worker address");
    std::vector<uint8_t> out(reinterpret_cast<uint8_t*>(a), reinterpret_cast<uint8_t*>(a) + n);
    ucp_worker_release_address(worker_, a);
    return out;
}

namespace {

// The transports of an endpoint's lanes, from UCX's own description of it
// ("lane[0]:  3:sysv/memory.0 md[2] -> ..."; a connection-manager lane reads "lane[0]: cm ...").
std::vector<std::string> lane_transports(ucp_ep_h ep) {
    char* text = nullptr;
    size_t len = 0;
    FILE* f = open_memstream(&text, &len);
    if (f == nullptr) return {};
    ucp_ep_print_info(ep, f);
    std::fclose(f);
    const std::string info(text, len);
    std::free(text);
    std::vector<std::string> out;
    static const std::regex lane(R"(lane\[\d+\]:\s+(?:\d+:([A-Za-z0-9_]+)/|(cm)\b))");
    for (auto it = std::sregex_iterator(info.begin(), info.end(), lane);
         it != std::sregex_iterator(); ++it)
        out.push_back((*it)[1].matched ? (*it)[1].str() : "cm");
    return out;
}

bool shared_memory_transport(const std::string& t) {
    return t == "sysv" || t == "posix" || t == "cma" || t == "xpmem" || t == "knem" || t == "self";
}

}  // namespace

ConnId UcxNode::connect_local(const std::vector<uint8_t>& worker_address, std::string* lanes) {
    if (lanes) lanes->clear();
    if (worker_address.empty()) return 0;
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    ep.address = reinterpret_cast<const ucp_address_t*>(worker_address.data());
    ep.err_mode = UCP_ERR_HANDLING_MODE_NONE;
    ucp_ep_h h = nullptr;
    if (ucp_ep_create(worker_, &ep, &h) != UCS_OK) return 0;
    const std::vector<std::string> ts = lane_transports(h);
    bool local = !ts.empty();
    for (const std::string& t : ts) {
        local &= shared_memory_transport(t);
        if (lanes) *lanes += (lanes->empty() ? "" : ",") + t;
    }
    if (!local) {
        force_close(worker_, h);
        return 0;
    }
    return adopt(h);
}

bool UcxNode::maps_locally(ucp_rkey_h rkey, uint64_t addr) {
    void* p = nullptr;
    return rkey != nullptr && ucp_rkey_ptr(rkey, addr, &p) == UCS_OK;
}

void UcxNode::unmap(UcxRegion& r) {
    if (r.memh) ucp_mem_unmap(ctx_, r.memh);
    r.memh = nullptr;
}

}  // namespace warden::transfer
