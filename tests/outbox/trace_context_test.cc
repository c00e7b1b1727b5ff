// W3C Trace Context checks of the outbox helper (outbox::CheckTraceContext): what a tracer's
// propagator produces is accepted as it is; anything else is refused with the reason, so a
// record never carries a traceparent the consumer's tracer would reject or misread.
#include <gtest/gtest.h>

#include <string>

#include "src/outbox/outbox.h"

namespace walrelay::outbox {
namespace {

constexpr char kValid[] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

Status Check(std::string traceparent, std::string tracestate = "") {
  return CheckTraceContext({std::move(traceparent), std::move(tracestate)});
}

TEST(TraceContextTest, WhatPropagatorsWriteIsAccepted) {
  EXPECT_TRUE(Check(kValid).ok());
  EXPECT_TRUE(Check(kValid, "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7").ok());
  // A later version may append fields after the flags.
  EXPECT_TRUE(Check("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra").ok());
}

TEST(TraceContextTest, MalformedTraceparentsAreRefusedWithTheReason) {
  const struct {
    std::string value, reason;
  } cases[] = {
      {"", "want 00-<32 hex>"},
      {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7", "want 00-<32 hex>"},
      {"00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "want 00-<32 hex>"},
      {"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", "lower-case hex"},
      {"00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01", "lower-case hex"},
      {"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "version ff"},
      {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x", "exactly 55"},
      {"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x", "after flags"},
      {"00-00000000000000000000000000000000-00f067aa0ba902b7-01", "trace id is all zeros"},
      {"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", "parent id is all zeros"},
  };
  for (const auto& c : cases) {
    const Status st = Check(c.value);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << c.value;
    EXPECT_NE(st.message().find(c.reason), std::string::npos) << c.value << ": " << st.message();
  }
}

TEST(TraceContextTest, TracestateMustBeShortPrintableAscii) {
  EXPECT_TRUE(Check(kValid, std::string(512, 'a')).ok());
  EXPECT_EQ(Check(kValid, std::string(513, 'a')).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Check(kValid, "rojo=1\ncongo=2").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Check(kValid, "rojo=\xc3\xa9").code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace walrelay::outbox
