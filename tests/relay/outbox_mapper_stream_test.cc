// OutboxMapper fed by decoded pgoutput messages, as the pipeline feeds it: which relations
// are outbox tables, configured column names, the topic template's variables, missing
// columns, ALTER TABLE between rows (a new Relation for the same OID), values that are
// not text, and every field of a table-less event's envelope. Each mapping error is the
// dead-letter reason, so the tests check that it names what is wrong.
#include <gtest/gtest.h>

#include <deque>
#include <string>
#include <vector>

#include "decoder/pgoutput.h"
#include "src/relay/core/outbox_mapper.h"
#include "tests/decoder/wire_builder.h"

namespace walrelay::relay {
namespace {

namespace wire = pgoutput::testing::wire;
using pgoutput::testing::Null;
using pgoutput::testing::RelCol;
using pgoutput::testing::Text;

constexpr uint32_t kOid = 16400;

// Decodes wire bytes kept alive for the test's duration (the messages view them).
class Stream {
 public:
  template <typename T>
  const T& Decode(std::string bytes) {
    bytes_.push_back(std::move(bytes));
    Result<pgoutput::Message> m = pgoutput::Decode(bytes_.back(), pgoutput::DecodeOptions{});
    EXPECT_TRUE(m.ok()) << m.status().message();
    messages_.push_back(std::move(*m));
    return std::get<T>(messages_.back());
  }

 private:
  std::deque<std::string> bytes_;
  std::deque<pgoutput::Message> messages_;
};

std::vector<RelCol> Columns(std::initializer_list<std::string> names) {
  std::vector<RelCol> cols;
  for (const std::string& n : names) cols.push_back({0, n, n == "payload" ? 3802u : 25u, -1});
  return cols;
}

TEST(OutboxMapperStreamTest, OnlyConfiguredTablesAreOutboxesByOidOrByName) {
  RelayConfig config;
  config.tables = {"public.outbox", "billing.\"Outbox\""};
  Stream s;
  const auto cols = Columns({"event_id", "aggregate_id", "event_type", "payload"});
  const auto& outbox = s.Decode<pgoutput::Relation>(wire::Relation({}, 1, "public", "outbox", 'd', cols));
  const auto& quoted = s.Decode<pgoutput::Relation>(wire::Relation({}, 2, "billing", "Outbox", 'd', cols));
  const auto& folded = s.Decode<pgoutput::Relation>(wire::Relation({}, 3, "billing", "outbox", 'd', cols));
  const auto& other = s.Decode<pgoutput::Relation>(wire::Relation({}, 4, "public", "orders", 'd', cols));

  OutboxMapper by_name(config);
  for (const auto* r : {&outbox, &quoted, &folded, &other}) by_name.OnRelation(*r);
  EXPECT_TRUE(by_name.IsOutbox(1));
  EXPECT_TRUE(by_name.IsOutbox(2));   // the quoted name keeps its case
  EXPECT_FALSE(by_name.IsOutbox(3));  // billing.outbox is another table
  EXPECT_FALSE(by_name.IsOutbox(4));
  EXPECT_FALSE(by_name.IsOutbox(99));  // never described
  EXPECT_EQ(by_name.TableName(2), "billing.Outbox");

  // Matched by OID, a table renamed to the configured name is still not the outbox, and
  // the outbox keeps being one under another name (a partition root published via root).
  OutboxMapper by_oid(config, {{3, "public", "outbox"}}, /*match_by_oid=*/true);
  for (const auto* r : {&outbox, &quoted, &folded, &other}) by_oid.OnRelation(*r);
  EXPECT_FALSE(by_oid.IsOutbox(1));
  EXPECT_TRUE(by_oid.IsOutbox(3));
}

TEST(OutboxMapperStreamTest, ConfiguredColumnNamesInAnyOrder) {
  RelayConfig config;
  config.columns.event_id = "id";
  config.columns.aggregate_id = "order_id";
  config.columns.aggregate_type = "kind";
  config.columns.event_type = "type";
  config.columns.payload = "body";
  config.columns.topic = "";    // no topic column: the template decides
  config.columns.headers = "";  // no headers column
  config.topic_template = "${table}.${aggregate_type}.${event_type}";
  Stream s;
  const auto& rel = s.Decode<pgoutput::Relation>(wire::Relation(
      {}, kOid, "public", "outbox", 'd',
      {{0, "body", 3802, -1}, {0, "topic", 25, -1}, {0, "type", 25, -1}, {0, "kind", 25, -1},
       {0, "order_id", 25, -1}, {1, "id", 2950, -1}}));
  const auto& ins = s.Decode<pgoutput::Insert>(wire::Insert(
      {}, kOid,
      {Text(R"({"total": 5})"), Text("ignored-topic"), Text("OrderPlaced"), Text("order"),
       Text("o-17"), Text("0190b1c2-0000-7000-8000-000000000001")}));
  OutboxMapper mapper(config);
  mapper.OnRelation(rel);
  OutboxEvent e;
  ASSERT_TRUE(mapper.MapInsert(ins, &e).ok());
  EXPECT_EQ(e.event_id, "0190b1c2-0000-7000-8000-000000000001");
  EXPECT_EQ(e.key, "o-17");
  EXPECT_EQ(e.aggregate_type, "order");
  EXPECT_EQ(e.event_type, "OrderPlaced");
  EXPECT_EQ(e.value, R"({"total": 5})");
  // A column called "topic" is not the topic column once topic is mapped to nothing.
  EXPECT_EQ(e.topic, "public.outbox.order.OrderPlaced");
  EXPECT_TRUE(e.extra_headers.empty());
}

TEST(OutboxMapperStreamTest, TopicColumnWinsAndTheTemplateNamesAnEmptyVariable) {
  RelayConfig config;
  config.topic_template = "events.${aggregate_type}.${unknown}";
  Stream s;
  const auto& rel = s.Decode<pgoutput::Relation>(wire::OutboxRelation(kOid));
  auto insert = [&](pgoutput::testing::Col aggregate_type, pgoutput::testing::Col topic) {
    return &s.Decode<pgoutput::Insert>(wire::Insert(
        {}, kOid,
        {Text("1"), Text("e-1"), aggregate_type, Text("a-1"), topic, Text("Created"),
         Text("{}"), Null(), Text("2026-12-04 00:00:00+00")}));
  };
  OutboxMapper mapper(config);
  mapper.OnRelation(rel);
  OutboxEvent e;
  ASSERT_TRUE(mapper.MapInsert(*insert(Text("order"), Text("payments.v1")), &e).ok());
  EXPECT_EQ(e.topic, "payments.v1");
  // An unknown placeholder stays as written: '$', '{' and '}' make it an invalid topic
  // name, refused with the name shown (dead-lettered, never published to a mangled topic).
  Status st = mapper.MapInsert(*insert(Text("order"), Null()), &e);
  ASSERT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("'events.order.${unknown}'"), std::string::npos) << st.message();

  // The mapper reads the template when it is made.
  config.topic_template = "events.${aggregate_type}";
  OutboxMapper events(config);
  events.OnRelation(rel);
  ASSERT_TRUE(events.MapInsert(*insert(Text("order"), Null()), &e).ok());
  EXPECT_EQ(e.topic, "events.order");
  st = events.MapInsert(*insert(Null(), Null()), &e);
  ASSERT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("${aggregate_type}"), std::string::npos) << st.message();
  st = events.MapInsert(*insert(Text("order/x"), Null()), &e);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << "a topic name with '/'";
}

TEST(OutboxMapperStreamTest, MissingRequiredColumnsMakeEveryRowUnmappable) {
  RelayConfig config;
  Stream s;
  // No payload column; the optional ones (aggregate_type, topic, headers) absent too.
  const auto& rel = s.Decode<pgoutput::Relation>(wire::Relation(
      {}, kOid, "public", "outbox", 'd', Columns({"event_id", "aggregate_id", "event_type"})));
  const auto& ins = s.Decode<pgoutput::Insert>(
      wire::Insert({}, kOid, {Text("e-1"), Text("a-1"), Text("Created")}));
  OutboxMapper mapper(config);
  mapper.OnRelation(rel);
  OutboxEvent e;
  Status st = mapper.MapInsert(ins, &e);
  ASSERT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("public.outbox has no column payload"), std::string::npos)
      << st.message();
  // The dead letter keeps the whole row under its column names.
  EXPECT_EQ(mapper.RowAsJson(ins), R"({"event_id":"e-1","aggregate_id":"a-1","event_type":"Created"})");

  // Required columns NULL: the first one is named; optional ones may be NULL.
  const auto& rel2 = s.Decode<pgoutput::Relation>(wire::Relation(
      {}, kOid, "public", "outbox", 'd',
      Columns({"event_id", "aggregate_id", "event_type", "payload", "aggregate_type"})));
  mapper.OnRelation(rel2);
  for (int null_at = 0; null_at < 4; ++null_at) {
    std::vector<pgoutput::testing::Col> cols = {Text("e-1"), Text("a-1"), Text("Created"),
                                                Text("{}"), Text("order")};
    cols[null_at] = Null();
    st = mapper.MapInsert(s.Decode<pgoutput::Insert>(wire::Insert({}, kOid, cols)), &e);
    ASSERT_EQ(st.code(), StatusCode::kInvalidArgument) << null_at;
    EXPECT_NE(st.message().find("column " + std::string(rel2.columns[null_at].name) + " is NULL"),
              std::string::npos)
        << st.message();
  }
  // An Insert before any Relation for its table is a protocol error, not a dead letter.
  OutboxMapper fresh(config);
  EXPECT_EQ(fresh.MapInsert(ins, &e).code(), StatusCode::kDataLoss);
}

TEST(OutboxMapperStreamTest, AlterTableBetweenRowsUsesTheNewColumnPositions) {
  RelayConfig config;
  Stream s;
  OutboxMapper mapper(config);
  OutboxEvent e;
  mapper.OnRelation(s.Decode<pgoutput::Relation>(wire::Relation(
      {}, kOid, "public", "outbox", 'd',
      Columns({"event_id", "aggregate_type", "aggregate_id", "event_type", "payload"}))));
  ASSERT_TRUE(mapper
                  .MapInsert(s.Decode<pgoutput::Insert>(wire::Insert(
                                 {}, kOid, {Text("e-1"), Text("order"), Text("a-1"),
                                            Text("Created"), Text("{\"v\":1}")})),
                             &e)
                  .ok());
  EXPECT_EQ(e.value, "{\"v\":1}");
  EXPECT_EQ(e.topic, "outbox.order");

  // ALTER TABLE DROP COLUMN aggregate_type, ADD COLUMN topic, ADD COLUMN headers: the
  // server re-sends the Relation; the next row is mapped by the new positions.
  mapper.OnRelation(s.Decode<pgoutput::Relation>(wire::Relation(
      {}, kOid, "public", "outbox", 'd',
      Columns({"event_id", "aggregate_id", "event_type", "payload", "topic", "headers"}))));
  ASSERT_TRUE(mapper
                  .MapInsert(s.Decode<pgoutput::Insert>(wire::Insert(
                                 {}, kOid, {Text("e-2"), Text("a-1"), Text("Shipped"),
                                            Text("{\"v\":2}"), Text("orders.v2"),
                                            Text(R"({"trace": "t-9"})")})),
                             &e)
                  .ok());
  EXPECT_EQ(e.event_id, "e-2");
  EXPECT_EQ(e.event_type, "Shipped");
  EXPECT_EQ(e.aggregate_type, "");
  EXPECT_EQ(e.topic, "orders.v2");
  ASSERT_EQ(e.extra_headers.size(), 1u);
  EXPECT_EQ(e.extra_headers[0].second, "t-9");

  // A row shorter than its Relation (a decoder or server mismatch) names the column.
  Status st = mapper.MapInsert(
      s.Decode<pgoutput::Insert>(wire::Insert({}, kOid, {Text("e-3"), Text("a-1")})), &e);
  ASSERT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("row of public.outbox has 2 columns, expected column"), std::string::npos)
      << st.message();

  // Renaming payload away makes the table unmappable until it comes back.
  mapper.OnRelation(s.Decode<pgoutput::Relation>(wire::Relation(
      {}, kOid, "public", "outbox", 'd', Columns({"event_id", "aggregate_id", "event_type", "body"}))));
  EXPECT_EQ(mapper
                .MapInsert(s.Decode<pgoutput::Insert>(wire::Insert(
                               {}, kOid, {Text("e-4"), Text("a-1"), Text("X"), Text("{}")})),
                           &e)
                .code(),
            StatusCode::kInvalidArgument);
}

TEST(OutboxMapperStreamTest, ValuesThatAreNotTextAreRefusedWithTheReason) {
  RelayConfig config;
  Stream s;
  OutboxMapper mapper(config);
  OutboxEvent e;
  mapper.OnRelation(s.Decode<pgoutput::Relation>(wire::Relation(
      {}, kOid, "public", "outbox", 'd',
      Columns({"event_id", "aggregate_type", "aggregate_id", "event_type", "payload"}))));
  Status st = mapper.MapInsert(
      s.Decode<pgoutput::Insert>(wire::Insert(
          {}, kOid,
          {Text("e-1"), Text("order"), Text("a-1"), Text("X"), pgoutput::testing::Binary("\x01")})),
      &e);
  ASSERT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("binary format"), std::string::npos) << st.message();
  st = mapper.MapInsert(s.Decode<pgoutput::Insert>(wire::Insert(
                            {}, kOid,
                            {Text("e-1"), Text("order"), Text("a-1"), Text("X"),
                             pgoutput::testing::Toast()})),
                        &e);
  ASSERT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("unchanged TOAST"), std::string::npos) << st.message();
}

TEST(OutboxMapperStreamTest, EnvelopeOfATableLessEventFieldByField) {
  RelayConfig config;
  config.message_prefix = "outbox";
  Stream s;
  OutboxMapper mapper(config);
  OutboxEvent e;
  auto message = [&](std::string_view prefix, std::string_view content, uint8_t flags = 1) {
    return &s.Decode<pgoutput::LogicalMessage>(wire::Message({}, flags, 0x1000, prefix, content));
  };
  EXPECT_FALSE(mapper.IsOutboxMessage(*message("outbox2", "{}")));
  EXPECT_FALSE(mapper.IsOutboxMessage(*message("", "{}")));
  const auto* full = message("outbox", R"({
      "event_id": "e-1", "aggregate_type": "payment", "aggregate_id": "p-1",
      "event_type": "PaymentCaptured", "topic": "payments",
      "payload": {"amount": "10.00", "tags": [1, 2]},
      "headers": {"trace": "t", "attempt": 2, "replay": false, "none": null},
      "unknown_field": "ignored"})");
  ASSERT_TRUE(mapper.IsOutboxMessage(*full));
  ASSERT_TRUE(mapper.MapMessage(*full, &e).ok());
  EXPECT_EQ(e.event_id, "e-1");
  EXPECT_EQ(e.aggregate_type, "payment");
  EXPECT_EQ(e.key, "p-1");
  EXPECT_EQ(e.event_type, "PaymentCaptured");
  EXPECT_EQ(e.topic, "payments");
  EXPECT_EQ(e.value, R"({"amount":"10.00","tags":[1,2]})");  // the payload's JSON, minified
  ASSERT_EQ(e.extra_headers.size(), 4u);
  EXPECT_EQ(e.extra_headers[1], std::make_pair(std::string_view("attempt"), std::string_view("2")));
  EXPECT_EQ(e.extra_headers[2].second, "false");
  EXPECT_EQ(e.extra_headers[3].second, "");

  // No topic: the template with the envelope's aggregate_type; a string payload stays a
  // JSON string.
  ASSERT_TRUE(mapper
                  .MapMessage(*message("outbox", R"({"event_id": "e-2", "aggregate_type": "payment",
                      "aggregate_id": "p-1", "event_type": "X", "payload": "plain"})"),
                              &e)
                  .ok());
  EXPECT_EQ(e.topic, "outbox.payment");
  EXPECT_EQ(e.value, R"("plain")");

  // Each way an envelope is refused, with its reason.
  const std::vector<std::pair<std::string, std::string>> refused = {
      {R"({"aggregate_id": "p", "event_type": "X", "payload": {}})", "envelope has no event_id"},
      {R"({"event_id": "e", "event_type": "X", "payload": {}})", "envelope has no aggregate_id"},
      {R"({"event_id": "e", "aggregate_id": null, "event_type": "X", "payload": {}})",
       "envelope has no aggregate_id"},
      {R"({"event_id": "e", "aggregate_id": "p", "payload": {}})", "envelope has no event_type"},
      {R"({"event_id": "e", "aggregate_id": "p", "event_type": "X", "topic": "t"})",
       "envelope has no payload"},
      {R"({"event_id": 7, "aggregate_id": "p", "event_type": "X", "payload": {}})",
       "envelope field event_id must be a string"},
      {R"({"event_id": "e", "aggregate_id": "", "event_type": "X", "topic": "t", "payload": 1})",
       "aggregate_id is empty"},
      {R"({"event_id": "e", "aggregate_id": "p", "event_type": "X", "topic": "t", "payload": 1,
           "headers": ["a"]})",
       "headers must be a JSON object"},
      {R"({"event_id": "e", "aggregate_id": "p", "event_type": "X", "topic": "t", "payload": 1,
           "headers": {"h": {"nested": 1}}})",
       "header h must be a string"},
      {R"({"event_id": "e", "aggregate_id": "p", "event_type": "X", "payload": 1})",
       "${aggregate_type}"},
      {R"(["not", "an", "object"])", "envelope is not a JSON object"},
      {R"({"event_id": "e",)", "envelope is not valid JSON"},
  };
  for (const auto& [content, reason] : refused) {
    Status st = mapper.MapMessage(*message("outbox", content), &e);
    ASSERT_EQ(st.code(), StatusCode::kInvalidArgument) << content;
    EXPECT_NE(st.message().find(reason), std::string::npos) << content << ": " << st.message();
  }
  // A non-transactional message is not atomic with the business write: refused.
  Status st = mapper.MapMessage(*message("outbox", R"({"event_id": "e"})", /*flags=*/0), &e);
  ASSERT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("non-transactional"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace walrelay::relay
