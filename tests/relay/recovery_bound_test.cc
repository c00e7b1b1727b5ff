// The snapshot bound's arithmetic (recovery/backfill.h): parsing, the refusals, the predicate.
#include <gtest/gtest.h>

#include "src/relay/recovery/backfill.h"

namespace walrelay::relay {
namespace {

TEST(SnapshotBoundTest, ParsesXminAndXmax) {
  EXPECT_EQ((SnapshotBound{"732:737:732,735", Lsn()}).Xmin(), 732u);
  EXPECT_EQ((SnapshotBound{"732:737:732,735", Lsn()}).Xmax(), 737u);
  EXPECT_EQ((SnapshotBound{"8589934595:8589934595:", Lsn()}).Xmin(), 8589934595u);  // epoch 2
  EXPECT_EQ((SnapshotBound{"8589934595:8589934595:", Lsn()}).Xmax(), 8589934595u);
  EXPECT_EQ((SnapshotBound{"", Lsn()}).Xmin(), 0u);
  EXPECT_EQ((SnapshotBound{"12", Lsn()}).Xmax(), 0u);
  EXPECT_EQ((SnapshotBound{"12:x:", Lsn()}).Xmax(), 0u);
}

TEST(CheckBoundTest, SpanFromTheBoundsXminToTheCurrentXmax) {
  auto span = CheckBound({"732:737:732", Lsn()}, 900);
  ASSERT_TRUE(span.ok()) << span.status().ToString();
  EXPECT_EQ(*span, 168u);
}

TEST(CheckBoundTest, RefusesABoundTooOldForThirtyTwoBitXids) {
  const uint64_t xmin = 1000;
  EXPECT_TRUE(CheckBound({"1000:1000:", Lsn()}, xmin + (uint64_t{1} << 31) - 1).ok());
  auto st = CheckBound({"1000:1000:", Lsn()}, xmin + (uint64_t{1} << 31)).status();
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_NE(st.message().find("too old"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("walrelay republish --all --create-slot"), std::string::npos)
      << st.message();
}

TEST(CheckBoundTest, RefusesABoundAheadOfTheServer) {
  auto st = CheckBound({"5000:5000:", Lsn()}, 4000).status();
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_NE(st.message().find("restored or replaced"), std::string::npos) << st.message();
  EXPECT_EQ(CheckBound({"garbage", Lsn()}, 4000).status().code(), StatusCode::kDataLoss);
}

TEST(RecoveryPredicateTest, ComparesXminModuloTwoToThe32WithinTheSpan) {
  // Bound xmin 2^32 + 10 (epoch 1): rows' 32-bit xmin from 10 on, for 100 xids.
  EXPECT_EQ(RecoveryPredicate((uint64_t{1} << 32) + 10, 100),
            "((xmin::text::bigint - 10) & 4294967295) < 100");
}

}  // namespace
}  // namespace walrelay::relay
