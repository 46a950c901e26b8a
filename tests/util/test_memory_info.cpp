// Parsing what the kernel says about available memory (/proc/meminfo, /proc/self/cgroup,
// memory.stat), on the formats the kernel documents (Documentation/filesystems/proc.rst,
// admin-guide/cgroup-v1/cgroups.rst and cgroup-v2.rst).
#include <gtest/gtest.h>

#include "util/memory_info.h"

using namespace warden::util;

TEST(MemoryInfo, MemAvailableInBytes) {
    const char* meminfo =
        "MemTotal:       24683784 kB\nMemFree:        15698548 kB\nMemAvailable:   21202296 kB\n"
        "Buffers:          123 kB\n";
    EXPECT_EQ(parse_mem_available(meminfo), uint64_t{21202296} * 1024);
    EXPECT_FALSE(parse_mem_available("MemTotal: 1 kB\nMemFree: 1 kB\n"));  // kernels before 3.14
    EXPECT_FALSE(parse_mem_available("MemAvailable: lots\n"));
    EXPECT_FALSE(parse_mem_available(""));
}

TEST(MemoryInfo, CgroupPathV1V2AndHybrid) {
    const auto v2 = parse_memory_cgroup("0::/user.slice/session-2.scope\n");
    ASSERT_TRUE(v2);
    EXPECT_TRUE(v2->v2);
    EXPECT_EQ(v2->path, "/user.slice/session-2.scope");
    // v1 with the memory controller alone and joined with others; it wins over the hybrid 0:: line.
    const auto v1 = parse_memory_cgroup("9:name=systemd:/\n4:memory:/process_api/abc\n0::/\n");
    ASSERT_TRUE(v1);
    EXPECT_FALSE(v1->v2);
    EXPECT_EQ(v1->path, "/process_api/abc");
    const auto joined = parse_memory_cgroup("3:cpu,memory,pids:/docker/x\n");
    ASSERT_TRUE(joined);
    EXPECT_EQ(joined->path, "/docker/x");
    EXPECT_FALSE(parse_memory_cgroup("2:cpuset:/\n1:memoryless:/a\n"));  // no memory controller
    EXPECT_FALSE(parse_memory_cgroup("garbage"));
}

TEST(MemoryInfo, StatFieldByExactKey) {
    const char* stat = "active_file 10\ninactive_file_extra 99\ninactive_file 4096\n";
    EXPECT_EQ(parse_stat_field(stat, "inactive_file"), 4096u);
    EXPECT_EQ(parse_stat_field(stat, "active_file"), 10u);
    EXPECT_FALSE(parse_stat_field(stat, "total_inactive_file"));
}

TEST(MemoryInfo, ThisHostReportsSomething) {
    const auto avail = available_memory_bytes();
    ASSERT_TRUE(avail);  // Linux with /proc mounted
    EXPECT_GT(*avail, uint64_t{0});
}
