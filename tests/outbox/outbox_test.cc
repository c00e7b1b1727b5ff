// The producer helper against a real PostgreSQL 15 (TestCluster): Append in the caller's
// transaction (rollback leaves nothing, commit leaves the row), header escaping, remapped
// columns, and AppendMessage read back from a test_decoding slot and mapped by the relay's
// own OutboxMapper (so the envelope is exactly what `walrelay run` expects).
#include "src/outbox/outbox.h"

#include <gtest/gtest.h>
#include <libpq-fe.h>

#include <map>
#include <memory>
#include <string>

#include "src/relay/core/outbox_mapper.h"
#include "src/relay/core/schema.h"
#include "tests/support/pg_cluster.h"

namespace walrelay::outbox {
namespace {

using testing::TestCluster;

struct ConnCloser {
  void operator()(PGconn* c) const { PQfinish(c); }
};
using ConnPtr = std::unique_ptr<PGconn, ConnCloser>;

class OutboxTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto c = TestCluster::Start();
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    cluster_ = std::move(c).value().release();
    ASSERT_TRUE(cluster_->Exec(relay::OutboxTableDdl("public.outbox")).ok());
    ASSERT_TRUE(cluster_
                    ->Exec("SET client_min_messages = warning;"
                           "CREATE SCHEMA app;"
                           "CREATE TABLE app.events (seq bigint GENERATED ALWAYS AS IDENTITY, "
                           "  eid text NOT NULL, account text NOT NULL, kind text NOT NULL, "
                           "  body json NOT NULL)")
                    .ok());
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override {
    ASSERT_TRUE(cluster_->Exec("TRUNCATE public.outbox; TRUNCATE app.events").ok());
    conn_ = Connect(cluster_->conninfo());
  }

  static ConnPtr Connect(const std::string& conninfo) {
    ConnPtr c(PQconnectdb(conninfo.c_str()));
    EXPECT_EQ(PQstatus(c.get()), CONNECTION_OK) << PQerrorMessage(c.get());
    return c;
  }
  static void Run(PGconn* c, const char* sql) {
    PGresult* r = PQexec(c, sql);
    EXPECT_TRUE(PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK)
        << sql << ": " << PQresultErrorMessage(r);
    PQclear(r);
  }
  static std::string Scalar(const std::string& sql) {
    auto v = cluster_->QueryScalar(sql);
    EXPECT_TRUE(v.ok()) << sql << ": " << v.status().ToString();
    return v.ok() ? *v : "";
  }

  static OutboxEvent Payment(std::string wallet) {
    OutboxEvent e;
    e.aggregate_type = "payment";
    e.aggregate_id = std::move(wallet);
    e.event_type = "PaymentMade";
    e.payload = R"({"amount": 1200, "currency": "EUR"})";
    return e;
  }

  static TestCluster* cluster_;
  ConnPtr conn_;
};
TestCluster* OutboxTest::cluster_ = nullptr;

TEST_F(OutboxTest, RollbackLeavesNoRow) {
  Run(conn_.get(), "BEGIN");
  std::string id;
  ASSERT_TRUE(Append(conn_.get(), Payment("wallet-1"), &id).ok());
  EXPECT_EQ(id.size(), 36u);
  Run(conn_.get(), "ROLLBACK");
  EXPECT_EQ(Scalar("SELECT count(*) FROM outbox"), "0");
}

TEST_F(OutboxTest, CommitLeavesTheRowWithItsColumns) {
  Run(conn_.get(), "BEGIN");
  Run(conn_.get(), "CREATE TEMP TABLE payments (wallet text)");
  Run(conn_.get(), "INSERT INTO payments VALUES ('wallet-2')");
  OutboxEvent e = Payment("wallet-2");
  e.topic = "payments.v1";
  e.headers = {{"trace_id", "abc"}, {"tenant", "t1"}};
  std::string id;
  ASSERT_TRUE(Append(conn_.get(), e, &id).ok());
  // Nothing is visible outside the transaction before COMMIT: the helper never commits.
  EXPECT_EQ(Scalar("SELECT count(*) FROM outbox"), "0");
  Run(conn_.get(), "COMMIT");

  auto rows = cluster_->Query(
      "SELECT event_id::text, aggregate_type, aggregate_id, topic, event_type, "
      "payload->>'amount', payload->>'currency', headers->>'trace_id', headers->>'tenant', "
      "jsonb_typeof(payload), created_at IS NOT NULL FROM outbox");
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  ASSERT_EQ(rows->size(), 1u);
  const auto& r = (*rows)[0];
  EXPECT_EQ(r[0], id);
  EXPECT_EQ(r[1], "payment");
  EXPECT_EQ(r[2], "wallet-2");
  EXPECT_EQ(r[3], "payments.v1");
  EXPECT_EQ(r[4], "PaymentMade");
  EXPECT_EQ(r[5], "1200");
  EXPECT_EQ(r[6], "EUR");
  EXPECT_EQ(r[7], "abc");
  EXPECT_EQ(r[8], "t1");
  EXPECT_EQ(r[9], "object");
  EXPECT_EQ(r[10], "t");
}

// Cleanup design "same transaction" (issue 14): Append() deletes the row it inserted, in
// the caller's transaction; rows of other transactions stay. In a partitioned outbox every
// partition has a row at ctid (0,1): a DELETE by ctid alone would remove the other
// partition's row too (it did before the tableoid was part of the DELETE).
TEST_F(OutboxTest, DeleteInSameTransactionRemovesOnlyItsOwnRowEvenAcrossPartitions) {
  ASSERT_TRUE(cluster_
                  ->Exec("DROP TABLE IF EXISTS app.parted; CREATE TABLE app.parted (event_id uuid "
                         "NOT NULL, aggregate_type text, aggregate_id text NOT NULL, topic text, "
                         "event_type text NOT NULL, payload jsonb NOT NULL, headers jsonb) "
                         "PARTITION BY LIST (aggregate_type); "
                         "CREATE TABLE app.parted_a PARTITION OF app.parted FOR VALUES IN ('a'); "
                         "CREATE TABLE app.parted_b PARTITION OF app.parted FOR VALUES IN ('b'); "
                         "INSERT INTO app.parted VALUES (gen_random_uuid(), 'a', 'keep', NULL, "
                         "'E', '{}', NULL)")
                  .ok());
  OutboxTarget target;
  target.table = "app.parted";
  target.delete_in_same_transaction = true;
  const OutboxWriter writer(target);
  EXPECT_NE(writer.delete_sql().find("tableoid"), std::string::npos) << writer.delete_sql();
  OutboxEvent e = Payment("wallet-9");
  e.aggregate_type = "b";
  Run(conn_.get(), "BEGIN");
  ASSERT_TRUE(writer.Append(conn_.get(), e).ok());
  ASSERT_TRUE(writer.Append(conn_.get(), e).ok());
  Run(conn_.get(), "COMMIT");
  EXPECT_EQ(Scalar("SELECT string_agg(aggregate_id, ',') FROM app.parted"), "keep");

  // The plain outbox: empty after the commit, rows of other writers untouched.
  Run(conn_.get(), "BEGIN");
  ASSERT_TRUE(Append(conn_.get(), Payment("other-writer")).ok());
  Run(conn_.get(), "COMMIT");
  target.table = "public.outbox";
  const OutboxWriter plain(target);
  Run(conn_.get(), "BEGIN");
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(plain.Append(conn_.get(), Payment("w")).ok());
  Run(conn_.get(), "COMMIT");
  EXPECT_EQ(Scalar("SELECT string_agg(aggregate_id, ',') FROM outbox"), "other-writer");
}

TEST_F(OutboxTest, OptionalFieldsBecomeNullAndIdsAreTimeOrdered) {
  Run(conn_.get(), "BEGIN");
  OutboxEvent e = Payment("wallet-3");
  e.aggregate_type.clear();
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(Append(conn_.get(), e).ok());
  Run(conn_.get(), "COMMIT");
  EXPECT_EQ(Scalar("SELECT count(*) FROM outbox WHERE aggregate_type IS NULL AND topic IS NULL "
                   "AND headers IS NULL"),
            "50");
  // PostgreSQL's uuid ordering is bytewise: v7 ids sort in insertion order.
  EXPECT_EQ(Scalar("SELECT bool_and(ok) FROM (SELECT event_id > lag(event_id) OVER (ORDER BY id) "
                   "OR lag(event_id) OVER (ORDER BY id) IS NULL AS ok FROM outbox) s"),
            "t");
  EXPECT_EQ(Scalar("SELECT count(DISTINCT substr(event_id::text, 15, 1)) FROM outbox"), "1");
  EXPECT_EQ(Scalar("SELECT min(substr(event_id::text, 15, 1)) FROM outbox"), "7");
}

TEST_F(OutboxTest, HeaderEscapingQuotesBackslashesControlsUnicode) {
  OutboxEvent e = Payment("wallet-\"4\"");
  e.headers = {{"quote\"key", "say \"hi\""},
               {"backslash", "C:\\path\\"},
               {"newline", "a\nb\tc"},
               {"control", std::string("x\x01y")},
               {"unicode", "zürich € \xF0\x9F\x98\x80"},
               {"injection", "\", \"evil\": \"1"}};
  Run(conn_.get(), "BEGIN");
  ASSERT_TRUE(Append(conn_.get(), e).ok());
  Run(conn_.get(), "COMMIT");
  EXPECT_EQ(Scalar("SELECT headers->>'quote\"key' FROM outbox"), "say \"hi\"");
  EXPECT_EQ(Scalar("SELECT headers->>'backslash' FROM outbox"), "C:\\path\\");
  EXPECT_EQ(Scalar("SELECT headers->>'newline' FROM outbox"), "a\nb\tc");
  EXPECT_EQ(Scalar("SELECT headers->>'control' FROM outbox"), std::string("x\x01y"));
  EXPECT_EQ(Scalar("SELECT headers->>'unicode' FROM outbox"), "zürich € \xF0\x9F\x98\x80");
  EXPECT_EQ(Scalar("SELECT headers->>'injection' FROM outbox"), "\", \"evil\": \"1");
  EXPECT_EQ(Scalar("SELECT count(*) FROM outbox, jsonb_object_keys(headers)"), "6");
  EXPECT_EQ(Scalar("SELECT aggregate_id FROM outbox"), "wallet-\"4\"");
}

TEST_F(OutboxTest, SqlInjectionInValuesIsJustData) {
  OutboxEvent e = Payment("x'); DROP TABLE outbox; --");
  e.event_type = "'; DELETE FROM outbox; --";
  Run(conn_.get(), "BEGIN");
  ASSERT_TRUE(Append(conn_.get(), e).ok());
  Run(conn_.get(), "COMMIT");
  EXPECT_EQ(Scalar("SELECT aggregate_id FROM outbox"), "x'); DROP TABLE outbox; --");
  EXPECT_EQ(Scalar("SELECT event_type FROM outbox"), "'; DELETE FROM outbox; --");
}

TEST_F(OutboxTest, InvalidJsonPayloadIsInvalidArgumentAndAbortsTheTransaction) {
  OutboxEvent e = Payment("wallet-5");
  e.payload = "{not json";
  Run(conn_.get(), "BEGIN");
  Status st = Append(conn_.get(), e);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("22P02"), std::string::npos) << st.message();
  // The transaction is aborted now; the next call says so.
  st = Append(conn_.get(), Payment("wallet-5"));
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  Run(conn_.get(), "ROLLBACK");
  EXPECT_EQ(Scalar("SELECT count(*) FROM outbox"), "0");
}

TEST_F(OutboxTest, RefusesAutocommitAndMissingFields) {
  Status st = Append(conn_.get(), Payment("wallet-6"));
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  EXPECT_EQ(Scalar("SELECT count(*) FROM outbox"), "0");

  Run(conn_.get(), "BEGIN");
  OutboxEvent e = Payment("");
  EXPECT_EQ(Append(conn_.get(), e).code(), StatusCode::kInvalidArgument);
  e = Payment("w");
  e.event_type.clear();
  EXPECT_EQ(Append(conn_.get(), e).code(), StatusCode::kInvalidArgument);
  e = Payment("w");
  e.aggregate_id = std::string("a\0b", 3);
  EXPECT_EQ(Append(conn_.get(), e).code(), StatusCode::kInvalidArgument);
  e = Payment("w");
  e.event_id = "not-a-uuid";
  EXPECT_EQ(Append(conn_.get(), e).code(), StatusCode::kInvalidArgument);
  Run(conn_.get(), "ROLLBACK");
}

TEST_F(OutboxTest, CallerSuppliedEventIdIsKept) {
  OutboxEvent e = Payment("wallet-7");
  e.event_id = "0190a6d2-7c1e-7000-8000-000000000001";
  Run(conn_.get(), "BEGIN");
  std::string id;
  ASSERT_TRUE(Append(conn_.get(), e, &id).ok());
  Run(conn_.get(), "COMMIT");
  EXPECT_EQ(id, e.event_id);
  EXPECT_EQ(Scalar("SELECT event_id::text FROM outbox"), e.event_id);
}

TEST_F(OutboxTest, RemappedTableAndColumns) {
  OutboxTarget target;
  target.table = "app.events";
  target.columns.event_id = "eid";
  target.columns.aggregate_type = "";
  target.columns.aggregate_id = "account";
  target.columns.topic = "";
  target.columns.event_type = "kind";
  target.columns.payload = "body";
  target.columns.headers = "";
  OutboxWriter writer(target);
  EXPECT_EQ(writer.insert_sql(),
            "INSERT INTO \"app\".\"events\" (\"eid\", \"account\", \"kind\", \"body\") VALUES "
            "($1, $2, $3, $4)");
  OutboxEvent e = Payment("acct-1");
  e.aggregate_type.clear();
  Run(conn_.get(), "BEGIN");
  ASSERT_TRUE(writer.Append(conn_.get(), e).ok());
  e.headers = {{"h", "v"}};  // the table has no headers column: refused, not dropped
  EXPECT_EQ(writer.Append(conn_.get(), e).code(), StatusCode::kInvalidArgument);
  Run(conn_.get(), "COMMIT");
  EXPECT_EQ(Scalar("SELECT account || ' ' || kind || ' ' || (body->>'amount') FROM app.events"),
            "acct-1 PaymentMade 1200");
}

TEST_F(OutboxTest, InsertPrivilegeAloneIsEnough) {
  // The application role needs INSERT on the outbox, nothing on its identity sequence.
  ASSERT_TRUE(cluster_
                  ->Exec("DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = "
                         "'app_writer') THEN CREATE ROLE app_writer LOGIN; END IF; END $$;"
                         "GRANT INSERT ON public.outbox TO app_writer")
                  .ok());
  ConnPtr app = Connect(cluster_->conninfo_for_user("app_writer"));
  Run(app.get(), "BEGIN");
  Status st = Append(app.get(), Payment("wallet-8"));
  EXPECT_TRUE(st.ok()) << st.ToString();
  Run(app.get(), "COMMIT");
  EXPECT_EQ(Scalar("SELECT count(*) FROM outbox"), "1");
}

// test_decoding prints "message: transactional: 1 prefix: P, sz: N content:<bytes>".
std::string MessageContent(const std::string& line) {
  const std::string marker = "content:";
  auto pos = line.find(marker);
  return pos == std::string::npos ? "" : line.substr(pos + marker.size());
}

// Issue 32: the caller's W3C trace context is stored as the row's traceparent and
// tracestate headers; a header of the same name besides it, or a trace context for a table
// without a headers column, is refused rather than one silently winning.
TEST_F(OutboxTest, TraceContextIsStoredAsHeadersAndNeverTwice) {
  OutboxEvent e = Payment("wallet-t");
  e.trace = TraceContext{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "rojo=1"};
  Run(conn_.get(), "BEGIN");
  std::string id;
  Status st = Append(conn_.get(), e, &id);
  ASSERT_TRUE(st.ok()) << st.ToString();
  Run(conn_.get(), "COMMIT");
  EXPECT_EQ(Scalar("SELECT headers::text FROM outbox WHERE event_id = '" + id + "'"),
            R"({"tracestate": "rojo=1", "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"})");

  Run(conn_.get(), "BEGIN");
  e.headers = {{"TraceParent", "00-4bf92f3577b34da6a3ce929d0e0e4736-b7ad6b7169203331-01"}};
  st = Append(conn_.get(), e);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("set one"), std::string::npos) << st.message();
  e.headers.clear();
  e.trace->traceparent = "not-a-trace";
  st = Append(conn_.get(), e);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("not a W3C traceparent"), std::string::npos) << st.message();
  OutboxTarget no_headers;
  no_headers.columns.headers = "";
  e.trace->traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  st = OutboxWriter(no_headers).Append(conn_.get(), e);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("no headers column"), std::string::npos) << st.message();
  Run(conn_.get(), "ROLLBACK");
  EXPECT_EQ(Scalar("SELECT count(*) FROM outbox"), "1");
}

TEST_F(OutboxTest, AppendMessageIsReadByTheRelaysMapper) {
  ASSERT_TRUE(
      cluster_->Exec("SELECT pg_create_logical_replication_slot('outbox_msg', 'test_decoding')")
          .ok());
  OutboxEvent e = Payment("wallet-9");
  e.topic = "payments.v1";
  e.payload = R"({"amount": 5, "note": "he said \"hi\" \u00e9"})";
  e.headers = {{"trace_id", "t-\"1\""}, {"unicode", "€"}};

  // TestCluster runs with synchronous_commit=off; the slot functions decode only up to the
  // flushed WAL, so this session's commits must be flushed before peeking.
  Run(conn_.get(), "SET synchronous_commit = on");
  Run(conn_.get(), "BEGIN");
  std::string rolled_back_id;
  ASSERT_TRUE(AppendMessage(conn_.get(), Payment("rolled-back"), &rolled_back_id).ok());
  Run(conn_.get(), "ROLLBACK");
  Run(conn_.get(), "BEGIN");
  std::string id;
  Status st = AppendMessage(conn_.get(), e, &id);
  ASSERT_TRUE(st.ok()) << st.ToString();
  Run(conn_.get(), "COMMIT");

  auto rows = cluster_->Query(
      "SELECT data FROM pg_logical_slot_peek_changes('outbox_msg', NULL, NULL) "
      "WHERE data LIKE 'message:%'");
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  ASSERT_EQ(rows->size(), 1u) << "the rolled-back message must not be decoded";
  const std::string line = *(*rows)[0][0];
  EXPECT_NE(line.find("transactional: 1 prefix: walrelay.outbox"), std::string::npos) << line;
  const std::string content = MessageContent(line);

  relay::RelayConfig config;  // default topic template; AppendMessage's prefix turned on
  config.message_prefix = std::string(relay::kDefaultMessagePrefix);
  relay::OutboxMapper mapper(config);
  pgoutput::LogicalMessage message;
  message.flags = pgoutput::LogicalMessage::kFlagTransactional;
  message.prefix = "walrelay.outbox";
  message.content = content;
  ASSERT_TRUE(mapper.IsOutboxMessage(message));
  relay::OutboxEvent mapped;
  st = mapper.MapMessage(message, &mapped);
  ASSERT_TRUE(st.ok()) << st.ToString() << "\n" << content;
  EXPECT_EQ(mapped.event_id, id);
  EXPECT_EQ(mapped.key, "wallet-9");
  EXPECT_EQ(mapped.event_type, "PaymentMade");
  EXPECT_EQ(mapped.aggregate_type, "payment");
  EXPECT_EQ(mapped.topic, "payments.v1");
  EXPECT_EQ(mapped.value, R"({"note":"he said \"hi\" é","amount":5})");
  ASSERT_EQ(mapped.extra_headers.size(), 2u);
  std::map<std::string, std::string> headers;
  for (auto [k, v] : mapped.extra_headers) headers.emplace(k, v);
  EXPECT_EQ(headers["trace_id"], "t-\"1\"");
  EXPECT_EQ(headers["unicode"], "€");

  ASSERT_TRUE(cluster_->Exec("SELECT pg_drop_replication_slot('outbox_msg')").ok());
}

TEST_F(OutboxTest, AppendMessageRejectsBadPayloadAndCannotBeInjected) {
  Run(conn_.get(), "BEGIN");
  OutboxEvent e = Payment("wallet-10");
  e.payload = "{}, \"aggregate_id\": \"someone-else\"";  // would override a spliced envelope
  Status st = AppendMessage(conn_.get(), e);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  Run(conn_.get(), "ROLLBACK");
  EXPECT_EQ(AppendMessage(conn_.get(), Payment("w")).code(), StatusCode::kFailedPrecondition)
      << "autocommit refused";
}

}  // namespace
}  // namespace walrelay::outbox
