#include "engine/engine.h"

#include "util/error.h"
#include "util/log.h"
#include "util/thread_priority.h"

namespace warden::engine {

bool Stream::next(Event& out, std::chrono::milliseconds timeout) {
    std::unique_lock lk(mu_);
    if (!cv_.wait_for(lk, timeout, [&] { return !events_.empty(); })) return false;
    out = std::move(events_.front());
    events_.pop_front();
    return true;
}

void Stream::push(Event&& e) {
    {
        std::lock_guard lk(mu_);
        if (e.kind == Event::Kind::Finish) finished_ = true;
        events_.push_back(std::move(e));
    }
    cv_.notify_all();
    std::lock_guard nl(notify_mu_);
    if (notify_) notify_();
}

void Stream::set_notify(std::function<void()> fn) {
    std::lock_guard nl(notify_mu_);
    notify_ = std::move(fn);
    bool pending = false;
    {
        std::lock_guard lk(mu_);
        pending = !events_.empty();
    }
    if (notify_ && pending) notify_();
}

void Stream::cancel() {
    {
        std::lock_guard lk(mu_);
        if (cancel_sent_ || finished_) return;
        cancel_sent_ = true;
    }
    engine_->request_cancel(id_, FinishReason::Cancelled);
}

void Stream::stop() {
    {
        std::lock_guard lk(mu_);
        if (cancel_sent_ || finished_) return;
        cancel_sent_ = true;
    }
    engine_->request_cancel(id_, FinishReason::Stop);
}

Engine::Engine(Executor& exec, kv::KvCache& kv, EngineConfig cfg, kv::FaultInjector* faults)
    : exec_(exec), kv_(kv), cfg_(cfg), scheduler_(exec, kv, cfg.scheduler, faults) {
    scheduler_.set_prefix_cache(cfg_.prefix_cache);
    scheduler_.set_speculative(cfg_.proposer, cfg_.spec);
    scheduler_.on_prompt_tokens(
        [this](Scheduler::Handle, int64_t n) { metrics_.vllm().prompt_tokens(n); });
    scheduler_.on_token([this](Scheduler::Handle h, const TokenInfo& info) {
        auto it = by_handle_.find(h);
        if (it == by_handle_.end()) return;
        Active& a = active_.at(it->second);
        const auto now = std::chrono::steady_clock::now();
        using secs = std::chrono::duration<double>;
        if (a.n_out++ == 0)
            metrics_.vllm().first_token(secs(now - a.added).count());
        else
            metrics_.vllm().next_token(secs(now - a.last_token).count());
        a.last_token = now;
        Event e;
        e.kind = Event::Kind::Token;
        e.token = info;
        a.stream->push(std::move(e));
    });
    scheduler_.on_finish([this](Scheduler::Handle h, Result&& r) {
        Active* a = nullptr;
        uint64_t id = 0;
        auto it = by_handle_.find(h);
        if (it != by_handle_.end()) {
            id = it->second;
            a = &active_.at(id);
        } else {
            a = adding_;  // rejected inside add()
        }
        if (!a) return;
        metrics_.observe(a->tenant, r);
        metrics_.vllm().finished(r);
        Event e;
        e.kind = Event::Kind::Finish;
        e.result = std::move(r);
        a->stream->push(std::move(e));
        if (it != by_handle_.end()) {
            by_handle_.erase(it);
            active_.erase(id);
        } else {
            a->stream.reset();  // marks the rejection for loop()
        }
        // The pages of this request are already released: publish before wait_idle() can
        // return, so an idle engine never shows stale page gauges.
        publish_gauges();
        std::lock_guard lk(mu_);
        --n_active_;
        if (n_active_ == 0) idle_cv_.notify_all();
    });
    publish_gauges();
    if (cfg_.remote_prefill) verifier_ = std::make_unique<util::SerialWorker>(util::kHandoffNice);
    thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() {
    {
        std::lock_guard lk(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
}

Submitted Engine::submit(Request req) {
    Submitted s;
    {
        std::lock_guard lk(mu_);
        if (draining_ || stop_) {
            s.status = SubmitStatus::Draining;
            return s;
        }
        if (inbox_.size() + n_waiting_ >= cfg_.max_queue) {
            s.status = SubmitStatus::QueueFull;
            return s;
        }
        s.stream = std::make_shared<Stream>();
        s.stream->engine_ = this;
        s.stream->id_ = next_id_++;
        ++n_active_;
        inbox_.push_back(Pending{s.stream->id_, std::move(req), s.stream});
    }
    cv_.notify_all();
    return s;
}

void Engine::post(std::function<void()> fn) {
    {
        std::lock_guard lk(mu_);
        tasks_.push_back(std::move(fn));
    }
    cv_.notify_all();
}

void Engine::admit_to_scheduler(Pending&& p, std::chrono::steady_clock::time_point deadline) {
    Active a;
    a.stream = p.stream;
    a.tenant = p.req.tenant;
    a.deadline = deadline;
    a.added = std::chrono::steady_clock::now();
    adding_ = &a;
    const Scheduler::Handle h = scheduler_.add(std::move(p.req));
    adding_ = nullptr;
    if (!a.stream) return;  // rejected: its Finish event was delivered
    a.handle = h;
    by_handle_[h] = p.id;
    active_.emplace(p.id, std::move(a));
}

void Engine::request_cancel(uint64_t id, FinishReason why) {
    {
        std::lock_guard lk(mu_);
        cancels_.emplace_back(id, why);
    }
    cv_.notify_all();
}

void Engine::begin_drain() {
    std::lock_guard lk(mu_);
    draining_ = true;
}

bool Engine::wait_idle(std::chrono::milliseconds timeout) {
    std::unique_lock lk(mu_);
    return idle_cv_.wait_for(lk, timeout, [&] { return n_active_ == 0; });
}

void Engine::publish_gauges() {
    Gauges g;
    g.running = static_cast<int64_t>(scheduler_.n_running());
    g.waiting = static_cast<int64_t>(scheduler_.n_waiting());
    g.kv_pages_used = kv_.pool().used_pages();
    g.kv_pages_free = kv_.pool().free_pages();
    g.kv_pages_total = kv_.pool().capacity();
    g.kv_bytes_per_page = kv_.bytes_per_page();
    g.preemptions = scheduler_.stats().preemptions;
    g.integrity_violations = exec_.stats().integrity_violations;
    g.steps = scheduler_.stats().steps;
    if (const kv::PrefixCache* pc = scheduler_.prefix_cache()) {
        g.prefix_cache = true;
        g.kv_pages_cached = kv_.pool().cached_pages();
        g.pc_pinned_pages = pc->pinned_pages();
        g.pc = pc->stats();
    }
    metrics_.set_gauges(g);
}

void Engine::step_traced() {
    if (!spdlog::should_log(spdlog::level::trace)) {
        scheduler_.step();
        return;
    }
    // Wall time beside this thread's CPU time: a step whose wall time exceeds its CPU time
    // waited for the core (another thread or process ran), one whose CPU time grew did more
    // work (e.g. attention over a long sequence in the batch).
    const size_t n = scheduler_.n_running();
    const auto w0 = std::chrono::steady_clock::now();
    const double c0 = util::this_thread_cpu_ms();
    scheduler_.step();
    const double cpu_ms = util::this_thread_cpu_ms() - c0;
    const double wall_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - w0).count();
    // Start on the steady clock (CLOCK_MONOTONIC on Linux), to line up with a client's times.
    spdlog::trace(
        "step at {:.6f} s: {} sequences, {:.3f} ms wall, {:.3f} ms thread CPU; after it {} "
        "sequences holding {} tokens of KV",
        std::chrono::duration<double>(w0.time_since_epoch()).count(), n, wall_ms, cpu_ms,
        scheduler_.n_running(), scheduler_.running_context_tokens());
}

void Engine::loop() {
    for (;;) {
        std::deque<Pending> inbox;
        std::vector<std::pair<uint64_t, FinishReason>> cancels;
        std::vector<std::function<void()>> tasks;
        std::vector<FetchOutcome> fetched;
        bool stopping = false;
        {
            std::unique_lock lk(mu_);
            auto woken = [&] {
                return !inbox_.empty() || !cancels_.empty() || !tasks_.empty() ||
                       !fetched_.empty() || stop_;
            };
            if (scheduler_.idle() && !woken()) {
                // Idle: the pool must be whole (free + used == total, nothing leaked).
                std::string bad = kv_.pool().check_integrity();
                if (bad.empty() && scheduler_.prefix_cache())
                    bad = scheduler_.prefix_cache()->check_integrity();
                if (!bad.empty()) spdlog::error("kv pool inconsistent while idle: {}", bad);
                if (fetching_.empty())
                    cv_.wait(lk, woken);
                else  // prompts in flight elsewhere: wake for their deadlines too
                    cv_.wait_for(lk, std::chrono::milliseconds(100), woken);
            }
            inbox.swap(inbox_);
            cancels.swap(cancels_);
            tasks.swap(tasks_);
            fetched.swap(fetched_);
            stopping = stop_;
        }
        for (auto& fn : tasks) fn();
        for (FetchOutcome& o : fetched) on_fetched(std::move(o));
        for (Pending& p : inbox) {
            const auto now = std::chrono::steady_clock::now();
            if (cfg_.remote_prefill && !p.req.prefilled && !p.req.prompt.empty() &&
                p.req.prompt_logprobs < 0) {
                Fetching f{std::move(p), std::nullopt, now, now + cfg_.request_timeout, 0, {}};
                start_fetch(std::move(f));
                continue;
            }
            admit_to_scheduler(std::move(p), now + cfg_.request_timeout);
        }
        for (const auto& [id, why] : cancels) {
            if (cancel_fetch(id, why)) continue;
            auto it = active_.find(id);
            if (it != active_.end()) scheduler_.cancel(it->second.handle, why);
        }
        if (stopping) {
            // Prompts being fetched: cancelled, and their pages freed once the transport is done
            // with them (bounded: the transport's own timeouts end every fetch).
            for (auto& [id, f] : fetching_) cancel_fetch(id, FinishReason::Cancelled);
            const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
            while (!fetching_.empty() && std::chrono::steady_clock::now() < give_up) {
                std::vector<FetchOutcome> late;
                {
                    std::unique_lock lk(mu_);
                    cv_.wait_for(lk, std::chrono::milliseconds(100),
                                 [&] { return !fetched_.empty(); });
                    late.swap(fetched_);
                }
                for (FetchOutcome& o : late) on_fetched(std::move(o));
            }
            if (!fetching_.empty())
                spdlog::error("{} prompt fetches never ended; their pages stay reserved",
                              fetching_.size());
            std::vector<Scheduler::Handle> all;
            for (const auto& [id, a] : active_) all.push_back(a.handle);
            for (auto h : all) scheduler_.cancel(h, FinishReason::Cancelled);
            publish_gauges();
            return;
        }
        const auto now = std::chrono::steady_clock::now();
        std::vector<Scheduler::Handle> expired;
        for (const auto& [id, a] : active_)
            if (a.deadline <= now) expired.push_back(a.handle);
        for (auto h : expired) scheduler_.cancel(h, FinishReason::Timeout);
        expire_fetches(now);
        busy_.set(!scheduler_.idle() || !fetching_.empty());
        if (!scheduler_.idle()) {
            try {
                step_traced();
            } catch (const std::exception& e) {
                // Never leave a request without a reply: end everything in flight.
                spdlog::error("scheduler step failed: {}; ending {} requests", e.what(),
                              active_.size());
                std::vector<Scheduler::Handle> all;
                for (const auto& [id, a] : active_) all.push_back(a.handle);
                for (auto h : all) scheduler_.cancel(h, FinishReason::Rejected);
            }
        }
        busy_.set(!scheduler_.idle() || !fetching_.empty());
        {
            std::lock_guard lk(mu_);
            n_waiting_ = scheduler_.n_waiting() + fetching_.size();
        }
        publish_gauges();
    }
}

}  // namespace warden::engine
