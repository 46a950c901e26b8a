#include <gtest/gtest.h>

#include <string>

#include "util/utf8.h"

using warden::util::find_invalid_utf8;

TEST(Utf8, AcceptsValidText) {
    EXPECT_EQ(find_invalid_utf8(""), std::string::npos);
    EXPECT_EQ(find_invalid_utf8("hello"), std::string::npos);
    EXPECT_EQ(find_invalid_utf8("h\xC3\xA9llo \xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\x98\x80"),
              std::string::npos);
    EXPECT_EQ(find_invalid_utf8("\xF4\x8F\xBF\xBF"), std::string::npos);  // U+10FFFF
}

TEST(Utf8, RejectsInvalidSequences) {
    EXPECT_EQ(find_invalid_utf8("ab\xFF"), 2u);
    EXPECT_EQ(find_invalid_utf8("\xC0\xAF"), 0u);          // overlong '/'
    EXPECT_EQ(find_invalid_utf8("\xE0\x80\xAF"), 0u);      // overlong
    EXPECT_EQ(find_invalid_utf8("\xED\xA0\x80"), 0u);      // surrogate
    EXPECT_EQ(find_invalid_utf8("\xF4\x90\x80\x80"), 0u);  // above U+10FFFF
    EXPECT_EQ(find_invalid_utf8("x\xE4\xB8"), 1u);         // truncated
    EXPECT_EQ(find_invalid_utf8("\x80"), 0u);              // lone continuation
}
