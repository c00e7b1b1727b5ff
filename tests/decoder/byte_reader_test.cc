#include "decoder/byte_reader.h"

#include <gtest/gtest.h>

#include <string>

namespace walrelay::decoder {
namespace {

TEST(ByteReaderTest, ReadsBigEndianIntegers) {
  const std::string b(
      "\x01\xff\xfe\x12\x34\x80\x00\x00\x01\x01\x02\x03\x04\x05\x06\x07\x08"
      "\xff\xff\xff\xff\xff\xff\xff\xfe",
      25);
  ByteReader r(b);
  uint8_t u8;
  int8_t i8;
  int16_t i16;
  uint16_t u16;
  int32_t i32;
  uint64_t u64;
  int64_t i64;
  ASSERT_TRUE(r.ReadUint8(&u8));
  EXPECT_EQ(u8, 1);
  ASSERT_TRUE(r.ReadInt8(&i8));
  EXPECT_EQ(i8, -1);
  ASSERT_TRUE(r.ReadInt16(&i16));
  EXPECT_EQ(i16, static_cast<int16_t>(0xfe12));
  r = ByteReader(b);
  ASSERT_TRUE(r.Skip(3));
  ASSERT_TRUE(r.ReadUint16(&u16));
  EXPECT_EQ(u16, 0x1234);
  ASSERT_TRUE(r.ReadInt32(&i32));
  EXPECT_EQ(i32, INT32_MIN + 1);
  ASSERT_TRUE(r.ReadUint64(&u64));
  EXPECT_EQ(u64, 0x0102030405060708u);
  ASSERT_TRUE(r.ReadInt64(&i64));
  EXPECT_EQ(i64, -2);
  EXPECT_TRUE(r.empty());
  EXPECT_EQ(r.offset(), 25u);
}

TEST(ByteReaderTest, FailureLeavesCursorAndReportsOffset) {
  const std::string b("\x00\x01\x02", 3);
  ByteReader r(b);
  ASSERT_TRUE(r.Skip(1));
  uint32_t v;
  EXPECT_FALSE(r.ReadUint32(&v));
  EXPECT_EQ(r.offset(), 1u);
  EXPECT_EQ(r.error().offset, 1u);
  EXPECT_EQ(r.error().needed, 4u);
  EXPECT_EQ(r.error().available, 2u);
  EXPECT_EQ(r.ErrorText("column length"),
            "truncated at offset 1: need 4 bytes for column length, have 2");
  std::string_view s;
  EXPECT_FALSE(r.ReadBytes(3, &s));
  EXPECT_TRUE(r.ReadBytes(2, &s));
  EXPECT_EQ(s, std::string_view("\x01\x02", 2));
  uint8_t u8;
  EXPECT_FALSE(r.ReadUint8(&u8));
  EXPECT_FALSE(r.Skip(1));
  EXPECT_TRUE(r.Skip(0));
}

TEST(ByteReaderTest, StringsAreZeroCopyAndNeedTheirNul) {
  const std::string b("ab\0\0cd", 6);
  ByteReader r(b);
  std::string_view s;
  ASSERT_TRUE(r.ReadString(&s));
  EXPECT_EQ(s, "ab");
  EXPECT_EQ(s.data(), b.data());
  ASSERT_TRUE(r.ReadString(&s));
  EXPECT_EQ(s, "");
  EXPECT_FALSE(r.ReadString(&s));
  EXPECT_TRUE(r.error().unterminated_string);
  EXPECT_EQ(r.offset(), 4u);
  EXPECT_EQ(r.rest(), "cd");
  EXPECT_EQ(r.ErrorText("name"),
            "truncated at offset 4: unterminated string for name (2 bytes left)");
}

TEST(ByteReaderTest, EmptyInput) {
  ByteReader r{std::string_view()};
  std::string_view s;
  uint8_t u8;
  EXPECT_TRUE(r.empty());
  EXPECT_FALSE(r.ReadUint8(&u8));
  EXPECT_FALSE(r.ReadString(&s));
  EXPECT_TRUE(r.ReadBytes(0, &s));
}

}  // namespace
}  // namespace walrelay::decoder
