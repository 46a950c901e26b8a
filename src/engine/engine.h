#pragma once
// The serving engine: one scheduler thread owns the Scheduler (and through it the KV cache and
// every page free). Other threads talk to it only by messages: submit() queues a request and
// returns its event Stream; Stream::cancel() (client gone) and request deadlines become cancel
// messages handled between steps. Bounded FCFS queue: submit refuses when it is full.
//
//   Engine eng(exec, cache, cfg, faults);           // starts the scheduler thread
//   auto [st, stream, err] = eng.submit(std::move(req));
//   Event ev; while (stream->next(ev, 1s)) { Token... ; Finish -> break; }
//   eng.begin_drain(); eng.wait_idle(...);          // SIGTERM path
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/metrics.h"
#include "engine/prefill_source.h"
#include "engine/scheduler.h"
#include "util/huge_page_arena.h"
#include "util/serial_worker.h"

namespace warden::engine {

struct EngineConfig {
    SchedulerOptions scheduler;
    size_t max_queue = 256;  // requests waiting for admission (plus not yet seen by the scheduler)
    std::chrono::milliseconds request_timeout{std::chrono::minutes(10)};  // arrival -> finish
    // The prefix cache over the same KvCache's pool, or nullptr. Used by the scheduler thread
    // only from construction on; it must outlive the Engine.
    kv::PrefixCache* prefix_cache = nullptr;
    // Speculative decoding (Scheduler::set_speculative): nullptr or spec.max_k == 0 is off.
    speculative::Proposer* proposer = nullptr;
    speculative::SpecConfig spec;
    // Disaggregated decode: every request's prompt is computed by this source (a prefill
    // server) into reserved pages, verified, then decoded here (engine_remote.cpp). nullptr:
    // prompts are computed here. It must outlive the Engine.
    PrefillSource* remote_prefill = nullptr;
    int remote_attempts = 2;  // tries per request (on another prefill server when one fails)
};

struct Event {
    enum class Kind { Token, Finish };
    Kind kind = Kind::Token;
    TokenInfo token;  // Kind::Token
    Result result;    // Kind::Finish (output = every generated token, finish reason, timing)
};

class Engine;

// The events of one request: tokens in order, then exactly one Finish. Thread-safe.
class Stream {
  public:
    // Waits up to `timeout` for the next event. False on timeout (nothing consumed).
    bool next(Event& out, std::chrono::milliseconds timeout);
    // Ends the request (idempotent; a no-op once it finished). Its Finish event still arrives.
    void cancel();
    // The same, for a stop condition the caller found (a stop string): it finishes as Stop,
    // not Cancelled, in the result and the metrics.
    void stop();
    // Calls `fn` (from the engine's thread, outside the event lock) after each event is queued,
    // so an event loop can drain the stream with next(ev, 0ms) instead of blocking on it. If
    // events are already queued, `fn` is called once at once. An empty `fn` removes the hook;
    // once set_notify returns, the previous hook is not running and will not run again.
    void set_notify(std::function<void()> fn);
    uint64_t id() const { return id_; }

  private:
    friend class Engine;
    void push(Event&& e);
    Engine* engine_ = nullptr;
    uint64_t id_ = 0;
    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<Event> events_;
    std::mutex notify_mu_;  // held while the hook runs, so removing it waits for a running call
    std::function<void()> notify_;
    bool cancel_sent_ = false;
    bool finished_ = false;
};

enum class SubmitStatus { Ok, QueueFull, Draining };

struct Submitted {
    SubmitStatus status = SubmitStatus::Ok;
    std::shared_ptr<Stream> stream;  // when Ok
};

class Engine {
  public:
    Engine(Executor& exec, kv::KvCache& kv, EngineConfig cfg, kv::FaultInjector* faults = nullptr);
    ~Engine();  // cancels whatever is left and joins the scheduler thread
    Engine(const Engine&) = delete;
    Engine& operator=(const Engine&) = delete;

    // Thread-safe. The request must be validated (Scheduler::add rejects what can never run).
    Submitted submit(Request req);
    // Stop accepting (submit -> Draining); in-flight and queued requests still finish.
    void begin_drain();
    // Blocks until nothing is queued or running, or the timeout passes. True when idle.
    bool wait_idle(std::chrono::milliseconds timeout);

    // Thread-safe: runs fn on the scheduler thread between steps (work on the KV pool).
    void post(std::function<void()> fn);

    Metrics& metrics() { return metrics_; }
    // Whether a request may name this prefill server (Request::prefill_hint): a disaggregated
    // decode engine's own prefill servers only.
    bool knows_prefill_server(const std::string& endpoint) const {
        return cfg_.remote_prefill && cfg_.remote_prefill->knows(endpoint);
    }
    const kv::KvCache& kv() const { return kv_; }
    int64_t capacity_tokens() const { return kv_.capacity_tokens(); }

  private:
    friend class Stream;
    struct Active {
        std::shared_ptr<Stream> stream;
        std::string tenant;
        std::chrono::steady_clock::time_point deadline;
        Scheduler::Handle handle = 0;
        // For the live token metrics (VllmMetrics).
        std::chrono::steady_clock::time_point added, last_token;
        int64_t n_out = 0;
    };
    struct Pending {
        uint64_t id;
        Request req;
        std::shared_ptr<Stream> stream;
    };
    // A request whose prompt is being fetched from a prefill server (engine_remote.cpp).
    struct Fetching {
        Pending p;
        std::optional<kv::KvHandoff> handoff;
        std::chrono::steady_clock::time_point arrival, deadline;
        int attempt = 0;
        std::optional<FinishReason> cancelled;
    };
    // A finished fetch, its payload already checksummed off the scheduler thread.
    struct FetchOutcome {
        uint64_t id = 0;
        RemotePrefill r;
        kv::PayloadCheck payload;
    };
    void request_cancel(uint64_t id, FinishReason why);
    void loop();
    void step_traced();  // scheduler_.step(), timed at --log-level trace
    void admit_to_scheduler(Pending&& p, std::chrono::steady_clock::time_point deadline);
    // engine_remote.cpp, scheduler thread
    void start_fetch(Fetching&& f);
    void on_fetched(FetchOutcome&& o);
    void end_unscheduled(Pending& p, Result&& r);
    bool cancel_fetch(uint64_t id, FinishReason why);
    void expire_fetches(std::chrono::steady_clock::time_point now);
    void publish_gauges();

    Executor& exec_;
    kv::KvCache& kv_;
    EngineConfig cfg_;
    Scheduler scheduler_;
    Metrics metrics_;

    std::mutex mu_;                    // guards the inbox, draining_, n_active_
    std::condition_variable cv_;       // scheduler wake-up
    std::condition_variable idle_cv_;  // wait_idle
    std::deque<Pending> inbox_;
    std::vector<std::pair<uint64_t, FinishReason>> cancels_;
    std::vector<std::function<void()>> tasks_;  // post()
    std::vector<FetchOutcome> fetched_;         // fetch outcomes to apply
    bool stop_ = false;
    bool draining_ = false;
    size_t n_waiting_ = 0;  // scheduler's queue as of the last iteration
    size_t n_active_ = 0;   // submitted and not finished

    // Scheduler thread only.
    std::unordered_map<uint64_t, Active> active_;                // by engine id
    std::unordered_map<Scheduler::Handle, uint64_t> by_handle_;  // scheduler handle -> engine id
    Active* adding_ = nullptr;
    std::unordered_map<uint64_t, Fetching> fetching_;  // by engine id
    uint64_t next_id_ = 1;                             // guarded by mu_
    // Checksums fetched pages (kv::check_payload) so a long prompt's arrival does not stall the
    // decode steps; it then queues the outcome in fetched_. Disaggregated decode only. Declared
    // after what its jobs touch, so it is joined (its queue run) before they go.
    std::unique_ptr<util::SerialWorker> verifier_;
    // Active while the engine has requests: background KV pool population waits meanwhile.
    util::ForegroundWork busy_;
    std::thread thread_;
};

}  // namespace warden::engine
