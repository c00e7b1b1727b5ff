#include "src/relay/core/topic_errors.h"

#include <gtest/gtest.h>

namespace walrelay::relay {
namespace {

using namespace std::chrono_literals;

TEST(TopicErrorsTest, RetriedForTheTimeoutThenDeadLetteredUntilCleared) {
  TopicErrors errors(60s);
  const auto t0 = TopicErrors::Clock::now();
  EXPECT_TRUE(errors.Readiness(t0).ok());
  EXPECT_FALSE(errors.Fail("orders", "does not exist", t0));
  EXPECT_FALSE(errors.Fail("orders", "does not exist", t0 + 59s));
  Status ready = errors.Readiness(t0 + 1s);
  ASSERT_EQ(ready.code(), StatusCode::kUnavailable);
  EXPECT_NE(ready.message().find("kafka topic orders: does not exist"), std::string::npos)
      << ready.message();
  EXPECT_TRUE(errors.Fail("orders", "does not exist", t0 + 60s));
  EXPECT_TRUE(errors.Readiness(t0 + 61s).ok()) << "dead-lettering: the stream moves";
  EXPECT_EQ(errors.failing(), 1u);
  errors.Clear("orders");
  EXPECT_EQ(errors.failing(), 0u);
  EXPECT_FALSE(errors.Fail("orders", "does not exist", t0 + 120s)) << "a new clock";
}

}  // namespace
}  // namespace walrelay::relay
