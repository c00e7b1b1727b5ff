#include "base/position.h"

#include <gtest/gtest.h>

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

TEST(PositionTest, RejectsMalformed) {
  for (const char* bad : {"", "lsn=0/1", "source=x", "lsn=zz;source=x",
                          "lsn=0/1;ordinal=-1;source=x", "lsn=0/1;xid=1x;source=x", "garbage"}) {
    EXPECT_FALSE(ParsePosition(bad).has_value()) << bad;
  }
  EXPECT_TRUE(ParsePosition("lsn=0/1;future_field=7;source=x").has_value());
}

}  // namespace
}  // namespace walrelay
