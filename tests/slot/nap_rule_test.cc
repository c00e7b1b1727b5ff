// NapRule (slot/replication_connection.h): when a catching-up reader naps before poll().
#include <gtest/gtest.h>

#include <string>

#include "slot/replication_connection.h"

namespace walrelay::slot {
namespace {

// The naps taken ('n') and skipped ('.') over `catch_ups` catch-ups, every nap gathering
// enough when `finds` is true, nothing when false.
std::string Pattern(NapRule& rule, int catch_ups, bool finds) {
  std::string out;
  for (int i = 0; i < catch_ups; ++i) {
    if (rule.Take()) {
      out += 'n';
      rule.Judge(finds ? NapRule::kEnough : 0);
    } else {
      out += '.';
    }
  }
  return out;
}

TEST(NapRuleTest, DenseStreamNapsEveryTime) {
  NapRule rule;
  EXPECT_EQ(Pattern(rule, 20, true), std::string(20, 'n'));
}

TEST(NapRuleTest, MissesDoubleTheSkipUpToItsCap) {
  NapRule rule;
  // Skips of 1, 2, 4, 8, 16, 32, then 64 each time.
  const std::string expected = "n.n..n....n" + std::string(8, '.') + "n" +
                               std::string(16, '.') + "n" + std::string(32, '.') + "n" +
                               std::string(64, '.') + "n" + std::string(64, '.') + "n";
  EXPECT_EQ(Pattern(rule, static_cast<int>(expected.size()), false), expected);
}

TEST(NapRuleTest, ANapThatFindsDataResetsTheBackOff) {
  NapRule rule;
  EXPECT_EQ(Pattern(rule, 6, false), "n.n..n");  // skip now 4
  EXPECT_EQ(Pattern(rule, 5, true), "....n");    // the 4 skips run out, then a nap finds
  EXPECT_EQ(Pattern(rule, 3, true), "nnn");      // naps on again every time
  EXPECT_EQ(Pattern(rule, 3, false), "n.n");     // and a new miss starts from a skip of 1
}

// A nap pays only when it gathers more than one wake-up on the socket would have brought:
// between sparse transactions it finds the next one or two (4 to 8 messages), and the
// timer it cost is then no cheaper than the wake-up it saved. Judge() counts such a nap as
// a miss.
TEST(NapRuleTest, ANapThatGathersLittleIsJudgedAMiss) {
  NapRule rule;
  ASSERT_TRUE(rule.Take());
  rule.Judge(NapRule::kEnough - 1);
  EXPECT_FALSE(rule.Take()) << "a nap of a few messages backs off like one that found none";
  ASSERT_TRUE(rule.Take());
  rule.Judge(0);
  EXPECT_FALSE(rule.Take());
  EXPECT_FALSE(rule.Take());
  ASSERT_TRUE(rule.Take());
  rule.Judge(NapRule::kEnough);
  EXPECT_TRUE(rule.Take()) << "a nap that gathered enough keeps naps on";
  rule.Judge(500);
  EXPECT_TRUE(rule.Take());
}

}  // namespace
}  // namespace walrelay::slot
