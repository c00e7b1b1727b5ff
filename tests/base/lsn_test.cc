#include "base/lsn.h"

#include <gtest/gtest.h>

namespace walrelay {
namespace {

TEST(LsnTest, FormatsLikePostgres) {
  EXPECT_EQ(Lsn(0).ToString(), "0/0");
  EXPECT_EQ(Lsn(0x16B374D848ull).ToString(), "16/B374D848");
  EXPECT_EQ(Lsn(0xFFFFFFFFFFFFFFFFull).ToString(), "FFFFFFFF/FFFFFFFF");
}

TEST(LsnTest, ParsesRoundTrip) {
  for (uint64_t v : {0ull, 1ull, 0x1000000ull, 0x16B374D848ull, 0xFFFFFFFFFFFFFFFFull}) {
    auto parsed = Lsn::Parse(Lsn(v).ToString());
    ASSERT_TRUE(parsed.has_value());
    EXPECT_EQ(parsed->value, v);
  }
  EXPECT_EQ(Lsn::Parse("16/b374d848")->value, 0x16B374D848ull);
}

TEST(LsnTest, RejectsMalformed) {
  for (const char* bad : {"", "/", "0/", "/0", "16B374D848", "1/2/3", "G/0", "123456789/0",
                          "0/123456789", " 0/0", "0/0 "}) {
    EXPECT_FALSE(Lsn::Parse(bad).has_value()) << bad;
  }
}

TEST(LsnTest, Orders) {
  EXPECT_LT(Lsn(1), Lsn(2));
  EXPECT_FALSE(Lsn::Invalid().valid());
}

}  // namespace
}  // namespace walrelay
