#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <future>
#include <thread>

#include "util/serial_worker.h"
#include "util/thread_priority.h"

namespace {

int this_thread_nice() {
    return getpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)));
}

}  // namespace

TEST(ThreadPriority, LowersOnlyTheCallingThread) {
    const int base = this_thread_nice();
    if (base > 14) GTEST_SKIP() << "the test process already runs at nice " << base;
    int inside = -100;
    std::thread t([&] {
        ASSERT_TRUE(warden::util::lower_this_thread_priority(5));
        inside = this_thread_nice();
    });
    t.join();
    EXPECT_EQ(inside, base + 5);
    EXPECT_EQ(this_thread_nice(), base);  // the caller's thread is untouched
}

TEST(ThreadPriority, SerialWorkerRunsItsJobsAtTheLoweredPriority) {
    const int base = this_thread_nice();
    if (base > 14) GTEST_SKIP() << "the test process already runs at nice " << base;
    std::promise<int> lowered, plain;
    {
        warden::util::SerialWorker low(3);
        warden::util::SerialWorker normal;
        low.post([&] { lowered.set_value(this_thread_nice()); });
        normal.post([&] { plain.set_value(this_thread_nice()); });
    }
    EXPECT_EQ(lowered.get_future().get(), base + 3);
    EXPECT_EQ(plain.get_future().get(), base);
}

TEST(ThreadPriority, ThreadCpuTimeCountsWorkNotSleep) {
    const double c0 = warden::util::this_thread_cpu_ms();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const double slept = warden::util::this_thread_cpu_ms() - c0;
    volatile uint64_t x = 0;
    const double c1 = warden::util::this_thread_cpu_ms();
    while (warden::util::this_thread_cpu_ms() - c1 < 20) x = x + 1;
    EXPECT_LT(slept, 10.0);  // sleeping uses (almost) no CPU
    EXPECT_GE(warden::util::this_thread_cpu_ms() - c1, 20.0);
}
