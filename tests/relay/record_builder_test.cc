// RecordBuilder (src/relay/core/record_builder.h): the exact record each outbox.format gives,
// checked against the contract (docs/inbox-contract.md) and CloudEvents 1.0's Kafka protocol
// binding: the required attributes specversion, id, source, type; time in RFC 3339; the
// content type of each mode; the payload untouched in binary mode.
#include "src/relay/core/record_builder.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace walrelay::relay {
namespace {

using Headers = std::vector<std::pair<std::string, std::string>>;

Headers Of(const RecordBuilder& b) {
  Headers out;
  for (const auto& h : b.headers()) out.emplace_back(h.name, h.value);
  return out;
}

class RecordBuilderTest : public ::testing::Test {
 protected:
  RecordBuilderTest() {
    event_.topic = "outbox.payment";
    event_.key = "wallet-7";
    event_.value = R"({"amount": 12})";
    event_.event_id = "0190a1b2-0000-7000-8000-000000000001";
    event_.event_type = "PaymentMade";
    event_.aggregate_type = "payment";
    event_.extra_headers = {{"tenant", "t1"}};
    position_.lsn = Lsn(0x16B374D848);
    position_.ordinal = 3;
    position_.xid = 745;
    position_.commit_time_us = 1764931468123456;  // 2025-12-05T10:44:28.123456Z
    position_.source = "public.outbox";
  }
  OutboxEvent event_;
  SourcePosition position_;
  RelayConfig config_;
  const std::string position_text_ =
      "lsn=16/B374D848;ordinal=3;xid=745;commit_time_us=1764931468123456;source=public.outbox";
};

TEST_F(RecordBuilderTest, WalrelayFormatIsTheContract) {
  RecordBuilder b(config_);
  b.Build(event_, position_);
  EXPECT_EQ(b.value(), event_.value);
  EXPECT_EQ(Of(b), (Headers{{"event_id", std::string(event_.event_id)},
                            {"event_type", "PaymentMade"},
                            {"aggregate_type", "payment"},
                            {"tenant", "t1"},
                            {"walrelay.position", position_text_}}));
}

TEST_F(RecordBuilderTest, CloudEventsBinaryModeAddsTheAttributeHeaders) {
  config_.record_format = RecordFormat::kCloudEventsBinary;
  config_.cloudevents_source = "/billing/payments";
  RecordBuilder b(config_);
  b.Build(event_, position_);
  EXPECT_EQ(b.value(), event_.value) << "binary mode: the payload is the value";
  EXPECT_EQ(Of(b), (Headers{{"event_id", std::string(event_.event_id)},
                            {"event_type", "PaymentMade"},
                            {"aggregate_type", "payment"},
                            {"tenant", "t1"},
                            {"ce_specversion", "1.0"},
                            {"ce_id", std::string(event_.event_id)},
                            {"ce_source", "/billing/payments"},
                            {"ce_type", "PaymentMade"},
                            {"ce_time", "2025-12-05T10:44:28.123456Z"},
                            {"content-type", "application/json"},
                            {"walrelay.position", position_text_}}));
  // Without a known commit time (poll mode, re-drive) there is no ce_time; the default
  // source names the slot.
  config_.cloudevents_source.clear();
  position_.commit_time_us = 0;
  RecordBuilder defaults(config_);
  defaults.Build(event_, position_);
  for (const auto& [name, value] : Of(defaults)) EXPECT_NE(name, "ce_time");
  EXPECT_EQ(defaults.headers()[6].value, "/walrelay/walrelay");
}

TEST_F(RecordBuilderTest, CloudEventsStructuredModeIsOneJsonDocument) {
  config_.record_format = RecordFormat::kCloudEventsStructured;
  config_.cloudevents_source = "/billing/payments";
  RecordBuilder b(config_);
  b.Build(event_, position_);
  EXPECT_EQ(b.value(),
            R"({"specversion":"1.0","id":"0190a1b2-0000-7000-8000-000000000001",)"
            R"("source":"/billing/payments","type":"PaymentMade",)"
            R"("time":"2025-12-05T10:44:28.123456Z","datacontenttype":"application/json",)"
            R"("data":{"amount": 12}})");
  const Headers h = Of(b);
  ASSERT_EQ(h.size(), 6u);
  EXPECT_EQ(h[4], (std::pair<std::string, std::string>{
                      "content-type", "application/cloudevents+json; charset=UTF-8"}));
  EXPECT_EQ(h[5].first, "walrelay.position");

  // Text that is not JSON is a JSON string; a bytea payload is data_base64.
  event_.value = "not \"json\"";
  b.Build(event_, position_);
  EXPECT_NE(b.value().find(R"("datacontenttype":"text/plain","data":"not \"json\""})"),
            std::string_view::npos)
      << b.value();
  const std::string bytes("\x00\xff\x10", 3);
  event_.value = bytes;
  event_.value_is_bytes = true;
  b.Build(event_, position_);
  EXPECT_NE(b.value().find(R"("datacontenttype":"application/octet-stream","data_base64":"AP8Q"})"),
            std::string_view::npos)
      << b.value();
}

TEST(Rfc3339Test, MicrosecondsInUtc) {
  std::string out;
  FormatRfc3339Micros(0, &out);
  EXPECT_EQ(out, "1970-01-01T00:00:00.000000Z");
  FormatRfc3339Micros(1764931468000001, &out);
  EXPECT_EQ(out, "2025-12-05T10:44:28.000001Z");
  FormatRfc3339Micros(-1, &out);
  EXPECT_EQ(out, "1969-12-31T23:59:59.999999Z");
}

}  // namespace
}  // namespace walrelay::relay
