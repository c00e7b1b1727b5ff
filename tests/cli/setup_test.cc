// `walrelay setup` against a throwaway PostgreSQL: idempotent, --dry-run changes nothing,
// and `run` then streams from what setup made.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <string>

#include "tests/support/pg_cluster.h"

namespace walrelay::cli {
namespace {

struct CommandResult {
  int code = -1;
  std::string output;
};

CommandResult RunWalrelay(const std::string& args) {
  CommandResult r;
  const std::string cmd = std::string(WALRELAY_BINARY) + " " + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  const int status = ::pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

class SetupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto pg = testing::TestCluster::Start();
    ASSERT_TRUE(pg.ok()) << pg.status().ToString();
    pg_ = std::move(*pg);
    dsn_ = "--source-dsn \"" + pg_->conninfo() + "\"";
  }
  std::string Scalar(const std::string& sql) {
    auto v = pg_->QueryScalar(sql);
    return v.ok() ? *v : "<" + v.status().ToString() + ">";
  }
  std::unique_ptr<testing::TestCluster> pg_;
  std::string dsn_;
};

TEST_F(SetupTest, DryRunPrintsTheSqlAndChangesNothing) {
  CommandResult r = RunWalrelay("setup --dry-run --create-tables " + dsn_);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("CREATE TABLE IF NOT EXISTS \"public\".\"outbox\""), std::string::npos);
  EXPECT_NE(r.output.find("CREATE PUBLICATION \"walrelay_outbox\""), std::string::npos);
  EXPECT_NE(r.output.find("pg_create_logical_replication_slot('walrelay', 'pgoutput')"),
            std::string::npos);
  EXPECT_EQ(Scalar("SELECT count(*) FROM pg_replication_slots"), "0");
  EXPECT_EQ(Scalar("SELECT to_regclass('public.outbox') IS NULL"), "t");
}

// source.slot_failover (the default): on PostgreSQL 17+ the slot setup makes is a failover
// slot (standbys with sync_replication_slots keep it); before 17 setup makes an ordinary
// slot with the same statement. Off: an ordinary slot on every version.
TEST_F(SetupTest, MakesAFailoverSlotFrom17On) {
  const bool failover_slots = std::stoi(Scalar("SHOW server_version_num")) >= 170000;
  CommandResult r = RunWalrelay("setup --create-tables " + dsn_);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(Scalar("SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'walrelay'"), "1");
  if (failover_slots) {
    EXPECT_EQ(Scalar("SELECT failover FROM pg_replication_slots WHERE slot_name = 'walrelay'"), "t");
  }
  r = RunWalrelay("setup --create-tables " + dsn_ + " --source-slot plain --source-slot-failover false");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(Scalar("SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'plain'"), "1");
  if (failover_slots) {
    EXPECT_EQ(Scalar("SELECT failover FROM pg_replication_slots WHERE slot_name = 'plain'"), "f");
  }
}

// Issue 41 item 17: `setup --source-mode poll` counts as published the rows that WAL mode
// delivered before its recorded bound. Another deployment in the same database with the
// default slot name (deployment A streams public.outbox in WAL mode; deployment B polls
// public.b_outbox) has a progress row under the same slot: B's setup marked B's rows
// older than A's bound as published, and nobody ever published them. Only tables of the
// publication the WAL relay streamed count.
TEST_F(SetupTest, PollSetupMarksOnlyRowsTheWalRelayStreamed) {
  CommandResult r = RunWalrelay("setup --create-tables " + dsn_);  // deployment A: public.outbox, WAL mode
  ASSERT_EQ(r.code, 0) << r.output;
  r = RunWalrelay("setup --create-tables " + dsn_ + " --source-mode poll --source-table public.b_outbox");
  ASSERT_EQ(r.code, 0) << r.output;
  ASSERT_TRUE(pg_->Exec("INSERT INTO public.b_outbox (aggregate_type, aggregate_id, event_type, "
                        "payload) SELECT 'payment', 'b-' || g, 'E', '{}' FROM "
                        "generate_series(1, 10) g;"
                        "INSERT INTO public.outbox (aggregate_type, aggregate_id, event_type, "
                        "payload) SELECT 'payment', 'a-' || g, 'E', '{}' FROM "
                        "generate_series(1, 10) g")
                  .ok());
  // A's relay delivered everything so far and recorded its bound.
  ASSERT_TRUE(pg_->Exec("INSERT INTO walrelay_progress (slot, source, bound_snapshot, bound_lsn) "
                        "VALUES ('walrelay', '*', pg_current_snapshot(), "
                        "pg_current_wal_insert_lsn())")
                  .ok());
  r = RunWalrelay("setup --create-tables " + dsn_ + " --source-mode poll --source-table public.b_outbox");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(Scalar("SELECT count(*) FROM public.b_outbox WHERE published_at IS NULL"), "10")
      << "rows nobody published were marked published";
  // A's own switch to poll mode still counts what A delivered.
  r = RunWalrelay("setup --create-tables " + dsn_ + " --source-mode poll");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(Scalar("SELECT count(*) FROM public.outbox WHERE published_at IS NULL"), "0");
}

TEST_F(SetupTest, CreatesEverythingAndIsIdempotent) {
  for (int i = 0; i < 2; ++i) {
    CommandResult r = RunWalrelay("setup --create-tables " + dsn_ +
                                  " --source-table public.outbox --source-table "
                                  "billing.outbox");
    ASSERT_EQ(r.code, 0) << "run " << i << ": " << r.output;
  }
  EXPECT_EQ(Scalar("SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'walrelay' AND "
                   "plugin = 'pgoutput'"),
            "1");
  EXPECT_EQ(Scalar("SELECT string_agg(schemaname || '.' || tablename, ',' ORDER BY schemaname, "
                   "tablename) FROM "
                   "pg_publication_tables WHERE pubname = 'walrelay_outbox'"),
            "billing.outbox,public.outbox");
  EXPECT_EQ(Scalar("SELECT to_regclass('walrelay_dead_letter') IS NOT NULL"), "t");
  // Queue-table autovacuum settings on the outbox tables it created (issue 14).
  EXPECT_EQ(Scalar("SELECT array_to_string(reloptions, ',') FROM pg_class WHERE oid = "
                   "'billing.outbox'::regclass"),
            "autovacuum_vacuum_scale_factor=0,autovacuum_vacuum_threshold=10000,"
            "autovacuum_vacuum_insert_scale_factor=0,autovacuum_vacuum_insert_threshold=100000,"
            "autovacuum_vacuum_cost_delay=0,fillfactor=100");
  // The unbounded max_slot_wal_keep_size of a default cluster is called out.
  CommandResult r = RunWalrelay("setup --create-tables " + dsn_);
  EXPECT_NE(r.output.find("max_slot_wal_keep_size = -1"), std::string::npos) << r.output;
}

// Cleanup design "partitions" (issue 14): setup makes the outbox range-partitioned on
// created_at, with the partitions of today and the next six days, published through its
// root; again, it changes nothing; a write lands in today's partition.
TEST_F(SetupTest, PartitionedOutboxWithAWeekOfPartitionsAhead) {
  for (int i = 0; i < 2; ++i) {
    CommandResult r = RunWalrelay("setup --create-tables " + dsn_ +
                                  " --outbox-cleanup partitions --outbox-retention-ms 86400000");
    ASSERT_EQ(r.code, 0) << "run " << i << ": " << r.output;
  }
  EXPECT_EQ(Scalar("SELECT relkind FROM pg_class WHERE oid = 'public.outbox'::regclass"), "p");
  EXPECT_EQ(Scalar("SELECT count(*) FROM pg_inherits WHERE inhparent = 'public.outbox'::regclass"),
            "7");
  EXPECT_EQ(Scalar("SELECT pubviaroot FROM pg_publication WHERE pubname = 'walrelay_outbox'"), "t");
  ASSERT_TRUE(pg_->Exec("INSERT INTO outbox (aggregate_id, event_type, payload) VALUES ('a', "
                        "'E', '{}')")
                  .ok());
  EXPECT_EQ(Scalar("SELECT tableoid::regclass::text = 'outbox_p' || to_char(now() AT TIME ZONE "
                   "'UTC', 'YYYYMMDD') FROM outbox"),
            "t");
}

// Issue 27, item 7: setup on an outbox the user made partitioned (range, list, hash),
// not one setup made. PostgreSQL refuses storage parameters on a partitioned parent and
// CREATE INDEX CONCURRENTLY on a partitioned table: the queue-table settings go to every
// leaf partition, the poll indexes are built on the parent and its partitions. Both modes,
// twice each (idempotent).
TEST_F(SetupTest, UserPartitionedOutboxOfEveryKindGoesThroughSetupInBothModes) {
  const std::string columns =
      "id bigint GENERATED ALWAYS AS IDENTITY, event_id uuid NOT NULL DEFAULT "
      "gen_random_uuid(), aggregate_type text, aggregate_id text NOT NULL, topic text, "
      "event_type text NOT NULL, payload jsonb NOT NULL, headers jsonb, created_at timestamptz "
      "NOT NULL DEFAULT now()";
  ASSERT_TRUE(
      pg_->Exec("CREATE TABLE o_range (" + columns +
                ", PRIMARY KEY (id, created_at)) PARTITION BY RANGE (created_at);"
                "CREATE TABLE o_range_a PARTITION OF o_range FOR VALUES FROM ('2000-01-01') TO "
                "('2100-01-01');"
                "CREATE TABLE o_range_b PARTITION OF o_range FOR VALUES FROM ('2100-01-01') TO "
                "('2200-01-01') PARTITION BY RANGE (created_at);"  // two levels
                "CREATE TABLE o_range_b1 PARTITION OF o_range_b FOR VALUES FROM ('2100-01-01') "
                "TO ('2200-01-01');"
                "CREATE TABLE o_list (" +
                columns +
                ", region text NOT NULL, PRIMARY KEY (id, region)) PARTITION BY LIST (region);"
                "CREATE TABLE o_list_eu PARTITION OF o_list FOR VALUES IN ('eu');"
                "CREATE TABLE o_hash (" +
                columns +
                ", PRIMARY KEY (id, aggregate_id)) PARTITION BY HASH (aggregate_id);"
                "CREATE TABLE o_hash_0 PARTITION OF o_hash FOR VALUES WITH (MODULUS 2, REMAINDER "
                "0);"
                "CREATE TABLE o_hash_1 PARTITION OF o_hash FOR VALUES WITH (MODULUS 2, REMAINDER "
                "1)")
          .ok());
  const std::string tables =
      " --source-table public.o_range --source-table public.o_list --source-table public.o_hash";
  for (const char* mode : {"wal", "poll"}) {
    for (int i = 0; i < 2; ++i) {
      CommandResult r = RunWalrelay("setup --create-tables " + dsn_ + tables + " --source-mode " + mode);
      ASSERT_EQ(r.code, 0) << mode << " run " << i << ": " << r.output;
    }
  }
  const std::string settings =
      "autovacuum_vacuum_scale_factor=0,autovacuum_vacuum_threshold=10000,"
      "autovacuum_vacuum_insert_scale_factor=0,autovacuum_vacuum_insert_threshold=100000,"
      "autovacuum_vacuum_cost_delay=0,fillfactor=100";
  for (const char* leaf : {"o_range_a", "o_range_b1", "o_list_eu", "o_hash_0", "o_hash_1"}) {
    EXPECT_EQ(Scalar("SELECT array_to_string(reloptions, ',') FROM pg_class WHERE relname = '" +
                     std::string(leaf) + "'"),
              settings)
        << leaf;
  }
  EXPECT_EQ(Scalar("SELECT count(*) FROM pg_class WHERE relname IN ('o_range', 'o_range_b', "
                   "'o_list', 'o_hash') AND reloptions IS NULL"),
            "4");
  // Both poll indexes on every table, valid, and on every leaf through the parent's.
  EXPECT_EQ(Scalar("SELECT count(*) FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid "
                   "WHERE c.relname ~ '^o_(range|list|hash)_(unpublished|waiting)$' AND "
                   "i.indisvalid"),
            "6");
  EXPECT_EQ(Scalar("SELECT count(*) FROM pg_index i JOIN pg_class t ON t.oid = i.indrelid WHERE "
                   "t.relname IN ('o_range_a', 'o_range_b1', 'o_list_eu', 'o_hash_0', "
                   "'o_hash_1') AND pg_get_expr(i.indpred, i.indrelid) LIKE '%published_at IS "
                   "NULL%'"),
            "10");
  EXPECT_EQ(Scalar("SELECT string_agg(tablename, ',' ORDER BY tablename) FROM "
                   "pg_publication_tables WHERE pubname = 'walrelay_outbox'"),
            "o_hash,o_list,o_range");
}

// Issue 27, item 2: setup never makes a slot anew where walrelay streamed one before (its
// progress row exists): a slot made now would start now and skip every event committed
// since the old one was lost or dropped. It says so, and `run` recovers or refuses.
TEST_F(SetupTest, NoSlotAnewWhereWalrelayStreamedOneBefore) {
  CommandResult first = RunWalrelay("setup --create-tables " + dsn_);
  ASSERT_EQ(first.code, 0) << first.output;
  ASSERT_TRUE(pg_->Exec("INSERT INTO walrelay_progress (slot, source, bound_snapshot, bound_lsn) "
                        "VALUES ('walrelay', '*', pg_current_snapshot(), "
                        "pg_current_wal_insert_lsn());"
                        "SELECT pg_drop_replication_slot('walrelay')")
                  .ok());
  CommandResult again = RunWalrelay("setup --create-tables " + dsn_);
  ASSERT_EQ(again.code, 0) << again.output;
  EXPECT_EQ(Scalar("SELECT count(*) FROM pg_replication_slots"), "0");
  EXPECT_NE(again.output.find("slot walrelay: NOT created"), std::string::npos)
      << again.output;
  EXPECT_NE(again.output.find("`walrelay run` recovers it"), std::string::npos) << again.output;
}

// Issue 42 item 2: a misspelled --source-table made a new empty outbox table, a
// publication and a slot for it, and said "setup complete"; the relay then streamed the
// empty table while the real one's events were never published. Now setup creates an
// outbox table only with --create-tables, refuses a missing one before creating anything
// (exit 2, with the tables that look like outbox tables), and says per object whether it
// existed or was created.
TEST_F(SetupTest, AMisspelledOutboxTableIsRefusedAndNothingIsCreated) {
  ASSERT_TRUE(pg_->Exec("CREATE TABLE public.outbox (id bigint GENERATED ALWAYS AS IDENTITY "
                        "PRIMARY KEY, event_id uuid NOT NULL DEFAULT gen_random_uuid(), "
                        "aggregate_type text, aggregate_id text NOT NULL, topic text, event_type "
                        "text NOT NULL, payload jsonb NOT NULL, headers jsonb, created_at "
                        "timestamptz NOT NULL DEFAULT now())")
                  .ok());
  CommandResult r = RunWalrelay("setup " + dsn_ + " --source-table public.outbx");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("outbox table public.outbx does not exist"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("did you mean one of them?"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("public.outbox"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--create-tables"), std::string::npos) << r.output;
  EXPECT_EQ(Scalar("SELECT to_regclass('public.outbx') IS NULL"), "t");
  EXPECT_EQ(Scalar("SELECT count(*) FROM pg_publication"), "0");
  EXPECT_EQ(Scalar("SELECT count(*) FROM pg_replication_slots"), "0");
  EXPECT_EQ(Scalar("SELECT to_regclass('walrelay_dead_letter') IS NULL"), "t");

  // The right name: the table existed, the rest is created, one line each.
  r = RunWalrelay("setup " + dsn_);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("outbox table public.outbox: existed\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("dead-letter table walrelay_dead_letter: created\n"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("publication walrelay_outbox: created\n"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("slot walrelay: created (pgoutput)\n"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("NOTICE"), std::string::npos) << r.output;
  r = RunWalrelay("setup " + dsn_);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("dead-letter table walrelay_dead_letter: existed\n"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("slot walrelay: existed\n"), std::string::npos) << r.output;

  // Asked to: a new table is created, and says so.
  r = RunWalrelay("setup --create-tables " + dsn_ +
                  " --source-table public.outbox --source-table app.more_events --source-slot s2 "
                  "--source-publication p2");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("outbox table app.more_events: created (--create-tables)"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(Scalar("SELECT to_regclass('app.more_events') IS NOT NULL"), "t");
}

TEST_F(SetupTest, CreatesTheSlotOfTheConfiguredPlugin) {
  CommandResult r = RunWalrelay("setup --create-tables " + dsn_ + " --source-plugin wal2json");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(Scalar("SELECT plugin FROM pg_replication_slots WHERE slot_name = 'walrelay'"),
            "wal2json");
}

// --source-create-slot false (accepted by setup like every run option) was ignored: setup
// made the slot anyway, a slot nobody reads that pins WAL. Now it makes everything else
// and says how the slot will come.
TEST_F(SetupTest, NoSlotWhenCreateSlotIsOff) {
  CommandResult r = RunWalrelay("setup --create-tables " + dsn_ + " --source-create-slot false");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(Scalar("SELECT count(*) FROM pg_replication_slots"), "0");
  EXPECT_EQ(Scalar("SELECT count(*) FROM pg_publication WHERE pubname = 'walrelay_outbox'"), "1");
  EXPECT_NE(r.output.find("slot walrelay: not created (source.create_slot = false)"), std::string::npos) << r.output;
}

TEST_F(SetupTest, WrongWalLevelIsExplained) {
  ASSERT_TRUE(pg_->Exec("ALTER SYSTEM SET wal_level = replica").ok());
  ASSERT_TRUE(pg_->Restart().ok());
  CommandResult r = RunWalrelay("setup --create-tables " + dsn_);
  EXPECT_EQ(r.code, 2) << "a configuration no rerun cures";
  EXPECT_NE(r.output.find("wal_level = logical"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace walrelay::cli
