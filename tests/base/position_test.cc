#include "base/position.h"

#include <gtest/gtest.h>

#include <climits>
#include <cstdint>
#include <tuple>

namespace walrelay {
namespace {

TEST(PositionTest, RoundTrips) {
  SourcePosition p;
  p.lsn = Lsn(0x16B374D848ull);
  p.ordinal = 3;
  p.xid = 745;
  p.commit_time_us = 1764681600000000;
  p.source = "public.outbox";
  std::string text;
  FormatPosition(p, &text);
  EXPECT_EQ(text,
            "lsn=16/B374D848;ordinal=3;xid=745;commit_time_us=1764681600000000;"
            "source=public.outbox");
  auto back = ParsePosition(text);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->lsn, p.lsn);
  EXPECT_EQ(back->ordinal, 3u);
  EXPECT_EQ(back->xid, 745u);
  EXPECT_EQ(back->commit_time_us, p.commit_time_us);
  EXPECT_FALSE(back->recovered);
  EXPECT_EQ(back->source, "public.outbox");
}

TEST(PositionTest, SourceIsTheRestAndRecoveredIsMarked) {
  SourcePosition p;
  p.lsn = Lsn(1);
  p.recovered = true;
  p.source = "weird;schema.out=box";
  std::string text;
  FormatPosition(p, &text);
  auto back = ParsePosition(text);
  ASSERT_TRUE(back.has_value()) << text;
  EXPECT_TRUE(back->recovered);
  EXPECT_EQ(back->source, "weird;schema.out=box");
}

// Every field at its widest (and an LSN of zero halves), as Lsn::ToString writes LSNs.
TEST(PositionTest, ExtremeValuesRoundTrip) {
  for (const auto& [lsn, ordinal, xid, time] :
       {std::tuple{0x0ull, 0u, 0u, int64_t{0}},
        std::tuple{0xFFFFFFFFFFFFFFFFull, 4294967295u, 4294967295u, INT64_MIN},
        std::tuple{0x100000000ull, 10u, 16u, INT64_MAX},
        std::tuple{0xA0000000Full, 1u, 2u, int64_t{-1}}}) {
    SourcePosition p;
    p.lsn = Lsn(lsn);
    p.ordinal = ordinal;
    p.xid = xid;
    p.commit_time_us = time;
    p.recovered = ordinal == 1;
    p.source = "s.t";
    std::string text = "previous content that must go";
    FormatPosition(p, &text);
    EXPECT_EQ(text, "lsn=" + p.lsn.ToString() + ";ordinal=" + std::to_string(ordinal) +
                        ";xid=" + std::to_string(xid) + ";commit_time_us=" + std::to_string(time) +
                        (p.recovered ? ";recovered=1" : "") + ";source=s.t");
    auto back = ParsePosition(text);
    ASSERT_TRUE(back.has_value()) << text;
    EXPECT_EQ(back->lsn, p.lsn);
    EXPECT_EQ(back->ordinal, ordinal);
    EXPECT_EQ(back->xid, xid);
    EXPECT_EQ(back->commit_time_us, time);
    EXPECT_EQ(back->recovered, p.recovered);
  }
}

TEST(PositionTest, RejectsMalformed) {
  for (const char* bad : {"", "lsn=0/1", "source=x", "lsn=zz;source=x",
                          "lsn=0/1;ordinal=-1;source=x", "lsn=0/1;xid=1x;source=x", "garbage"}) {
    EXPECT_FALSE(ParsePosition(bad).has_value()) << bad;
  }
  EXPECT_TRUE(ParsePosition("lsn=0/1;future_field=7;source=x").has_value());
}

}  // namespace
}  // namespace walrelay
