// Outbox cleanup designs end to end (issue 14; docs/operations.md section 4): events go
// through the relay with the design on, every one arrives, and the outbox ends bounded.
// Same fixture as relay_test.cc (tests/relay/relay_fixture.h). The janitor's own test is
// RelayTest.JanitorDeletesOnlyDeliveredRowsAndKeepsTheOutboxBounded.
#include <gtest/gtest.h>
#include <libpq-fe.h>

#include <set>
#include <string>
#include <thread>
#include <vector>

#include "src/cli/setup.h"
#include "src/outbox/outbox.h"
#include "src/relay/core/config.h"
#include "src/relay/lifecycle/janitor.h"
#include "src/relay/lifecycle/partitions.h"
#include "src/relay/core/schema.h"
#include "tests/relay/relay_fixture.h"

namespace walrelay::relay {
namespace {

using namespace std::chrono_literals;

class CleanupTest : public RelayTest {
 protected:
  // The mock cluster keeps at most 5 MB (and 100,000 records) per partition: 200,000
  // events go to a topic of their own with many partitions and many aggregates.
  static constexpr const char* kTopic = "cleanup.events";
  static constexpr int kTopicPartitions = 64;
  void SetUp() override {
    RelayTest::SetUp();
    ASSERT_TRUE(kafka_->CreateTopic(kTopic, kTopicPartitions, 3).ok());
    config_.topic_template = kTopic;
  }
  int64_t OutboxRows() { return std::stoll(*pg_->QueryScalar("SELECT count(*) FROM outbox")); }
  // `txs` transactions of `rows` outbox rows (payload seq from `first`), each followed in
  // its transaction by `after` with $LO and $HI replaced by its first and last seq; rows
  // get `created_at` (an SQL expression over g, the seq) unless it is empty.
  void WriteRows(int first, int txs, int rows, const std::string& created_at = "",
                 const std::string& after = "") {
    for (int t = 0; t < txs; ++t) {
      const std::string lo = std::to_string(first + t * rows);
      const std::string hi = std::to_string(first + (t + 1) * rows - 1);
      std::string then = after;
      for (auto [key, value] : {std::pair{"$LO", lo}, std::pair{"$HI", hi}}) {
        for (size_t at; (at = then.find(key)) != std::string::npos;) then.replace(at, 3, value);
      }
      ASSERT_TRUE(pg_->Exec("BEGIN; INSERT INTO outbox (aggregate_type, aggregate_id, "
                            "event_type, payload" +
                            std::string(created_at.empty() ? "" : ", created_at") +
                            ") SELECT 'payment', 'agg-' || (g % 1000), 'PaymentCaptured', "
                            "jsonb_build_object('seq', g)" +
                            (created_at.empty() ? "" : ", " + created_at) +
                            " FROM generate_series(" + lo + ", " + hi + ") g; " + then +
                            "; COMMIT")
                      .ok());
    }
  }
  // Distinct event ids in kTopic, reading until `expected` are seen.
  size_t DistinctIds(size_t expected) {
    return DistinctEventIds(expected, 120s, kTopic, kTopicPartitions).size();
  }
};

// Design "same transaction": each writer deletes its row in the transaction that inserted
// it. 200,000 events (100 through the producer helper, the rest by SQL doing the same in
// bulk): all arrive, the outbox is empty all along, and the relay skips the DELETEs.
TEST_F(CleanupTest, SameTransactionDeleteDeliversEverythingAndLeavesTheOutboxEmpty) {
  config_.outbox_cleanup = OutboxCleanup::kSameTransaction;
  config_.recovery_enabled = false;
  StartRelay();

  outbox::OutboxTarget target;
  target.delete_in_same_transaction = true;
  const outbox::OutboxWriter writer(target);
  PGconn* app = PQconnectdb(pg_->conninfo().c_str());
  ASSERT_EQ(PQstatus(app), CONNECTION_OK);
  auto run = [&](const char* sql) {
    PGresult* r = PQexec(app, sql);
    EXPECT_EQ(PQresultStatus(r), PGRES_COMMAND_OK) << PQresultErrorMessage(r);
    PQclear(r);
  };
  constexpr int kHelperEvents = 100;
  for (int i = 0; i < kHelperEvents; ++i) {
    run("BEGIN");
    outbox::OutboxEvent e;
    e.aggregate_type = "payment";
    e.aggregate_id = "wallet-" + std::to_string(i % 7);
    e.event_type = "PaymentMade";
    e.payload = "{\"seq\": " + std::to_string(-1 - i) + "}";
    ASSERT_TRUE(writer.Append(app, e).ok());
    run("COMMIT");
  }
  PQfinish(app);
  constexpr int kBulkTxs = 100, kRowsPerTx = 1999;
  WriteRows(0, kBulkTxs, kRowsPerTx, "",
            "DELETE FROM outbox WHERE (payload->>'seq')::int BETWEEN $LO AND $HI");
  const size_t total = kHelperEvents + kBulkTxs * kRowsPerTx;
  ASSERT_EQ(total, 200'000u);
  EXPECT_EQ(OutboxRows(), 0);
  ASSERT_TRUE(WaitConfirmedPastCurrent(120s)) << run_status_.ToString();
  EXPECT_EQ(kafka::testing::EndOffsetSum(kafka_->bootstraps(), kTopic, kTopicPartitions),
            static_cast<int64_t>(total));
  EXPECT_EQ(DistinctIds(total), total);
  EXPECT_EQ(relay_->stats().skipped_deletes.load(), total);
  EXPECT_EQ(relay_->stats().events_dead_lettered.load(), 0u);
  EXPECT_EQ(OutboxRows(), 0);
}

// Design "partitions": the outbox range-partitioned by day, 200,000 rows spread over the
// last six days and today (their created_at set so). Retention two days: the partitions of
// days -6..-3 end entirely before now - 2 days. While the brokers are down none of them is
// dropped (their rows are not delivered); once everything arrived they are, and only they;
// the janitor created the six days ahead; every event arrives.
TEST_F(CleanupTest, PartitionsOlderThanTheRetentionAreDroppedOnceDelivered) {
  ASSERT_TRUE(pg_->Exec("DROP TABLE outbox").ok());
  ASSERT_TRUE(pg_->Exec(PartitionedOutboxTableDdl("public.outbox")).ok());
  const auto now = std::chrono::system_clock::now();
  for (const PartitionRange& r :
       PartitionRanges("public.outbox", PartitionPeriod::kDaily, now - 6 * 24h, 7)) {
    ASSERT_TRUE(pg_->Exec(CreatePartitionSql("public.outbox", r)).ok()) << r.name;
  }
  auto partitions = [&] {
    return std::stoi(*pg_->QueryScalar(
        "SELECT count(*) FROM pg_inherits WHERE inhparent = 'public.outbox'::regclass"));
  };
  auto expired = [&] {  // partitions whose range ends before now - 2 days
    return std::stoi(*pg_->QueryScalar(
        "SELECT count(*) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE "
        "i.inhparent = 'public.outbox'::regclass AND (regexp_match(pg_get_expr(c.relpartbound, "
        "c.oid), 'TO \\(''([^'']+)''\\)'))[1]::timestamptz <= now() - interval '2 days'"));
  };
  ASSERT_EQ(partitions(), 7);
  ASSERT_EQ(expired(), 4);
  config_.outbox_cleanup = OutboxCleanup::kPartitions;
  config_.outbox_retention = 48h;
  config_.janitor_interval = 100ms;
  // The slot first (as `walrelay setup` makes it), then the rows, then the relay: an empty
  // expired partition would be dropped at once (nothing in it is undelivered).
  ASSERT_TRUE(pg_->Exec("CREATE PUBLICATION walrelay_outbox FOR TABLE outbox WITH "
                        "(publish_via_partition_root = true)")
                  .ok());
  ASSERT_TRUE(pg_->Exec("SELECT pg_create_logical_replication_slot('walrelay', 'pgoutput')").ok());
  constexpr int kTxs = 100, kRows = 2000;
  WriteRows(0, kTxs, kRows, "now() - make_interval(days => g % 7)");
  ASSERT_TRUE(kafka_->SetAllBrokersDown().ok());
  StartRelay();
  // Rounds of the janitor while nothing can be delivered: partitions ahead appear, none goes.
  for (int i = 0; i < 100 && partitions() < 13; ++i) std::this_thread::sleep_for(100ms);
  EXPECT_EQ(partitions(), 13) << "today and the next six days, plus the six days before";
  std::this_thread::sleep_for(1s);
  EXPECT_EQ(expired(), 4) << "a partition with undelivered rows was dropped";

  ASSERT_TRUE(kafka_->SetAllBrokersUp().ok());
  ASSERT_TRUE(WaitConfirmedPastCurrent(120s)) << run_status_.ToString();
  for (int i = 0; i < 300 && expired() > 0; ++i) std::this_thread::sleep_for(100ms);
  EXPECT_EQ(expired(), 0) << "delivered partitions older than the retention stayed";
  EXPECT_EQ(partitions(), 9);
  constexpr size_t kTotal = kTxs * kRows;
  EXPECT_EQ(DistinctIds(kTotal), kTotal);
  // Rows of days 0, -1, -2 stay (seq % 7 in 0..2).
  EXPECT_EQ(*pg_->QueryScalar("SELECT count(*) = count(*) FILTER (WHERE (payload->>'seq')::int % 7 "
                              "< 3) FROM outbox"),
            "t");
  EXPECT_NE(relay_->RenderMetrics().find("walrelay_outbox_janitor_dropped_partitions_total 4"),
            std::string::npos);
}

// Design "janitor" at volume: 200,000 events through the relay with outbox.retention_ms
// 1 ms; every event arrives and the outbox ends empty, deleted in batches by the janitor
// (the broker-down case, where it must delete nothing, is
// RelayTest.JanitorDeletesOnlyDeliveredRowsAndKeepsTheOutboxBounded).
TEST_F(CleanupTest, JanitorDeliversEverythingAndEmptiesTheOutboxAt200000Events) {
  config_.outbox_retention = 1ms;
  config_.janitor_interval = 100ms;
  config_.janitor_batch_rows = 5000;
  StartRelay();
  constexpr int kTxs = 100, kRows = 2000;
  WriteRows(0, kTxs, kRows);
  ASSERT_TRUE(WaitConfirmedPastCurrent(120s)) << run_status_.ToString();
  constexpr size_t kTotal = kTxs * kRows;
  EXPECT_EQ(DistinctIds(kTotal), kTotal);
  for (int i = 0; i < 600 && OutboxRows() > 0; ++i) std::this_thread::sleep_for(100ms);
  EXPECT_EQ(OutboxRows(), 0);
  EXPECT_NE(relay_->RenderMetrics().find("walrelay_outbox_janitor_deleted_rows_total 200000"),
            std::string::npos);
}

// Lost-slot recovery republishes from the outbox tables: with the rows deleted by their
// writers there is nothing to republish, so the configuration refuses recovery, with the
// way out; and the poll mode, which reads rows, refuses the design.
// Issue 27, done when: a range-partitioned outbox the user made goes through `walrelay
// setup` (storage settings on its partitions, publication through the root, the slot),
// streams, and the janitor empties it of delivered rows only. Rows written while the
// brokers are down stay (undelivered, in both partitions, at ctids the delivered rows of
// the other partition also have); once delivered, every row older than the retention goes
// and the young ones stay.
TEST_F(CleanupTest, UserRangePartitionedOutboxGoesThroughSetupStreamsAndIsCleanedOfDeliveredRowsOnly) {
  ASSERT_TRUE(pg_->Exec("DROP TABLE outbox").ok());
  ASSERT_TRUE(pg_->Exec(PartitionedOutboxTableDdl("public.outbox") +
                        ";CREATE TABLE outbox_old PARTITION OF outbox FOR VALUES FROM "
                        "('2000-01-01') TO ('2020-01-01');"
                        "CREATE TABLE outbox_now PARTITION OF outbox FOR VALUES FROM "
                        "('2020-01-01') TO ('2200-01-01')")
                  .ok());
  config_.outbox_retention = 1h;
  config_.janitor_interval = 100ms;
  config_.janitor_batch_rows = 100;
  Status setup = cli::RunSetup(config_, /*create_tables=*/true, /*dry_run=*/false);
  ASSERT_TRUE(setup.ok()) << setup.ToString();
  EXPECT_EQ(*pg_->QueryScalar("SELECT count(*) FROM pg_class WHERE relname IN ('outbox_old', "
                              "'outbox_now') AND reloptions::text LIKE "
                              "'%autovacuum_vacuum_threshold=10000%'"),
            "2");
  auto count = [&](const std::string& table) {
    return std::stoi(*pg_->QueryScalar("SELECT count(*) FROM " + table));
  };
  // 1,000 rows: half of them older than the retention (the old partition).
  WriteRows(0, 2, 250, "'2001-01-01'::timestamptz");
  WriteRows(500, 2, 250, "now() - interval '1 minute'");
  StartRelay();
  ASSERT_TRUE(WaitConfirmedPastCurrent(60s)) << run_status_.ToString();
  EXPECT_EQ(DistinctIds(1000), 1000u);
  for (int i = 0; i < 300 && count("outbox_old") > 0; ++i) std::this_thread::sleep_for(100ms);
  EXPECT_EQ(count("outbox_old"), 0) << "delivered rows older than the retention stayed";
  EXPECT_EQ(count("outbox_now"), 500) << "rows younger than the retention were deleted";
  // Undelivered old rows stay, however old.
  ASSERT_TRUE(kafka_->SetAllBrokersDown().ok());
  WriteRows(1000, 1, 100, "'2001-01-01'::timestamptz");
  std::this_thread::sleep_for(2s);  // twenty janitor rounds
  EXPECT_EQ(count("outbox_old"), 100) << "an undelivered row was deleted";
  EXPECT_EQ(count("outbox_now"), 500);
  ASSERT_TRUE(kafka_->SetAllBrokersUp().ok());
  ASSERT_TRUE(WaitConfirmedPastCurrent(60s)) << run_status_.ToString();
  for (int i = 0; i < 300 && count("outbox_old") > 0; ++i) std::this_thread::sleep_for(100ms);
  EXPECT_EQ(count("outbox_old"), 0);
  EXPECT_EQ(count("outbox_now"), 500);
  EXPECT_EQ(DistinctIds(1100), 1100u);
}

// Issue 27, item 1, the janitor's twin: in a range-partitioned outbox, a round that
// deletes the expired delivered rows of an old partition leaves the undelivered rows of
// the current one, which sit at the same ctids, alone; in WAL mode (delivered = before the
// recorded bound) and in poll mode (delivered = published_at). Before the fix the DELETE
// matched ctids only and emptied the current partition too.
TEST_F(CleanupTest, JanitorDeletesOnlyTheDeliveredRowsOfTheOldPartition) {
  for (const bool poll : {false, true}) {
    SCOPED_TRACE(poll ? "poll mode" : "WAL mode");
    ASSERT_TRUE(pg_->Exec("DROP TABLE IF EXISTS pout; DROP TABLE IF EXISTS walrelay_progress;" +
                          PartitionedOutboxTableDdl("public.pout") + ";" +
                          PollColumnsSql("public.pout") +
                          ";CREATE TABLE pout_old PARTITION OF pout FOR VALUES FROM "
                          "('2000-01-01') TO ('2020-01-01');"
                          "CREATE TABLE pout_now PARTITION OF pout FOR VALUES FROM "
                          "('2020-01-01') TO ('2200-01-01');" +
                          ProgressTableDdl("walrelay_progress"))
                    .ok());
    // 100 delivered rows in the old partition, then the bound, then 100 undelivered rows
    // (inserted after the bound, not published) in the current one.
    ASSERT_TRUE(pg_->Exec("INSERT INTO pout (aggregate_id, event_type, payload, created_at, "
                          "published_at) SELECT 'a', 'E', '{}', '2001-01-01', now() FROM "
                          "generate_series(1, 100)")
                    .ok());
    ASSERT_TRUE(pg_->Exec("INSERT INTO walrelay_progress (slot, source, bound_snapshot, "
                          "bound_lsn) VALUES ('walrelay', '*', pg_current_snapshot(), '0/0')")
                    .ok());
    ASSERT_TRUE(pg_->Exec("INSERT INTO pout (aggregate_id, event_type, payload) SELECT 'b', 'E', "
                          "'{}' FROM generate_series(1, 100)")
                    .ok());
    // Most ctids stand in both partitions (the rows differ in width a little).
    ASSERT_GE(std::stoi(*pg_->QueryScalar("SELECT count(*) FROM pout_now WHERE ctid IN (SELECT "
                                          "ctid FROM pout_old)")),
              50);
    JanitorOptions o;
    o.conninfo = pg_->conninfo();
    o.slot = "walrelay";
    o.progress_table = "walrelay_progress";
    o.tables = {"public.pout"};
    o.created_at_column = "created_at";
    o.retention = 1ms;
    o.batch_rows = 30;
    o.poll_mode = poll;
    OutboxJanitor janitor(o);
    auto deleted = janitor.RunOnce();
    ASSERT_TRUE(deleted.ok()) << deleted.status().ToString();
    EXPECT_EQ(*deleted, 100u);
    EXPECT_EQ(*pg_->QueryScalar("SELECT count(*) FROM pout_old"), "0");
    EXPECT_EQ(*pg_->QueryScalar("SELECT count(*) FROM pout_now"), "100")
        << "undelivered rows of the current partition were deleted";
  }
}

TEST_F(CleanupTest, SameTransactionRefusesRecoveryAndPollMode) {
  config_.outbox_cleanup = OutboxCleanup::kSameTransaction;
  Status st = config_.Validate();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("--recovery-enabled false"), std::string::npos) << st.message();
  config_.recovery_enabled = false;
  EXPECT_TRUE(config_.Validate().ok()) << config_.Validate().ToString();
  config_.source_mode = SourceMode::kPoll;
  EXPECT_EQ(config_.Validate().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace walrelay::relay
