#pragma once
// Scheduling weight and CPU time of the calling thread. The weight is for background work that
// shares a core with a latency-bound thread (e.g. a KV transfer's page copies and checksums beside
// the decode step loop): a thread `nice` steps below the process gets a correspondingly smaller CPU
// share while both are runnable, and the whole core while the latency-bound thread is idle.
namespace warden::util {

// Nice steps for a KV hand-off's background threads (page copies, checksums) in a decode
// server: weight 110 against the step loop's 1024, so while both want the core the hand-off
// takes about a tenth of it, and a prompt's few ms of copies and checksums stretch to tens of
// ms instead of doubling a decode step.
inline constexpr int kHandoffNice = 10;

// Raises the calling thread's nice value by `steps` (1-19) above the process's; true on success.
// Lowering priority needs no privilege; on failure the thread keeps its priority (the caller's
// work still runs, only at the usual share).
bool lower_this_thread_priority(int steps);

// CPU time the calling thread has used, in ms (CLOCK_THREAD_CPUTIME_ID).
double this_thread_cpu_ms();

}  // namespace warden::util
