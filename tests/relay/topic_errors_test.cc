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

// Issue 41 item 11 (invariant 13): the bound measures one continuous failure. A relay that
// saw a brief error, then no failure of the topic for longer than the bound (it stood by,
// or the topic had no events), starts a new clock at the next failure instead of
// dead-lettering at once; a topic that fails at every attempt still reaches its dead
// letters after the bound.
TEST(TopicErrorsTest, ABoundMeasuresOneContinuousFailure) {
  TopicErrors errors(60s);
  const auto t0 = TopicErrors::Clock::now();
  EXPECT_FALSE(errors.Fail("orders", "not authorized", t0));
  EXPECT_FALSE(errors.Fail("orders", "not authorized", t0 + 10s));
  // Minutes without a failure of the topic (no acknowledgement either): a new failure.
  EXPECT_FALSE(errors.Fail("orders", "not authorized", t0 + 300s)) << "dead-lettered at once";
  Status ready = errors.Readiness(t0 + 301s);
  ASSERT_EQ(ready.code(), StatusCode::kUnavailable) << "the new failure is not being retried";
  EXPECT_NE(ready.message().find("dead-lettered in 59 s"), std::string::npos) << ready.message();
  // It goes on failing at every attempt (well within the bound of each other): the bound
  // is reached 60 s after the new failure began, not never.
  for (auto t = 310s; t < 360s; t += 10s) {
    EXPECT_FALSE(errors.Fail("orders", "not authorized", t0 + t)) << t.count();
  }
  EXPECT_TRUE(errors.Fail("orders", "not authorized", t0 + 360s));
  EXPECT_TRUE(errors.Fail("orders", "not authorized", t0 + 400s)) << "still failing: still past";
}

// A bound shorter than the time between two attempts (a 1 s bound, sessions restarted
// 30 s apart) still ends in dead letters: attempts within the retry gap are one failure.
TEST(TopicErrorsTest, ABoundShorterThanTheRetryGapStillEndsInDeadLetters) {
  TopicErrors errors(1s, 90s);
  const auto t0 = TopicErrors::Clock::now();
  EXPECT_FALSE(errors.Fail("orders", "does not exist", t0));
  EXPECT_TRUE(errors.Fail("orders", "does not exist", t0 + 30s));
  EXPECT_FALSE(errors.Fail("orders", "does not exist", t0 + 200s)) << "a new failure after 170 s";
}

}  // namespace
}  // namespace walrelay::relay
