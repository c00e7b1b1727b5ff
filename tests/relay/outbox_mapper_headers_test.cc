// What a writer of the outbox may choose, and what not: the header names the relay writes
// itself cannot be written again from the headers column or a table-less envelope (issue
// 10 item 9), and the topic must be one of outbox.allowed_topics when that is set (issue 13).
#include <gtest/gtest.h>

#include <string>

#include "src/relay/core/outbox_mapper.h"

namespace walrelay::relay {
namespace {

OutboxRow Row(std::string_view headers) {
  OutboxRow row;
  row.event_id = "e-1";
  row.aggregate_type = "payment";
  row.aggregate_id = "a";
  row.event_type = "PaymentCaptured";
  row.payload = "{}";
  row.headers = headers;
  return row;
}

TEST(OutboxMapperHeadersTest, ReservedNamesFromTheHeadersColumnAreRefused) {
  RelayConfig config;
  OutboxMapper mapper(config);
  OutboxEvent event;
  for (const char* headers :
       {R"({"event_id": "spoofed"})", R"({"event_type": "X"})", R"({"aggregate_type": "X"})",
        R"({"walrelay.position": "0/0"})", R"({"walrelay.anything": "x"})",
        R"({"trace": "t", "Event_ID": "spoofed"})"}) {
    Status st = mapper.MapRow("public.outbox", Row(headers), &event);
    ASSERT_EQ(st.code(), StatusCode::kInvalidArgument) << headers;
    EXPECT_NE(st.message().find("reserved"), std::string::npos) << st.message();
  }
  ASSERT_TRUE(
      mapper.MapRow("public.outbox", Row(R"({"trace_id": "t", "event": "ok"})"), &event).ok());
  ASSERT_EQ(event.extra_headers.size(), 2u);
  EXPECT_EQ(event.extra_headers[0].first, "trace_id");
}

// Renamed headers (outbox.headers) are reserved under their configured names; a name the
// relay no longer writes is an ordinary header again.
TEST(OutboxMapperHeadersTest, ConfiguredHeaderNamesAreReserved) {
  RelayConfig config;
  config.header_names = {"id", "", "", "walrelay.position"};
  OutboxMapper mapper(config);
  OutboxEvent event;
  for (const char* headers : {R"({"id": "spoofed"})", R"({"Id": "spoofed"})",
                              R"({"walrelay.position": "0/0"})"}) {
    Status st = mapper.MapRow("public.outbox", Row(headers), &event);
    ASSERT_EQ(st.code(), StatusCode::kInvalidArgument) << headers;
    EXPECT_NE(st.message().find("reserved"), std::string::npos) << st.message();
  }
  ASSERT_TRUE(mapper.MapRow("public.outbox", Row(R"({"event_id": "x", "event_type": "y"})"),
                            &event)
                  .ok());
  EXPECT_EQ(event.extra_headers.size(), 2u);
}

// With a CloudEvents outbox.format the binding's headers (ce_*, content-type) are the
// relay's: a row carrying one is refused, so a record never has two ce_id; with walrelay's
// format they are ordinary headers.
TEST(OutboxMapperHeadersTest, CloudEventsHeadersAreReservedWithACloudEventsFormat) {
  RelayConfig config;
  config.record_format = RecordFormat::kCloudEventsBinary;
  OutboxMapper mapper(config);
  OutboxEvent event;
  for (const char* headers : {R"({"ce_id": "spoofed"})", R"({"CE_Type": "X"})",
                              R"({"ce_anything": "x"})", R"({"Content-Type": "text/plain"})"}) {
    Status st = mapper.MapRow("public.outbox", Row(headers), &event);
    ASSERT_EQ(st.code(), StatusCode::kInvalidArgument) << headers;
    EXPECT_NE(st.message().find("reserved"), std::string::npos) << st.message();
  }
  RelayConfig plain;
  OutboxMapper plain_mapper(plain);
  ASSERT_TRUE(
      plain_mapper.MapRow("public.outbox", Row(R"({"ce_id": "x", "content-type": "y"})"), &event)
          .ok());
  EXPECT_EQ(event.extra_headers.size(), 2u);
}

TEST(OutboxMapperHeadersTest, ReservedNamesFromAnEnvelopeAreRefused) {
  RelayConfig config;
  config.message_prefix = std::string(kDefaultMessagePrefix);
  OutboxMapper mapper(config);
  OutboxEvent event;
  pgoutput::LogicalMessage message;
  message.flags = pgoutput::LogicalMessage::kFlagTransactional;
  message.prefix = config.message_prefix;
  const std::string content =
      R"({"event_id": "e-1", "aggregate_type": "payment", "aggregate_id": "a",)"
      R"( "event_type": "T", "payload": {}, "headers": {"event_id": "spoofed"}})";
  message.content = content;
  Status st = mapper.MapMessage(message, &event);
  ASSERT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("event_id"), std::string::npos) << st.message();
}

// outbox.allowed_topics: exact names and '*' prefixes; anything else is unmappable
// (kInvalidArgument: dead-lettered with the reason), from a row's topic column, the topic
// template, or a table-less envelope alike.
TEST(OutboxMapperHeadersTest, TopicsOutsideTheAllowedListAreRefused) {
  RelayConfig config;
  config.allowed_topics = {"outbox.payment", "billing.*"};
  config.message_prefix = std::string(kDefaultMessagePrefix);
  EXPECT_EQ(config.Validate().message().find("allowed_topics"), std::string::npos)
      << config.Validate().ToString();
  OutboxMapper mapper(config);
  OutboxEvent event;
  ASSERT_TRUE(mapper.MapRow("public.outbox", Row("{}"), &event).ok());  // outbox.payment
  EXPECT_EQ(event.topic, "outbox.payment");
  OutboxRow row = Row("{}");
  row.topic = "billing.invoices";
  ASSERT_TRUE(mapper.MapRow("public.outbox", row, &event).ok());
  for (const char* topic : {"payroll", "outbox.payment.x", "billing", "outbox.paymen"}) {
    row.topic = topic;
    Status st = mapper.MapRow("public.outbox", row, &event);
    ASSERT_EQ(st.code(), StatusCode::kInvalidArgument) << topic;
    EXPECT_NE(st.message().find("is not in outbox.allowed_topics"), std::string::npos)
        << st.message();
  }
  pgoutput::LogicalMessage message;
  message.flags = pgoutput::LogicalMessage::kFlagTransactional;
  message.prefix = config.message_prefix;
  const std::string content =
      R"({"event_id": "e-1", "aggregate_id": "a", "topic": "payroll", "event_type": "T",)"
      R"( "payload": {}})";
  message.content = content;
  EXPECT_EQ(mapper.MapMessage(message, &event).code(), StatusCode::kInvalidArgument);

  for (const char* bad : {"*", "pay*ments", "bad topic", ""}) {
    RelayConfig c;
    c.allowed_topics = {bad};
    EXPECT_NE(c.Validate().message().find("outbox.allowed_topics: '"), std::string::npos) << bad;
  }
}

// The topic checks are made once per new topic name (the mapper remembers the last name that
// passed): whatever the order, a refused name stays refused, an invalid name is never
// accepted after a valid one, and an accepted name is accepted again after a refusal.
TEST(OutboxMapperHeadersTest, TopicChecksHoldInAnyOrderOfEvents) {
  RelayConfig config;
  config.allowed_topics = {"outbox.payment", "billing.*"};
  OutboxMapper mapper(config);
  OutboxEvent event;
  OutboxRow row = Row("{}");
  const struct {
    const char* topic;
    bool ok;
  } sequence[] = {{"billing.a", true},  {"billing.a", true},   {"payroll", false},
                  {"payroll", false},   {"billing.a", true},   {"bad topic", false},
                  {"billing.a", true},  {"billing.b", true},   {"billing.b", true},
                  {"outbox.payment", true}, {"billing", false}, {"outbox.payment", true}};
  for (const auto& [topic, ok] : sequence) {
    row.topic = topic;
    const Status st = mapper.MapRow("public.outbox", row, &event);
    EXPECT_EQ(st.ok(), ok) << topic << ": " << st.ToString();
    if (ok) {
      EXPECT_EQ(event.topic, topic);
    }
  }
  // From the template too: an aggregate_type that makes an invalid name after a valid one.
  RelayConfig open_config;
  open_config.topic_template = "outbox.${aggregate_type}";
  OutboxMapper open_mapper(open_config);
  for (const auto& [type, ok] : {std::pair{"payment", true}, std::pair{"pay ment", false},
                                 std::pair{"payment", true}, std::pair{"pay/ment", false}}) {
    OutboxRow r = Row("{}");
    r.aggregate_type = type;
    EXPECT_EQ(open_mapper.MapRow("public.outbox", r, &event).ok(), ok) << type;
  }
}

}  // namespace
}  // namespace walrelay::relay
