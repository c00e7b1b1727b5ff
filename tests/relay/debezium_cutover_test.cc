// Debezium's world without Debezium (issue 12): its outbox table (uuid id, aggregatetype,
// aggregateid, type, payload jsonb), its publication and pgoutput slot, rows the
// connector confirmed (the slot advanced past them with pg_replication_slot_advance) and
// rows it did not, some of which it had already sent to Kafka. The cut-over (the checks
// of PlanTakeover, then the relay under the debezium profile on the same slot) must
// publish every unconfirmed row exactly as the profile promises, none of the confirmed
// ones, and an inbox consumer deduplicating on the `id` header applies each event once.
// Then everything the cut-over refuses, each with its fix.
#include <gtest/gtest.h>
#include <libpq-fe.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "slot/replication_connection.h"
#include "src/inbox/inbox.h"
#include "src/kafka/mock_cluster.h"
#include "src/kafka/producer.h"
#include "src/relay/core/plugin_options.h"
#include "base/position.h"
#include "src/relay/run/relay.h"
#include "src/relay/commands/republish.h"
#include "src/relay/commands/cutover.h"
#include "tests/kafka/test_consumer.h"
#include "tests/support/pg_cluster.h"
#include "tests/support/slot_wait.h"
#include "tests/support/subprocess.h"

namespace walrelay::relay {
namespace {

using namespace std::chrono_literals;
using kafka::testing::ConsumedRecord;

constexpr int kPartitions = 6;
constexpr const char* kTopic = "outbox.event.order";

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

class DebeziumCutoverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto pg = testing::TestCluster::Start({});
    ASSERT_TRUE(pg.ok()) << pg.status().ToString();
    pg_ = std::move(*pg);
    // Debezium's documented outbox table, and one with an Avro (bytea) payload.
    ASSERT_TRUE(pg_->Exec(R"(
      CREATE TABLE public.outbox (
        id uuid NOT NULL PRIMARY KEY,
        aggregatetype varchar(255) NOT NULL,
        aggregateid varchar(255) NOT NULL,
        type varchar(255) NOT NULL,
        payload jsonb);
      CREATE TABLE public.outbox_avro (
        id uuid NOT NULL PRIMARY KEY,
        aggregatetype varchar(255) NOT NULL,
        aggregateid varchar(255) NOT NULL,
        type varchar(255) NOT NULL,
        payload bytea);
      CREATE PUBLICATION dbz_publication FOR TABLE public.outbox, public.outbox_avro;)")
                    .ok());
    // Its own statement: a slot cannot be created in a transaction that wrote.
    Status slot = pg_->Exec("SELECT pg_create_logical_replication_slot('debezium', 'pgoutput')");
    ASSERT_TRUE(slot.ok()) << slot.ToString();
    auto kc = kafka::MockCluster::Create(3);
    ASSERT_TRUE(kc.ok()) << kc.status().ToString();
    kafka_ = std::move(*kc);
    ASSERT_TRUE(kafka_->CreateTopic(kTopic, kPartitions, 3).ok());

    ASSERT_TRUE(ApplyOutboxProfile("debezium", &config_).ok());
    config_.tables = {"public.outbox", "public.outbox_avro"};
    config_.source_dsn = pg_->conninfo();
    config_.bootstrap_servers = kafka_->bootstraps();
    config_.create_slot = false;
    config_.status_interval = 100ms;
    config_.reconnect_min = 50ms;
    config_.reconnect_max = 500ms;
  }

  void TearDown() override {
    if (relay_) {
      relay_->RequestStop();
      thread_.join();
    }
  }

  // `txs` transactions of `rows` orders each, payload {"seq": n}, aggregates order-<n % 7>.
  void WriteOrders(int first, int txs, int rows) {
    for (int t = 0; t < txs; ++t) {
      const int lo = first + t * rows;
      // A synchronous commit: the slot can be advanced only to flushed WAL.
      ASSERT_TRUE(pg_->Exec("SET synchronous_commit = on; "
                            "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) "
                            "SELECT gen_random_uuid(), 'order', 'order-' || (g % 7), "
                            "'OrderCreated', jsonb_build_object('seq', g, 'note', 'a \"b\"') "
                            "FROM generate_series(" +
                            std::to_string(lo) + ", " + std::to_string(lo + rows - 1) + ") g")
                      .ok());
    }
  }

  std::set<std::string> Ids(const std::string& where) {
    auto rows = pg_->Query("SELECT id::text FROM outbox WHERE " + where);
    EXPECT_TRUE(rows.ok()) << rows.status().ToString();
    std::set<std::string> ids;
    if (rows.ok()) {
      for (const auto& r : *rows) ids.insert(*r[0]);
    }
    return ids;
  }

  std::unique_ptr<testing::TestCluster> pg_;
  std::unique_ptr<kafka::MockCluster> kafka_;
  RelayConfig config_;
  std::unique_ptr<Relay> relay_;
  std::thread thread_;
  Status run_status_;
};

TEST_F(DebeziumCutoverTest, UnconfirmedRowsArriveAsDebeziumWroteThemAndApplyOnce) {
  // Rows the connector sent and confirmed: the slot moves past them.
  WriteOrders(0, 5, 10);
  ASSERT_TRUE(
      pg_->Exec("SELECT pg_replication_slot_advance('debezium', pg_current_wal_insert_lsn())")
          .ok());
  const std::set<std::string> confirmed = Ids("true");
  ASSERT_EQ(confirmed.size(), 50u);
  // Rows committed after the connector's last confirmation (one with a bytea payload).
  const int64_t written_from_ms = NowMs();
  WriteOrders(100, 7, 10);
  ASSERT_TRUE(pg_->Exec("INSERT INTO outbox_avro VALUES (gen_random_uuid(), 'order', "
                        "'order-avro', 'OrderCreated', '\\x00010203ff'::bytea)")
                  .ok());
  const int64_t written_to_ms = NowMs();
  std::set<std::string> unconfirmed;
  for (const auto& id : Ids("true")) {
    if (!confirmed.count(id)) unconfirmed.insert(id);
  }
  ASSERT_EQ(unconfirmed.size(), 70u);
  auto avro_id = pg_->QueryScalar("SELECT id::text FROM outbox_avro");
  ASSERT_TRUE(avro_id.ok());

  // What the connector had already sent of them before it was stopped (Debezium's form):
  // these arrive twice, and the inbox absorbs the repeats.
  auto sent = pg_->Query(
      "SELECT id::text, aggregateid, payload::text FROM outbox WHERE (payload->>'seq')::int "
      "BETWEEN 100 AND 119");
  ASSERT_TRUE(sent.ok() && sent->size() == 20u);
  {
    kafka::ProducerOptions opt;
    opt.properties = {{"bootstrap.servers", kafka_->bootstraps()}};
    int failed = 0;
    auto producer = kafka::Producer::Create(
        opt, [&](uint64_t, const Status& st, const kafka::DeliveredRecord&) { failed += !st.ok(); });
    ASSERT_TRUE(producer.ok());
    for (size_t i = 0; i < sent->size(); ++i) {
      const auto& r = (*sent)[i];
      std::vector<kafka::Header> h = {{"id", *r[0]}};
      ASSERT_TRUE((*producer)->Produce(kTopic, *r[1], *r[2], h, i).ok());
    }
    ASSERT_TRUE((*producer)->Flush(30s).ok());
    ASSERT_EQ(failed, 0);
  }

  // The cut-over: checks, then the relay on the connector's slot.
  const Lsn advanced = testing::ConfirmedFlush(*pg_, "debezium");
  auto plan = PlanTakeover(config_);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->start, advanced);
  EXPECT_GT(plan->pending_wal_bytes, 0u);
  EXPECT_FALSE(plan->publication_all_tables);
  relay_ = std::make_unique<Relay>(config_);
  thread_ = std::thread([this] { run_status_ = relay_->Run(); });

  // Everything to the end of the topic: 20 sent before + 71 from the relay.
  auto records = kafka::testing::ConsumeAll(kafka_->bootstraps(), kTopic, kPartitions, 91, 60s);
  ASSERT_EQ(records.size(), 91u);
  ASSERT_TRUE(testing::WaitConfirmedPastCurrent(*pg_, 30s, "debezium"));
  EXPECT_EQ(kafka::testing::EndOffsetSum(kafka_->bootstraps(), kTopic, kPartitions), 91)
      << "more records than the unconfirmed rows and the connector's";

  std::map<std::string, int> by_id;
  auto rows = pg_->Query("SELECT id::text, aggregateid, payload::text FROM outbox");
  ASSERT_TRUE(rows.ok());
  std::map<std::string, std::pair<std::string, std::string>> table;  // id -> key, value
  for (const auto& r : *rows) table[*r[0]] = {*r[1], *r[2]};
  for (const ConsumedRecord& r : records) {
    const std::string id = r.Header("id");
    ++by_id[id];
    if (r.Header("walrelay.position").empty()) continue;  // the connector's copy
    // Exactly the profile's record: Debezium's header set, key, value, timestamp.
    std::vector<std::string> names;
    for (const auto& h : r.headers) names.push_back(h.first);
    EXPECT_EQ(names, (std::vector<std::string>{"id", "walrelay.position"}));
    if (id == *avro_id) {
      EXPECT_EQ(r.key, "order-avro");
      EXPECT_EQ(r.value, std::string("\x00\x01\x02\x03\xff", 5)) << "bytea must be its bytes";
    } else {
      ASSERT_TRUE(table.count(id)) << id;
      EXPECT_EQ(r.key, table[id].first);
      EXPECT_EQ(r.value, table[id].second) << "the jsonb payload as PostgreSQL writes it";
    }
    auto position = ParsePosition(r.Header("walrelay.position"));
    ASSERT_TRUE(position.has_value());
    EXPECT_EQ(r.timestamp_ms, position->commit_time_us / 1000) << "commit time, as Debezium";
    EXPECT_GE(r.timestamp_ms, written_from_ms - 1000);
    EXPECT_LE(r.timestamp_ms, written_to_ms + 1000);
  }
  for (const auto& id : confirmed) EXPECT_EQ(by_id.count(id), 0u) << "confirmed row " << id;
  for (const auto& id : unconfirmed) {
    const bool sent_before = by_id[id] == 2;
    EXPECT_TRUE(by_id[id] == 1 || sent_before) << id << " arrived " << by_id[id] << " times";
  }
  EXPECT_EQ(by_id[*avro_id], 1);
  EXPECT_EQ(by_id.size(), 71u);

  // A consumer deduplicating on Debezium's `id` header applies each event once.
  ASSERT_TRUE(pg_->Exec("CREATE TABLE applied (event_id text PRIMARY KEY)").ok());
  inbox::InboxOptions o;
  o.bootstrap_servers = kafka_->bootstraps();
  o.group_id = "orders";
  o.topics = {kTopic};
  o.properties = {{"session.timeout.ms", "6000"}, {"heartbeat.interval.ms", "500"}};
  o.conninfo = pg_->conninfo();
  o.consumer_name = "orders";
  o.event_id_header = "id";
  o.inbox_retention = std::chrono::hours(24 * 8);
  o.replay_window = std::chrono::hours(24 * 7);
  o.describe_configs_timeout = 1s;
  auto consumer = inbox::InboxConsumer::Create(
      o, [](const inbox::InboxMessage& m, inbox::Transaction& tx) -> Status {
        return tx.Exec("INSERT INTO applied VALUES ($1)", {m.event_id}).status();
      });
  ASSERT_TRUE(consumer.ok()) << consumer.status().ToString();
  ASSERT_TRUE((*consumer)->EnsureSchema().ok());
  Status consumer_status;
  std::thread runner([&] { consumer_status = (*consumer)->Run(); });
  const auto deadline = std::chrono::steady_clock::now() + 90s;
  while (std::chrono::steady_clock::now() < deadline) {
    const inbox::InboxStats s = (*consumer)->stats();
    if (s.applied + s.duplicates + s.dead_lettered >= 91) break;
    std::this_thread::sleep_for(50ms);
  }
  (*consumer)->Stop();
  runner.join();
  EXPECT_TRUE(consumer_status.ok()) << consumer_status.ToString();
  const inbox::InboxStats s = (*consumer)->stats();
  EXPECT_EQ(s.applied, 71u);
  EXPECT_EQ(s.duplicates, 20u);
  EXPECT_EQ(s.dead_lettered, 0u);
  EXPECT_EQ(*pg_->QueryScalar("SELECT count(*) FROM applied"), "71");
}

// Each refusal names what is wrong and the fix; none changes anything.
TEST_F(DebeziumCutoverTest, RefusesWhatItCannotTakeOver) {
  auto refused = [&](const RelayConfig& config, std::string_view needle) {
    auto plan = PlanTakeover(config);
    ASSERT_FALSE(plan.ok()) << "expected a refusal naming '" << needle << "'";
    EXPECT_EQ(plan.status().code(), StatusCode::kFailedPrecondition) << plan.status().ToString();
    EXPECT_NE(plan.status().message().find(needle), std::string::npos)
        << plan.status().message();
    EXPECT_NE(plan.status().message().find("Fix"), std::string::npos) << plan.status().message();
  };
  RelayConfig c = config_;
  c.slot = "no_such_slot";
  refused(c, "does not exist");

  ASSERT_TRUE(
      pg_->Exec("SELECT pg_create_logical_replication_slot('other', 'test_decoding')").ok());
  c = config_;
  c.slot = "other";
  refused(c, "test_decoding, which walrelay cannot read");

  ASSERT_TRUE(pg_->Exec("CREATE TABLE unrelated (x int); "
                        "CREATE PUBLICATION elsewhere FOR TABLE unrelated")
                  .ok());
  c = config_;
  c.publication = "elsewhere";
  refused(c, "ALTER PUBLICATION");

  // Not Debezium-shaped: walrelay's own schema under the debezium profile.
  ASSERT_TRUE(pg_->Exec("CREATE TABLE public.mine (id bigint, event_id uuid, aggregate_id text, "
                        "event_type text, payload jsonb); "
                        "ALTER PUBLICATION dbz_publication ADD TABLE public.mine")
                  .ok());
  c = config_;
  c.tables = {"public.mine"};
  refused(c, "not shaped for the outbox profile 'debezium'");

  // A payload of a type walrelay does not publish.
  ASSERT_TRUE(pg_->Exec("CREATE TABLE public.odd (id uuid, aggregatetype text, aggregateid "
                        "text, type text, payload int); "
                        "ALTER PUBLICATION dbz_publication ADD TABLE public.odd")
                  .ok());
  c = config_;
  c.tables = {"public.odd"};
  refused(c, "payload column payload is integer");

  // The connector still reads the slot.
  auto conn = slot::ReplicationConnection::Connect(pg_->conninfo());
  ASSERT_TRUE(conn.ok()) << conn.status().ToString();
  ASSERT_TRUE((*conn)
                  ->StartLogical("debezium", Lsn(0),
                                 StartReplicationOptions("pgoutput", "dbz_publication",
                                                         config_.tables))
                  .ok());
  refused(config_, "in use by process");
  conn->reset();

  // Nothing was created or moved: the connector's slot is as it was.
  EXPECT_EQ(*pg_->QueryScalar("SELECT count(*) FROM pg_replication_slots"), "2");
}

// The command as an operator runs it: --dry-run prints every check and the plan and
// changes nothing (exit 0); a refusal exits non-zero with the fix in the log.
TEST_F(DebeziumCutoverTest, DryRunPrintsThePlanAndChangesNothing) {
  WriteOrders(0, 2, 5);
  const Lsn before = testing::ConfirmedFlush(*pg_, "debezium");
  const std::string log = ::testing::TempDir() + "/cutover-dry-run.log";
  std::remove(log.c_str());
  auto run = [&](std::vector<std::string> extra) {
    std::vector<std::string> argv = {WALRELAY_BINARY, "cutover", "debezium", "--source-dsn",
                                     pg_->conninfo(), "--kafka-bootstrap-servers",
                                     kafka_->bootstraps(), "--source-table", "public.outbox"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto p = testing::Subprocess::Start(argv, log);
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    return p.ok() ? p->Wait(30s) : std::nullopt;
  };
  EXPECT_EQ(run({"--dry-run"}), std::optional<int>(0));
  std::ifstream in(log);
  const std::string out((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(out.find("cutover: ok: slot debezium is not in use"), std::string::npos) << out;
  EXPECT_NE(out.find("every check passed; would stream slot debezium (publication "
                     "dbz_publication) from " +
                     before.ToString()),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("event id in header id"), std::string::npos) << out;
  EXPECT_EQ(testing::ConfirmedFlush(*pg_, "debezium"), before);
  EXPECT_EQ(*pg_->QueryScalar("SELECT count(*) FROM pg_replication_slots"), "1");

  std::remove(log.c_str());
  EXPECT_EQ(run({"--dry-run", "--source-slot", "gone"}), std::optional<int>(2));
  std::ifstream in2(log);
  const std::string refused((std::istreambuf_iterator<char>(in2)),
                            std::istreambuf_iterator<char>());
  EXPECT_NE(refused.find("cutover refused"), std::string::npos) << refused;
  EXPECT_NE(refused.find("does not exist"), std::string::npos) << refused;
}

// The Debezium slot is gone (dropped, or lost: its WAL was removed), so the cut-over
// refuses. What remains is the table: `republish --all --create-slot` creates walrelay's
// slot with an exported snapshot and publishes every row of that snapshot; `run` then
// streams from the slot. Every row arrives (those the connector had delivered again,
// marked recovered=1), and rows committed after the snapshot arrive once, from the stream.
TEST_F(DebeziumCutoverTest, LostSlotRepublishThenStreamMissesNothing) {
  WriteOrders(0, 4, 10);
  ASSERT_TRUE(pg_->Exec("SELECT pg_drop_replication_slot('debezium')").ok());
  ASSERT_EQ(PlanTakeover(config_).status().code(), StatusCode::kFailedPrecondition);

  RelayConfig config = config_;
  config.slot = "walrelay";
  config.tables = {"public.outbox"};
  RepublishRequest request;
  request.rows = RepublishRequest::Rows::kAll;
  request.create_slot = true;
  request.dry_run = true;
  auto counted = Republish(config, request);
  ASSERT_TRUE(counted.ok()) << counted.status().ToString();
  EXPECT_EQ(counted->rows.expected, 40u);
  EXPECT_EQ(counted->rows.published, 0u);
  EXPECT_EQ(*pg_->QueryScalar("SELECT count(*) FROM pg_replication_slots"), "0")
      << "a dry run creates nothing";

  request.dry_run = false;
  {  // A relay of the slot that is starting or recovering it holds the slot's lock.
    PGconn* relay_session = PQconnectdb(pg_->conninfo().c_str());
    ASSERT_EQ(PQstatus(relay_session), CONNECTION_OK);
    PGresult* locked =
        PQexec(relay_session, "SELECT pg_advisory_lock(1463897170, hashtext('walrelay'))");
    ASSERT_EQ(PQresultStatus(locked), PGRES_TUPLES_OK) << PQresultErrorMessage(locked);
    PQclear(locked);
    auto refused = Republish(config, request);
    PQfinish(relay_session);
    ASSERT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(refused.status().message().find("is being started or recovered by process"),
              std::string::npos)
        << refused.status().message();
    EXPECT_EQ(*pg_->QueryScalar("SELECT count(*) FROM pg_replication_slots"), "0");
  }
  auto done = Republish(config, request);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_TRUE(done->slot_created);
  EXPECT_EQ(done->rows.expected, 40u);
  EXPECT_EQ(done->rows.published, 40u);
  EXPECT_EQ(testing::ConfirmedFlush(*pg_, "walrelay"), done->position);
  // The slot now exists: a second --create-slot refuses (with the way out).
  auto again = Republish(config, request);
  ASSERT_EQ(again.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(again.status().message().find("without --create-slot"), std::string::npos);

  WriteOrders(100, 3, 10);  // after the snapshot: the stream's, not the republish's
  config.create_slot = false;
  relay_ = std::make_unique<Relay>(config);
  thread_ = std::thread([this] { run_status_ = relay_->Run(); });
  auto records = kafka::testing::ConsumeAll(kafka_->bootstraps(), kTopic, kPartitions, 70, 60s);
  ASSERT_EQ(records.size(), 70u);
  ASSERT_TRUE(testing::WaitConfirmedPastCurrent(*pg_, 30s, "walrelay"));
  EXPECT_EQ(kafka::testing::EndOffsetSum(kafka_->bootstraps(), kTopic, kPartitions), 70);
  std::map<std::string, int> seen;
  int recovered = 0;
  for (const ConsumedRecord& r : records) {
    ++seen[r.Header("id")];
    auto position = ParsePosition(r.Header("walrelay.position"));
    ASSERT_TRUE(position.has_value());
    recovered += position->recovered;
  }
  EXPECT_EQ(seen.size(), 70u);
  EXPECT_EQ(recovered, 40);
  for (const auto& id : Ids("true")) EXPECT_EQ(seen[id], 1) << id;
}

// What republish refuses, each with the way out.
TEST_F(DebeziumCutoverTest, RepublishRefusesWhatItCannotDoSafely) {
  RelayConfig config = config_;
  config.tables = {"public.outbox"};
  RepublishRequest request;
  request.rows = RepublishRequest::Rows::kSinceId;
  request.since_id = "10";
  auto r = Republish(config, request);
  ASSERT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("--since-id needs an ordering id column"),
            std::string::npos);
  request.rows = RepublishRequest::Rows::kSinceTime;
  request.since_time = "2026-01-01";
  EXPECT_EQ(Republish(config, request).status().code(), StatusCode::kInvalidArgument);

  // The slot is read (a relay runs): refused unless told.
  auto conn = slot::ReplicationConnection::Connect(pg_->conninfo());
  ASSERT_TRUE(conn.ok());
  ASSERT_TRUE((*conn)
                  ->StartLogical("debezium", Lsn(0),
                                 StartReplicationOptions("pgoutput", "dbz_publication",
                                                         config.tables))
                  .ok());
  request.rows = RepublishRequest::Rows::kEventIds;
  request.event_ids = {"00000000-0000-0000-0000-000000000000"};
  r = Republish(config, request);
  ASSERT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("--while-relay-runs"), std::string::npos);
  request.while_relay_runs = true;
  request.dry_run = true;
  r = Republish(config, request);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->rows.expected, 0u);
}

// Lost-slot recovery on Debezium's table (uuid id, no ordering column): the relay runs
// under the profile on a slot of its own, the slot is dropped while rows are unread, and
// the next start republishes every row not known delivered at the recorded bound. Every
// row arrives; none of those committed after the bound is missing.
TEST_F(DebeziumCutoverTest, LostSlotRecoveryWorksOnTheUuidTable) {
  config_.slot = "walrelay";
  config_.create_slot = true;
  config_.tables = {"public.outbox"};
  relay_ = std::make_unique<Relay>(config_);
  thread_ = std::thread([this] { run_status_ = relay_->Run(); });
  // Rows committed before the slot exists are not in its stream: wait for it.
  for (int i = 0; i < 300 && relay_->stats().streaming.load() == 0; ++i) {
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_EQ(relay_->stats().streaming.load(), 1);
  WriteOrders(0, 3, 10);
  ASSERT_TRUE(testing::WaitConfirmedPastCurrent(*pg_, 30s, "walrelay"));
  // The bound covers every row so far once the confirmed position passed a candidate.
  bool covered = false;
  for (auto until = std::chrono::steady_clock::now() + 30s;
       !covered && std::chrono::steady_clock::now() < until;
       std::this_thread::sleep_for(50ms)) {
    auto v = pg_->QueryScalar(
        "SELECT bool_and(pg_visible_in_snapshot(o.xmin::text::xid8, p.bound_snapshot)) FROM "
        "outbox o, walrelay_progress p WHERE p.slot = 'walrelay' AND p.source = '*'");
    covered = v.ok() && *v == "t";
  }
  ASSERT_TRUE(covered) << "no bound recorded";
  relay_->RequestStop();
  thread_.join();
  relay_.reset();

  WriteOrders(100, 4, 10);  // unread: the slot is dropped below
  ASSERT_TRUE(pg_->Exec("SELECT pg_drop_replication_slot('walrelay')").ok());
  relay_ = std::make_unique<Relay>(config_);
  thread_ = std::thread([this] { run_status_ = relay_->Run(); });
  WriteOrders(200, 1, 10);  // after recovery: streamed from the new slot

  std::map<std::string, int> seen;
  kafka::testing::ConsumeUntil(
      kafka_->bootstraps(), kTopic, kPartitions,
      [&](const std::vector<ConsumedRecord>& got) {
        seen.clear();
        for (const auto& r : got) ++seen[r.Header("id")];
        return seen.size() >= 80;
      },
      60s);
  const std::set<std::string> all = Ids("true");
  ASSERT_EQ(all.size(), 80u);
  for (const auto& id : all) {
    EXPECT_GE(seen[id], 1) << "row " << id << " never arrived: seq "
                           << *pg_->QueryScalar("SELECT payload->>'seq' FROM outbox WHERE id = '" +
                                                id + "'");
  }
  EXPECT_EQ(relay_->stats().slot_recoveries.load(), 1u);
}

}  // namespace
}  // namespace walrelay::relay
