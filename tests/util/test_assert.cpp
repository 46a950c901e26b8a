// WARDEN_ASSERT aborts with the file, line, condition and message (a bug, not a bad input),
// while util::check throws util::Error for the caller to report.
#include <gtest/gtest.h>

#include "util/assert.h"
#include "util/error.h"

namespace warden::util {
namespace {

int checked_twice(int x) {
    WARDEN_ASSERT(x >= 0, "negative input");
    return 2 * x;
}

TEST(Assert, HoldingConditionReturnsNormally) {
    EXPECT_EQ(checked_twice(21), 42);
}

TEST(AssertDeathTest, FailingConditionAbortsWithLocationAndMessage) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(checked_twice(-1),
                 "internal error at .*test_assert\\.cpp:[0-9]+: x >= 0: negative input");
}

TEST(Assert, CheckThrowsErrorInstead) {
    EXPECT_THROW(check(false, "bad flag"), Error);
    EXPECT_NO_THROW(check(true, "bad flag"));
}

}  // namespace
}  // namespace warden::util
