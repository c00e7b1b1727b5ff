// walrelay's Debezium profile against records Debezium itself wrote (issue 29): the
// fixtures in testdata/debezium-3.6.1/ are records Debezium 3.6.1.Final's PostgreSQL
// connector and Outbox Event Router published through Kafka Connect 4.1.1
// (bench/debezium/compare.sh, as read by Kafka's Java console consumer:
// CreateTime:<ms>\tPartition:<p>\t<headers>\t<key>\t<value>). For each record the mapper,
// given the row those bytes came from (its aggregate id and the payload's jsonb text,
// recovered from the record), must write the same key and value bytes:
//   a.records  Kafka's default converters: JsonConverter with schemas.enable=true
//              (outbox.key_format / value_format connect-json)
//   b.records  StringConverter keys, schemaless JsonConverter values (raw / json-string)
//   c.pairs    table.expand.json.payload=true with schemaless JSON values: the payload's
//              jsonb text and the value Debezium wrote (outbox.value_format json-compact)
// The partition follows the key bytes (ProducerTest.KeysArePartitionedLikeTheJavaClient).
#include <gtest/gtest.h>
#include <simdjson.h>

#include <fstream>
#include <string>
#include <vector>

#include "src/relay/core/outbox_mapper.h"

namespace walrelay::relay {
namespace {

struct DebeziumRecord {
  std::string key, value;
};

std::vector<DebeziumRecord> Load(const std::string& name) {
  std::ifstream in(std::string(WALRELAY_SOURCE_DIR) + "/tests/relay/testdata/debezium-3.6.1/" +
                   name);
  EXPECT_TRUE(in) << name;
  std::vector<DebeziumRecord> out;
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> parts;
    size_t from = 0;
    for (int i = 0; i < 4; ++i) {
      const size_t tab = line.find('\t', from);
      parts.push_back(line.substr(from, tab - from));
      from = tab + 1;
    }
    out.push_back({parts[3], line.substr(from)});
  }
  return out;
}

// The string a JSON text is (a JSON string literal, or an envelope's "payload" string).
std::string StringOf(const std::string& json, bool envelope) {
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.parse(json);
  std::string_view s = envelope ? std::string_view(doc["payload"]) : std::string_view(doc);
  return std::string(s);
}

void ExpectSameBytes(const std::string& fixture, TextFormat key_format, TextFormat value_format) {
  RelayConfig config;
  ASSERT_TRUE(ApplyOutboxProfile("debezium", &config).ok());
  config.key_format = key_format;
  config.value_format = value_format;
  OutboxMapper mapper(config);
  const std::vector<DebeziumRecord> records = Load(fixture);
  ASSERT_EQ(records.size(), 5u);
  for (const DebeziumRecord& r : records) {
    const std::string aggregate_id = key_format == TextFormat::kRaw
                                         ? r.key
                                         : StringOf(r.key, key_format == TextFormat::kConnectJson);
    const std::string payload = StringOf(r.value, value_format == TextFormat::kConnectJson);
    OutboxRow row;
    row.event_id = "21dea43b-7798-4f8d-b7d9-ef00237bb9e1";
    row.aggregate_type = "payment";
    row.aggregate_id = aggregate_id;
    row.event_type = "PaymentCaptured";
    row.payload = payload;
    OutboxEvent event;
    const Status st = mapper.MapRow("public.outbox", row, &event);
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(event.key, r.key);
    EXPECT_EQ(event.value, r.value);
  }
}

TEST(DebeziumRecordsTest, KafkaDefaultConvertersSchemaEnvelopesAreTheSameBytes) {
  ExpectSameBytes("a.records", TextFormat::kConnectJson, TextFormat::kConnectJson);
}

TEST(DebeziumRecordsTest, StringKeysAndSchemalessJsonValuesAreTheSameBytes) {
  ExpectSameBytes("b.records", TextFormat::kRaw, TextFormat::kJsonString);
}

TEST(DebeziumRecordsTest, ExpandedJsonPayloadIsTheCompactJsonText) {
  RelayConfig config;
  ASSERT_TRUE(ApplyOutboxProfile("debezium", &config).ok());
  config.value_format = TextFormat::kCompactJson;
  OutboxMapper mapper(config);
  std::ifstream in(std::string(WALRELAY_SOURCE_DIR) +
                   "/tests/relay/testdata/debezium-3.6.1/c.pairs");
  ASSERT_TRUE(in);
  int checked = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    const size_t tab = line.find('\t');
    const std::string jsonb = line.substr(0, tab), debezium = line.substr(tab + 1);
    OutboxRow row;
    row.event_id = "21dea43b-7798-4f8d-b7d9-ef00237bb9e1";
    row.aggregate_type = "payment";
    row.aggregate_id = "agg-1";
    row.event_type = "PaymentCaptured";
    row.payload = jsonb;
    OutboxEvent event;
    ASSERT_TRUE(mapper.MapRow("public.outbox", row, &event).ok());
    EXPECT_EQ(event.value, debezium);
    ++checked;
  }
  EXPECT_EQ(checked, 5);
}

}  // namespace
}  // namespace walrelay::relay
