#include "slot/wire.h"

#include <gtest/gtest.h>

#include <string>

namespace walrelay::slot {
namespace {

std::string Bytes(std::initializer_list<int> bytes) {
  std::string s;
  for (int b : bytes) s.push_back(static_cast<char>(b));
  return s;
}

TEST(WireTest, ParsesHandBuiltXLogData) {
  std::string msg = Bytes({'w', 0, 0, 0,    0x16, 0xB3, 0x74, 0xD8, 0x48,  // walStart
                           0,   0, 0, 0x16, 0xB3, 0x74, 0xD9, 0x00,        // walEnd
                           0,   0, 0, 0,    0,    0,    0x01, 0x00,        // sendTime = 256
                           'B', 1, 2});
  auto m = ParseXLogData(msg);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->wal_start, Lsn(0x16B374D848));
  EXPECT_EQ(m->wal_end, Lsn(0x16B374D900));
  EXPECT_EQ(m->send_time, 256);
  EXPECT_EQ(m->data, Bytes({'B', 1, 2}));
  EXPECT_EQ(m->data.data(), msg.data() + kXLogDataHeaderSize);  // zero-copy view
}

TEST(WireTest, XLogDataRoundTripIncludingEmptyPayload) {
  for (std::string payload : {std::string(), std::string("C\0\x01", 3), std::string(1000, 'x')}) {
    std::string enc = EncodeXLogData(Lsn(1), Lsn(0xFFFFFFFFFFFFFFFF), -5, payload);
    EXPECT_EQ(enc.size(), kXLogDataHeaderSize + payload.size());
    auto any = ParseServerMessage(enc);
    ASSERT_TRUE(any.ok()) << any.status().ToString();
    ASSERT_TRUE(std::holds_alternative<XLogData>(*any));
    const auto& m = std::get<XLogData>(*any);
    EXPECT_EQ(m.wal_start, Lsn(1));
    EXPECT_EQ(m.wal_end, Lsn(0xFFFFFFFFFFFFFFFF));
    EXPECT_EQ(m.send_time, -5);
    EXPECT_EQ(m.data, payload);
  }
}

TEST(WireTest, KeepaliveRoundTrip) {
  for (bool reply : {false, true}) {
    PrimaryKeepalive k{Lsn(0x1234567890), 123456789, reply};
    std::string enc = EncodePrimaryKeepalive(k);
    ASSERT_EQ(enc.size(), kPrimaryKeepaliveSize);
    EXPECT_EQ(enc[0], 'k');
    auto any = ParseServerMessage(enc);
    ASSERT_TRUE(any.ok()) << any.status().ToString();
    ASSERT_TRUE(std::holds_alternative<PrimaryKeepalive>(*any));
    const auto& m = std::get<PrimaryKeepalive>(*any);
    EXPECT_EQ(m.wal_end, k.wal_end);
    EXPECT_EQ(m.send_time, k.send_time);
    EXPECT_EQ(m.reply_requested, reply);
  }
}

TEST(WireTest, StandbyStatusUpdateLayout) {
  StandbyStatusUpdate u{Lsn(0x0102030405060708), Lsn(0x1112131415161718), Lsn(0x2122232425262728),
                        0x3132333435363738, true};
  std::string enc = EncodeStandbyStatusUpdate(u);
  EXPECT_EQ(enc, Bytes({'r',  0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x11, 0x12, 0x13,
                        0x14, 0x15, 0x16, 0x17, 0x18, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27,
                        0x28, 0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37, 0x38, 1}));
  auto back = ParseStandbyStatusUpdate(enc);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->write, u.write);
  EXPECT_EQ(back->flush, u.flush);
  EXPECT_EQ(back->apply, u.apply);
  EXPECT_EQ(back->client_time, u.client_time);
  EXPECT_TRUE(back->reply_requested);

  std::string appended = "prefix";
  AppendStandbyStatusUpdate(u, appended);
  EXPECT_EQ(appended, "prefix" + enc);
}

TEST(WireTest, EveryTruncationIsDataLossWithOffset) {
  const std::string x = EncodeXLogData(Lsn(1), Lsn(2), 3, "");
  const std::string k = EncodePrimaryKeepalive({Lsn(1), 2, true});
  const std::string r = EncodeStandbyStatusUpdate({Lsn(1), Lsn(2), Lsn(3), 4, false});
  for (size_t n = 0; n < x.size(); ++n) {
    auto m = ParseXLogData(x.substr(0, n));
    ASSERT_FALSE(m.ok()) << n;
    EXPECT_EQ(m.status().code(), StatusCode::kDataLoss);
    EXPECT_NE(m.status().message().find("offset"), std::string::npos) << m.status().message();
    EXPECT_FALSE(ParseServerMessage(x.substr(0, n)).ok());
  }
  for (size_t n = 0; n < k.size(); ++n) {
    auto m = ParsePrimaryKeepalive(k.substr(0, n));
    ASSERT_FALSE(m.ok()) << n;
    EXPECT_EQ(m.status().code(), StatusCode::kDataLoss);
    EXPECT_FALSE(ParseServerMessage(k.substr(0, n)).ok());
  }
  for (size_t n = 0; n < r.size(); ++n) {
    auto m = ParseStandbyStatusUpdate(r.substr(0, n));
    ASSERT_FALSE(m.ok()) << n;
    EXPECT_EQ(m.status().code(), StatusCode::kDataLoss);
  }
  auto m = ParseXLogData(x.substr(0, 10));
  EXPECT_NE(m.status().message().find("offset 9"), std::string::npos) << m.status().message();
}

TEST(WireTest, RejectsUnknownTypeTrailingBytesAndBadFlag) {
  auto unknown = ParseServerMessage("zabc");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(unknown.status().message().find("0x7a"), std::string::npos);

  std::string k = EncodePrimaryKeepalive({Lsn(1), 2, false});
  auto trailing = ParsePrimaryKeepalive(k + "x");
  ASSERT_FALSE(trailing.ok());
  EXPECT_EQ(trailing.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(trailing.status().message().find("offset 18"), std::string::npos);

  k.back() = 2;
  auto flag = ParsePrimaryKeepalive(k);
  ASSERT_FALSE(flag.ok());
  EXPECT_NE(flag.status().message().find("offset 17"), std::string::npos);

  // A keepalive is not XLogData and vice versa.
  EXPECT_FALSE(ParseXLogData(EncodePrimaryKeepalive({})).ok());
  EXPECT_FALSE(ParsePrimaryKeepalive(EncodeXLogData(Lsn(), Lsn(), 0, "abcdefghij")).ok());
}

TEST(WireTest, PgEpochConversions) {
  EXPECT_EQ(PgTimeToUnixMicros(0), 946684800LL * 1000000);
  EXPECT_EQ(UnixMicrosToPgTime(946684800LL * 1000000), 0);
  // Times from the stream are data: 'infinity' or corrupt bytes saturate (pipeline_fuzz
  // found the overflow with a Begin whose commit time was near INT64_MAX).
  EXPECT_EQ(PgTimeToUnixMicros(INT64_MAX), INT64_MAX);
  EXPECT_EQ(PgTimeToUnixMicros(INT64_MAX - 946684800LL * 1000000), INT64_MAX);
  EXPECT_EQ(PgTimeToUnixMicros(INT64_MIN), INT64_MIN + 946684800LL * 1000000);
  EXPECT_EQ(UnixMicrosToPgTime(INT64_MIN), INT64_MIN);
  static_assert(PgTimeToUnixMicros(INT64_MAX - 1) == INT64_MAX);
  const auto t = std::chrono::system_clock::time_point(std::chrono::seconds(946684800 + 60));
  EXPECT_EQ(ToPgTime(t), 60LL * 1000000);
  EXPECT_EQ(FromPgTime(60LL * 1000000), t);
  const int64_t now = PgTimeNow();
  EXPECT_GT(now, 700'000'000LL * 1000000);  // after 2022
}

TEST(WireTest, DurationSettingsAndStatusInterval) {
  using std::chrono::milliseconds;
  EXPECT_EQ(*ParseDurationSetting("60s"), milliseconds(60000));
  EXPECT_EQ(*ParseDurationSetting("500ms"), milliseconds(500));
  EXPECT_EQ(*ParseDurationSetting("1min"), milliseconds(60000));
  EXPECT_EQ(*ParseDurationSetting("2h"), milliseconds(7200000));
  EXPECT_EQ(*ParseDurationSetting("1d"), milliseconds(86400000));
  EXPECT_EQ(*ParseDurationSetting("0"), milliseconds(0));
  EXPECT_EQ(*ParseDurationSetting("250"), milliseconds(250));
  EXPECT_FALSE(ParseDurationSetting("").ok());
  EXPECT_FALSE(ParseDurationSetting("s").ok());
  EXPECT_FALSE(ParseDurationSetting("10parsecs").ok());
  EXPECT_FALSE(ParseDurationSetting("-1s").ok());

  EXPECT_EQ(StatusInterval(milliseconds(60000)), milliseconds(1000));
  EXPECT_EQ(StatusInterval(milliseconds(1000)), milliseconds(500));
  EXPECT_EQ(StatusInterval(milliseconds(0)), milliseconds(1000));
}

}  // namespace
}  // namespace walrelay::slot
