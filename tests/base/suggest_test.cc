#include "base/suggest.h"

#include <gtest/gtest.h>

namespace walrelay {
namespace {

TEST(SuggestTest, EditDistanceCountsTranspositionsAsOne) {
  EXPECT_EQ(EditDistance("", ""), 0u);
  EXPECT_EQ(EditDistance("abc", ""), 3u);
  EXPECT_EQ(EditDistance("aggregate_typ", "aggregate_type"), 1u);
  EXPECT_EQ(EditDistance("run", "rnu"), 1u);
  EXPECT_EQ(EditDistance("kitten", "sitting"), 3u);
}

TEST(SuggestTest, ClosestNameOnlyWhenNearEnough) {
  const std::vector<std::string> known = {"aggregate_type", "event_type", "table"};
  EXPECT_EQ(ClosestName("aggregate_typ", known), "aggregate_type");
  EXPECT_EQ(ClosestName("evnet_type", known), "event_type");
  EXPECT_EQ(ClosestName("tabel", known), "table");
  EXPECT_EQ(ClosestName("partition", known), "");
  EXPECT_EQ(ClosestName("table", known), "") << "an exact name is not a misspelling";
  EXPECT_EQ(DidYouMean("runn", {"run", "setup", "lag"}), "; did you mean run?");
  EXPECT_EQ(DidYouMean("frobnicate", {"run", "setup", "lag"}), "");
}

}  // namespace
}  // namespace walrelay
