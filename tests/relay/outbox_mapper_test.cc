// OutboxMapper's value and key forms: a bytea payload is published as its bytes (Avro,
// Protobuf outboxes), and key_format / value_format json-string write the JSON string
// literal Kafka Connect's JsonConverter writes (a Debezium user's consumers may parse it).
#include <gtest/gtest.h>

#include <string>

#include "src/relay/core/outbox_mapper.h"

namespace walrelay::relay {
namespace {

OutboxRow Row(std::string_view aggregate_id, std::string_view payload) {
  OutboxRow row;
  row.event_id = "e-1";
  row.aggregate_type = "order";
  row.aggregate_id = aggregate_id;
  row.event_type = "OrderCreated";
  row.payload = payload;
  return row;
}

TEST(OutboxMapperTest, ByteaPayloadIsPublishedAsItsBytes) {
  RelayConfig config;
  OutboxMapper mapper(config);
  OutboxEvent event;
  OutboxRow row = Row("a-1", "\\x0001ff");
  row.payload_is_bytea = true;
  ASSERT_TRUE(mapper.MapRow("public.outbox", row, &event).ok());
  EXPECT_EQ(event.value, std::string_view("\x00\x01\xff", 3));

  // The text form of a text column is never decoded, even when it looks like hex.
  row.payload_is_bytea = false;
  ASSERT_TRUE(mapper.MapRow("public.outbox", row, &event).ok());
  EXPECT_EQ(event.value, "\\x0001ff");

  // Text that is not bytea's: unmappable (dead-lettered with the reason), not published.
  row = Row("a-1", "\\x0g");
  row.payload_is_bytea = true;
  Status st = mapper.MapRow("public.outbox", row, &event);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("column payload"), std::string::npos) << st.message();
}

TEST(OutboxMapperTest, JsonStringFormatsQuoteKeyAndTextValue) {
  RelayConfig config;
  config.key_format = TextFormat::kJsonString;
  config.value_format = TextFormat::kJsonString;
  OutboxMapper mapper(config);
  OutboxEvent event;
  ASSERT_TRUE(mapper.MapRow("public.outbox", Row("1", R"({"id": 1, "note": "a\"b"})"), &event)
                  .ok());
  EXPECT_EQ(event.key, R"("1")");
  EXPECT_EQ(event.value, R"("{\"id\": 1, \"note\": \"a\\\"b\"}")");
  // The topic uses the aggregate type as it is, and the key check sees the raw text.
  EXPECT_EQ(event.topic, "outbox.order");
  EXPECT_EQ(mapper.MapRow("public.outbox", Row("", "{}"), &event).code(),
            StatusCode::kInvalidArgument);

  // A bytea value stays bytes under value_format json-string.
  OutboxRow row = Row("1", "\\x41");
  row.payload_is_bytea = true;
  ASSERT_TRUE(mapper.MapRow("public.outbox", row, &event).ok());
  EXPECT_EQ(event.value, "A");
  EXPECT_EQ(event.key, R"("1")");
}

}  // namespace
}  // namespace walrelay::relay
