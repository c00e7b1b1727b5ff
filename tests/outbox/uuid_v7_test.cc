// UUIDv7 generation (RFC 9562 §5.7) and JSON string quoting of the producer helper.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "src/outbox/outbox.h"

namespace walrelay::outbox {
namespace {

uint64_t TimestampMs(const UuidBytes& b) {
  uint64_t ms = 0;
  for (int i = 0; i < 6; ++i) ms = (ms << 8) | b[i];
  return ms;
}

uint64_t NowMs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

TEST(UuidV7, CanonicalTextForm) {
  const std::regex re("^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$");
  for (int i = 0; i < 1000; ++i) {
    const std::string id = NewUuidV7();
    ASSERT_EQ(id.size(), 36u);
    ASSERT_TRUE(std::regex_match(id, re)) << id;
  }
}

TEST(UuidV7, VersionAndVariantBits) {
  for (int i = 0; i < 1000; ++i) {
    const UuidBytes b = NewUuidV7Bytes();
    ASSERT_EQ(b[6] >> 4, 0x7) << "version";
    ASSERT_EQ(b[8] >> 6, 0x2) << "variant 10";
  }
}

TEST(UuidV7, TimestampIsUnixMilliseconds) {
  const uint64_t before = NowMs();
  const UuidBytes b = NewUuidV7Bytes();
  const uint64_t after = NowMs();
  // Monotonic generation may run a few ms ahead of the clock under heavy load; allow 1s.
  EXPECT_GE(TimestampMs(b), before);
  EXPECT_LE(TimestampMs(b), after + 1000);
}

TEST(UuidV7, FormatUuid) {
  UuidBytes b{};
  for (int i = 0; i < 16; ++i) b[i] = static_cast<uint8_t>(i * 17);
  EXPECT_EQ(FormatUuid(b), "00112233-4455-6677-8899-aabbccddeeff");
}

TEST(UuidV7, HundredThousandUniqueAndStrictlyIncreasing) {
  std::vector<std::string> ids;
  ids.reserve(100000);
  for (int i = 0; i < 100000; ++i) ids.push_back(NewUuidV7());
  std::unordered_set<std::string> unique(ids.begin(), ids.end());
  EXPECT_EQ(unique.size(), ids.size());
  for (size_t i = 1; i < ids.size(); ++i) {
    ASSERT_LT(ids[i - 1], ids[i]) << "at " << i;  // text order == byte order (lowercase hex)
  }
}

TEST(UuidV7, GeneratorMonotonicWithinOneMillisecond) {
  UuidV7Generator gen;
  UuidBytes prev = gen.Next(1700000000000);
  for (int i = 0; i < 100000; ++i) {
    const UuidBytes next = gen.Next(1700000000000);
    ASSERT_LT(prev, next) << "at " << i;
    ASSERT_EQ(next[6] >> 4, 0x7);
    ASSERT_EQ(next[8] >> 6, 0x2);
    // 100k increments of at most 2^32 can overflow the 74-bit counter only if it started
    // within 2^49 of the top; then the timestamp moves on by one ms. Either way it stays
    // within a millisecond or two of the clock.
    ASSERT_LE(TimestampMs(next), 1700000000001u);
    prev = next;
  }
}

TEST(UuidV7, GeneratorMonotonicWhenClockStepsBack) {
  UuidV7Generator gen;
  const UuidBytes a = gen.Next(1700000005000);
  const UuidBytes b = gen.Next(1700000000000);  // clock stepped back 5 s
  EXPECT_LT(a, b);
  EXPECT_EQ(TimestampMs(b), 1700000005000u) << "keeps the later timestamp";
  const UuidBytes c = gen.Next(1700000006000);
  EXPECT_LT(b, c);
  EXPECT_EQ(TimestampMs(c), 1700000006000u);
}

TEST(UuidV7, GeneratorNewMillisecondDrawsFreshRandomBits) {
  UuidV7Generator gen;
  std::set<std::string> tails;
  for (uint64_t ms = 1; ms <= 200; ++ms) {
    const UuidBytes b = gen.Next(ms);
    EXPECT_EQ(TimestampMs(b), ms);
    tails.insert(FormatUuid(b).substr(14));
  }
  EXPECT_EQ(tails.size(), 200u);
}

TEST(UuidV7, UniqueAcrossThreads) {
  constexpr int kThreads = 4, kPerThread = 25000;
  std::vector<std::vector<std::string>> per(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&per, t] {
      per[t].reserve(kPerThread);
      for (int i = 0; i < kPerThread; ++i) per[t].push_back(NewUuidV7());
    });
  }
  for (auto& th : threads) th.join();
  std::unordered_set<std::string> all;
  for (const auto& v : per) {
    for (size_t i = 1; i < v.size(); ++i) ASSERT_LT(v[i - 1], v[i]);
    all.insert(v.begin(), v.end());
  }
  EXPECT_EQ(all.size(), static_cast<size_t>(kThreads * kPerThread));
}

TEST(UuidV7, ForkedChildDoesNotRepeatParentIds) {
  (void)NewUuidV7();  // fill the parent's random pool
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(fds[0]);
    const std::string id = NewUuidV7();
    ssize_t n = write(fds[1], id.data(), id.size());
    _exit(n == static_cast<ssize_t>(id.size()) ? 0 : 1);
  }
  close(fds[1]);
  const std::string parent_id = NewUuidV7();
  char buf[36];
  ssize_t got = 0;
  while (got < 36) {
    ssize_t n = read(fds[0], buf + got, 36 - got);
    if (n <= 0) break;
    got += n;
  }
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_EQ(got, 36);
  const std::string child_id(buf, 36);
  // Same millisecond is likely; the random parts must still differ.
  EXPECT_NE(child_id.substr(14), parent_id.substr(14));
}

TEST(JsonQuote, EscapesQuotesBackslashesAndControls) {
  EXPECT_EQ(JsonQuote(""), "\"\"");
  EXPECT_EQ(JsonQuote("plain"), "\"plain\"");
  EXPECT_EQ(JsonQuote("a\"b\\c"), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(JsonQuote("\n\r\t\b\f"), "\"\\n\\r\\t\\b\\f\"");
  EXPECT_EQ(JsonQuote(std::string("\x01\x1f", 2)), "\"\\u0001\\u001f\"");
  EXPECT_EQ(JsonQuote("/"), "\"/\"");
  EXPECT_EQ(JsonQuote("\x7f"), "\"\x7f\"");
}

TEST(JsonQuote, KeepsUtf8) {
  EXPECT_EQ(JsonQuote("zürich €"), "\"zürich €\"");
  EXPECT_EQ(JsonQuote("\xF0\x9F\x98\x80"), "\"\xF0\x9F\x98\x80\"");
}

}  // namespace
}  // namespace walrelay::outbox
