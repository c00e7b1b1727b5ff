// Which relations are outbox tables (architecture invariant 8): configured names are
// resolved by the server with SQL's rules and the stream is matched by OID; a partitioned
// outbox publishes through its root. Each test here lost every event before the relay
// matched relations by OID and created its publication with publish_via_partition_root.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "tests/relay/relay_fixture.h"

namespace walrelay::relay {
namespace {

using namespace std::chrono_literals;

// `n` events of aggregate_type 'payment' into `table` (SQL text), payload seq from `first`.
std::string InsertEvents(const std::string& table, int first, int n,
                         const std::string& extra_columns = "", const std::string& extra = "") {
  return "INSERT INTO " + table + " (aggregate_type, aggregate_id, event_type, payload" +
         extra_columns + ") SELECT 'payment', 'agg-' || (g % 7), 'PaymentCaptured', " +
         "jsonb_build_object('seq', g)" + extra + " FROM generate_series(" + std::to_string(first) +
         ", " + std::to_string(first + n - 1) + ") g";
}

// Unquoted names fold to lower case and quoted ones keep their case, in the configuration
// exactly as in SQL: both tables' events arrive.
TEST_F(RelayTest, MixedCaseTableNamesAreResolvedAsSqlDoes) {
  ASSERT_TRUE(pg_->Exec(OutboxTableDdl("public.folded")).ok());  // CREATE TABLE Folded folds so
  ASSERT_TRUE(pg_->Exec(OutboxTableDdl("public.\"Payments\"")).ok());  // public."Payments"
  config_.tables = {"public.Folded", "public.\"Payments\""};
  StartRelay();
  ASSERT_TRUE(pg_->Exec(InsertEvents("Folded", 0, 20)).ok());
  ASSERT_TRUE(pg_->Exec(InsertEvents("\"Payments\"", 100, 30)).ok());
  const auto ids = DistinctEventIds(50, 30s);
  EXPECT_EQ(ids.size(), 50u) << "events of a table named with other case were not published";
  ASSERT_TRUE(WaitConfirmedPastCurrent(30s));
  EXPECT_EQ(relay_->stats().events_dead_lettered.load(), 0u);
}

// A time-partitioned outbox: changes arrive under the root's OID, partitions attached or
// detached while streaming change nothing, and a restart passes the publication check.
TEST_F(RelayTest, PartitionedOutboxPublishesThroughItsRoot) {
  ASSERT_TRUE(pg_->Exec("CREATE TABLE pouts (id bigint GENERATED ALWAYS AS IDENTITY, event_id uuid "
                        "NOT NULL DEFAULT gen_random_uuid(), aggregate_type text, aggregate_id "
                        "text NOT NULL, topic text, event_type text NOT NULL, payload jsonb NOT "
                        "NULL, headers jsonb, created_at timestamptz NOT NULL, PRIMARY KEY (id, "
                        "created_at)) PARTITION BY RANGE (created_at);"
                        "CREATE TABLE \"Pouts_2026\" PARTITION OF pouts FOR VALUES FROM "
                        "('2026-01-01') TO ('2027-01-01');")
                  .ok());
  config_.tables = {"public.pouts"};
  StartRelay();
  const std::string in_2026 = ", timestamptz '2026-06-01'";
  const std::string in_2027 = ", timestamptz '2027-06-01'";
  ASSERT_TRUE(pg_->Exec(InsertEvents("pouts", 0, 40, ", created_at", in_2026)).ok());
  EXPECT_EQ(DistinctEventIds(40, 30s).size(), 40u) << "rows of a partition were not published";

  // Attach a partition while streaming, detach the old one: rows of the new partition are
  // events; rows written into the detached table are not outbox rows any more.
  ASSERT_TRUE(pg_->Exec("CREATE TABLE pouts_2027 PARTITION OF pouts FOR VALUES FROM "
                        "('2027-01-01') TO ('2028-01-01');"
                        "ALTER TABLE pouts DETACH PARTITION \"Pouts_2026\";")
                  .ok());
  ASSERT_TRUE(pg_->Exec(InsertEvents("pouts", 40, 25, ", created_at", in_2027)).ok());
  // (A detached partition keeps no identity default: the id is given.)
  ASSERT_TRUE(
      pg_->Exec(InsertEvents("\"Pouts_2026\"", 1000, 5, ", created_at, id", in_2026 + ", g")).ok());
  EXPECT_EQ(DistinctEventIds(65, 30s).size(), 65u);
  ASSERT_TRUE(WaitConfirmedPastCurrent(30s));

  // A new relay (new session, startup checks again) on the same publication and slot.
  StopRelay();
  StartRelay();
  ASSERT_TRUE(pg_->Exec(InsertEvents("pouts", 65, 10, ", created_at", in_2027)).ok());
  EXPECT_EQ(DistinctEventIds(75, 30s).size(), 75u);
  ASSERT_TRUE(WaitConfirmedPastCurrent(30s));
  EXPECT_EQ(relay_->stats().events_dead_lettered.load(), 0u);
  auto via_root =
      pg_->QueryScalar("SELECT pubviaroot FROM pg_publication WHERE pubname = 'walrelay_outbox'");
  ASSERT_TRUE(via_root.ok());
  EXPECT_EQ(*via_root, "t");
}

// A publication altered while the relay runs so that it skips outbox rows (here: no longer
// publishing inserts) is refused at the next session start, with the fix: the relay stops
// (kInvalidArgument, exit 2) and the slot is not confirmed past the rows committed since.
// Before, the new session streamed on, ready, confirming the slot past events that never
// reached Kafka.
TEST_F(RelayTest, PublicationAlteredToSkipInsertsStopsTheRelayAtTheNextSession) {
  StartRelay();
  ASSERT_TRUE(pg_->Exec(InsertEvents("outbox", 0, 10)).ok());
  ASSERT_EQ(DistinctEventIds(10, 30s).size(), 10u);
  ASSERT_TRUE(WaitConfirmedPastCurrent(30s));
  const Lsn confirmed_before = ConfirmedFlush();

  // The alteration, then a new session: the walsender ends as in a network cut.
  ASSERT_TRUE(pg_->Exec("ALTER PUBLICATION walrelay_outbox SET (publish = 'update, delete')").ok());
  ASSERT_TRUE(pg_->Exec(InsertEvents("outbox", 10, 5)).ok());
  auto written = pg_->QueryScalar("SELECT pg_current_wal_lsn()");
  ASSERT_TRUE(written.ok());
  auto terminated = pg_->QueryScalar(
      "SELECT count(pg_terminate_backend(active_pid)) FROM pg_replication_slots WHERE "
      "active_pid IS NOT NULL");
  ASSERT_TRUE(terminated.ok());
  ASSERT_EQ(*terminated, "1") << "premise: the relay's walsender was streaming";

  ASSERT_TRUE(testing::WaitFor([&] { return run_returned_.load(); }, 30s))
      << "the relay kept running on a publication that skips inserts";
  thread_.join();
  relay_.reset();
  EXPECT_EQ(run_status_.code(), StatusCode::kInvalidArgument) << run_status_.ToString();
  EXPECT_NE(run_status_.message().find("ALTER PUBLICATION walrelay_outbox SET (publish = "
                                       "'insert, update, delete');"),
            std::string::npos)
      << run_status_.ToString();
  const std::optional<Lsn> after = Lsn::Parse(*written);
  ASSERT_TRUE(after.has_value());
  EXPECT_LT(ConfirmedFlush(), *after)
      << "the slot was confirmed past rows the publication skipped (confirmed before the "
         "alteration: "
      << confirmed_before.ToString() << ")";
}

// A publication wider than the outbox: changes of other tables are counted, never silent,
// and the outbox's events still arrive.
TEST_F(RelayTest, ChangesOfOtherTablesAreCounted) {
  ASSERT_TRUE(pg_->Exec("CREATE TABLE ledger (id int PRIMARY KEY, note text);"
                        "CREATE PUBLICATION walrelay_outbox FOR TABLE outbox, ledger;")
                  .ok());
  StartRelay();
  ASSERT_TRUE(pg_->Exec("INSERT INTO ledger SELECT g, 'x' FROM generate_series(1, 12) g").ok());
  ASSERT_TRUE(pg_->Exec(InsertEvents("outbox", 0, 8)).ok());
  EXPECT_EQ(DistinctEventIds(8, 30s).size(), 8u);
  ASSERT_TRUE(WaitConfirmedPastCurrent(30s));
  EXPECT_EQ(relay_->stats().skipped_other_tables.load(), 12u);
  EXPECT_NE(relay_->RenderMetrics().find("walrelay_events_skipped_total{kind=\"other_table\"} 12"),
            std::string::npos)
      << relay_->RenderMetrics();
}

// A URI DSN with a password (from --source-password-file or PGPASSWORD): every connection
// of the relay accepts it. The password used to be appended as a keyword, which made libpq
// refuse the whole URI, and the replication connection appended "replication=database".
TEST_F(RelayTest, UriDsnWithAPasswordStreams) {
  config_.source_dsn =
      "postgresql://walrelay@127.0.0.1:" + std::to_string(pg_->port()) + "/postgres";
  config_.source_password = "unused with trust, but it must travel";
  StartRelay();
  ASSERT_TRUE(pg_->Exec(InsertEvents("outbox", 0, 10)).ok());
  EXPECT_EQ(DistinctEventIds(10, 30s).size(), 10u);
  ASSERT_TRUE(WaitConfirmedPastCurrent(30s));
}

}  // namespace
}  // namespace walrelay::relay
