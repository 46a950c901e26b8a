// The depth-limited JSON body parser and random response ids (server/json_body.h,
// server/request_id.h).
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "server/api_error.h"
#include "server/json_body.h"
#include "server/request_id.h"

namespace warden::server {
namespace {

std::string nested(int depth) {
    return std::string(depth, '[') + "1" + std::string(depth, ']');
}

ApiError parse_error(const std::string& body) {
    try {
        (void)parse_json_body(body);
    } catch (const ApiError& e) {
        return e;
    }
    ADD_FAILURE() << "no error for a body of " << body.size() << " bytes";
    return ApiError(0, "");
}

TEST(JsonBody, AcceptsDepthUpToTheLimit) {
    const auto j = parse_json_body(R"({"a": )" + nested(kMaxJsonDepth - 1) + "}");
    EXPECT_TRUE(j.is_object());
    EXPECT_NO_THROW((void)parse_json_body(nested(kMaxJsonDepth)));
}

TEST(JsonBody, RefusesOneLevelDeeperNamingTheTopLevelField) {
    const ApiError e = parse_error(R"({"model": "m", "messages": [{"content": )" +
                                   nested(kMaxJsonDepth - 2) + "}]}");
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.code, "json_too_deep");
    EXPECT_EQ(e.param, "messages");
    const ApiError top = parse_error(nested(kMaxJsonDepth + 1));
    EXPECT_EQ(top.code, "json_too_deep");
    EXPECT_EQ(top.param, "body");
}

TEST(JsonBody, MillionOpeningBracketsAreRefusedWithoutRecursion) {
    // Unterminated as well as too deep: the depth check fires first, long before the end.
    const ApiError e = parse_error(R"({"messages": [{"content": )" + std::string(1000000, '['));
    EXPECT_EQ(e.code, "json_too_deep");
    EXPECT_EQ(e.param, "messages");
}

TEST(JsonBody, BracketsInsideStringsDoNotCount) {
    const auto j = parse_json_body(R"({"prompt": ")" + std::string(10000, '[') + R"("})");
    EXPECT_EQ(j["prompt"].get<std::string>().size(), 10000u);
}

TEST(JsonBody, SyntaxErrorsAreInvalidJson) {
    for (const char* bad : {"{", "", "[1,]", "{\"a\" 1}", "nul"}) {
        const ApiError e = parse_error(bad);
        EXPECT_EQ(e.status, 400) << bad;
        EXPECT_EQ(e.code, "invalid_json") << bad;
    }
}

TEST(RequestId, RandomAlphanumericAfterThePrefix) {
    std::set<std::string> seen;
    for (int i = 0; i < 1000; ++i) {
        const std::string id = random_id("cmpl-");
        ASSERT_EQ(id.size(), 5u + 24u);
        EXPECT_EQ(id.rfind("cmpl-", 0), 0u);
        for (char c : id.substr(5)) EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c))) << id;
        seen.insert(id);
    }
    EXPECT_EQ(seen.size(), 1000u);  // 62^24 ids: a repeat means they are not random
}

}  // namespace
}  // namespace warden::server
