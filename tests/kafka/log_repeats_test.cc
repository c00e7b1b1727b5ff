// librdkafka's repeated lines held back (src/kafka/log_repeats.h).
#include "src/kafka/log_repeats.h"

#include <gtest/gtest.h>

namespace walrelay::kafka {
namespace {

using namespace std::chrono_literals;

constexpr std::string_view kRefused =
    "FAIL [thrd:127.0.0.1:9092/1]: 127.0.0.1:9092/1: Connect to ipv4#127.0.0.1:9092 failed: "
    "Connection refused (after 0ms in state CONNECT, 3 identical error(s) suppressed)";

TEST(RepeatedLineFilterTest, NumbersThatStandAloneMakeOneShapeAddressesDoNot) {
  EXPECT_EQ(RepeatedLineFilter::Shape(kRefused),
            "FAIL [thrd:127.0.0.1:9092/1]: 127.0.0.1:9092/1: Connect to ipv4#127.0.0.1:9092 "
            "failed: Connection refused (after #ms in state CONNECT, # identical error(s) "
            "suppressed)");
  EXPECT_EQ(RepeatedLineFilter::Shape("Timed out 12 in-flight, 0 retry-queued"),
            "Timed out # in-flight, # retry-queued");
}

TEST(RepeatedLineFilterTest, ARepeatWithinTheWindowIsCountedAndSaidWithTheNextOneShown) {
  RepeatedLineFilter filter(60s, 2);
  const auto t0 = RepeatedLineFilter::Clock::now();
  EXPECT_EQ(filter.Admit(kRefused, t0), "");
  std::string again(kRefused);
  again.replace(again.find("after 0ms"), 9, "after 12ms");
  EXPECT_EQ(filter.Admit(again, t0 + 1s), std::nullopt);
  EXPECT_EQ(filter.Admit(again, t0 + 30s), std::nullopt);
  std::string other_broker(kRefused);
  other_broker.replace(other_broker.find("9092/1]"), 7, "9093/2]");
  EXPECT_EQ(filter.Admit(other_broker, t0 + 31s), "") << "another broker: its own line";
  EXPECT_EQ(filter.Admit(kRefused, t0 + 61s), " (2 similar lines in the last 61 s not shown)");
  EXPECT_EQ(filter.Admit(kRefused, t0 + 122s), "") << "none held back since";
  // Bounded: a third shape forgets the least recently shown one (other_broker), which is
  // then new again.
  EXPECT_EQ(filter.Admit("a third line", t0 + 123s), "");
  EXPECT_EQ(filter.Admit(other_broker, t0 + 124s), "");
  EXPECT_EQ(filter.Admit(kRefused, t0 + 125s), "") << "forgotten in turn";
}

}  // namespace
}  // namespace walrelay::kafka
