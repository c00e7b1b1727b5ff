// Slot guard, thresholds and startup checks. The pure parts (sizes, thresholds,
// EvaluateSlot) run without a server; the rest against a throwaway PostgreSQL 15
// (TestCluster): a slot created and never read while the database churns crosses warn,
// then critical; a small max_slot_wal_keep_size gets a slot invalidated ('lost').
#include "src/relay/lifecycle/slot_guard.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <thread>

#include "src/metrics/registry.h"
#include "src/relay/core/metric_names.h"
#include "src/relay/lifecycle/table_health.h"
#include "src/relay/run/startup_checks.h"
#include "tests/support/pg_cluster.h"
#include "tests/support/wait.h"

namespace walrelay::relay {
namespace {

using testing::TestCluster;
namespace mn = metric_names;

constexpr uint64_t kMB = 1024 * 1024;

// ---------------------------------------------------------------------------- pure

TEST(ByteSizeTest, ParsesUnitsAndFormatsHumanReadable) {
  EXPECT_EQ(*ParseByteSize("1048576"), kMB);
  EXPECT_EQ(*ParseByteSize("512MB"), 512 * kMB);
  EXPECT_EQ(*ParseByteSize("512 mb"), 512 * kMB);
  EXPECT_EQ(*ParseByteSize("1.5GB"), 1536 * kMB);
  EXPECT_EQ(*ParseByteSize("64kB"), 64u * 1024);
  EXPECT_EQ(*ParseByteSize("2GiB"), 2048 * kMB);
  EXPECT_EQ(*ParseByteSize("1TB"), 1024 * 1024 * kMB);
  EXPECT_FALSE(ParseByteSize("").ok());
  EXPECT_FALSE(ParseByteSize("12XB").ok());
  EXPECT_FALSE(ParseByteSize("-5MB").ok());
  EXPECT_FALSE(ParseByteSize("MB").ok());
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(1023), "1023 B");
  EXPECT_EQ(FormatBytes(1536), "1.50 kB");
  EXPECT_EQ(FormatBytes(16 * kMB), "16.0 MB");
  EXPECT_EQ(FormatBytes(300 * kMB), "300 MB");
  EXPECT_EQ(FormatBytes(3 * 1024 * kMB + 256 * kMB), "3.25 GB");
}

TEST(ThresholdTest, BytesOrFractionOfMaxSlotWalKeepSize) {
  auto b = Threshold::Parse("512MB");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->kind, Threshold::Kind::kBytes);
  EXPECT_EQ(b->Resolve(-1), 512 * kMB);
  auto f = Threshold::Parse("0.5");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->kind, Threshold::Kind::kFraction);
  EXPECT_EQ(f->Resolve(64 * kMB), 32 * kMB);
  EXPECT_EQ(f->Resolve(-1), std::nullopt);  // a fraction of unlimited does not apply
  EXPECT_EQ(Threshold::Parse("80%")->Resolve(100), 80u);
  EXPECT_EQ(Threshold::Parse("none")->kind, Threshold::Kind::kNone);
  EXPECT_EQ(Threshold::Parse("")->Resolve(100), std::nullopt);
  EXPECT_FALSE(Threshold::Parse("1.5").ok());
  EXPECT_FALSE(Threshold::Parse("0").ok() &&
               Threshold::Parse("0")->kind != Threshold::Kind::kBytes);
  EXPECT_FALSE(Threshold::Parse("150%").ok());
  EXPECT_FALSE(Threshold::Parse("lots").ok());
  EXPECT_EQ(Threshold::Parse("0.25")->ToString(), "0.25 of max_slot_wal_keep_size");
}

slot::SlotInfo FakeSlot(uint64_t current, uint64_t restart, std::string wal_status = "reserved") {
  slot::SlotInfo s;
  s.slot_name = "s";
  s.slot_type = "logical";
  s.current_wal_lsn = Lsn(current);
  s.restart_lsn = Lsn(restart);
  s.confirmed_flush_lsn = Lsn(restart);
  s.wal_status = std::move(wal_status);
  s.invalidation_reason = slot::SlotInvalidation(s.wal_status, std::nullopt, "");
  return s;
}

TEST(EvaluateSlotTest, StatesFollowRetainedBytesAndWalStatus) {
  const Threshold warn = Threshold::Bytes(10 * kMB);
  const Threshold crit = Threshold::Fraction(0.5);
  const int64_t keep = 100 * kMB;  // critical resolves to 50 MB
  EXPECT_EQ(EvaluateSlot(FakeSlot(5 * kMB, 0), keep, warn, crit).state, SlotState::kOk);
  EXPECT_EQ(EvaluateSlot(FakeSlot(10 * kMB, 0), keep, warn, crit).state, SlotState::kWarn);
  auto c = EvaluateSlot(FakeSlot(60 * kMB, 0), keep, warn, crit);
  EXPECT_EQ(c.state, SlotState::kCritical);
  EXPECT_EQ(c.critical_bytes, 50 * kMB);
  EXPECT_EQ(c.measured_bytes, 60 * kMB);
  EXPECT_EQ(EvaluateSlot(FakeSlot(60 * kMB, 0), -1, warn, crit).state, SlotState::kWarn);
  EXPECT_EQ(EvaluateSlot(FakeSlot(1, 0, "unreserved"), keep, warn, crit).state,
            SlotState::kCritical);
  slot::SlotInfo lost = FakeSlot(1, 0, "lost");
  lost.restart_lsn.reset();
  EXPECT_EQ(EvaluateSlot(lost, keep, warn, crit).state, SlotState::kLost);
  // Invalidated for another reason (PostgreSQL 16+: conflict, 18: idle timeout) while
  // wal_status still reads 'reserved': lost all the same, and the reason says why.
  slot::SlotInfo idle = FakeSlot(1, 0, "reserved");
  idle.invalidation_reason = "idle_timeout";
  auto e = EvaluateSlot(idle, keep, warn, crit);
  EXPECT_EQ(e.state, SlotState::kLost);
  EXPECT_NE(e.reason.find("idle_replication_slot_timeout"), std::string::npos) << e.reason;
  EXPECT_EQ(EvaluateSlot(FakeSlot(1 << 30, 0), keep, Threshold::None(), Threshold::None()).state,
            SlotState::kOk);
  EXPECT_EQ(SlotStateSeverity(SlotState::kLost), 2);
  EXPECT_EQ(SlotStateName(SlotState::kMissing), "missing");
}

// ---------------------------------------------------------------------------- server

// Writes about `mb` MB of WAL.
void Churn(TestCluster& c, int mb) {
  ASSERT_TRUE(c.Exec("INSERT INTO churn(pad) SELECT repeat(md5(g::text), 28) FROM "
                     "generate_series(1, " +
                     std::to_string(mb * 900) + ") g")
                  .ok());
}

class SlotGuardTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto c = TestCluster::Start();
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    cluster_ = std::move(c).value().release();
    ASSERT_TRUE(cluster_
                    ->Exec("CREATE TABLE churn (id bigserial PRIMARY KEY, pad text);"
                           "CREATE TABLE outbox (id bigserial PRIMARY KEY, payload text);"
                           "CREATE TABLE other (id int PRIMARY KEY);"
                           "CREATE ROLE norepl LOGIN;")
                    .ok());
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  static TestCluster* cluster_;
};
TestCluster* SlotGuardTest::cluster_ = nullptr;

TEST_F(SlotGuardTest, UnreadSlotCrossesWarnThenCriticalWithMetrics) {
  ASSERT_TRUE(
      cluster_->Exec("SELECT pg_create_logical_replication_slot('guard_slot', 'pgoutput')").ok());
  metrics::Registry registry;
  std::mutex mu;
  std::vector<std::pair<SlotState, SlotState>> changes;
  SlotGuardOptions o;
  o.conninfo = cluster_->conninfo();
  o.slot = "guard_slot";
  o.warn = *Threshold::Parse("4MB");
  o.critical = *Threshold::Parse("12MB");
  o.registry = &registry;
  o.on_change = [&](SlotState from, SlotState to, const slot::SlotInfo* s) {
    EXPECT_EQ(s == nullptr, to == SlotState::kMissing);
    std::lock_guard lock(mu);
    changes.emplace_back(from, to);
  };
  SlotGuard guard(o);
  auto st = guard.Poll();
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(*st, SlotState::kOk);

  std::vector<SlotState> seen = {SlotState::kOk};
  for (int i = 0; i < 40 && guard.state() != SlotState::kCritical; ++i) {
    Churn(*cluster_, 1);
    st = guard.Poll();
    ASSERT_TRUE(st.ok()) << st.status().ToString();
    if (*st != seen.back()) seen.push_back(*st);
  }
  EXPECT_EQ(seen, (std::vector<SlotState>{SlotState::kOk, SlotState::kWarn, SlotState::kCritical}));
  {
    std::lock_guard lock(mu);
    ASSERT_EQ(changes.size(), 3u);  // start->ok, ok->warn, warn->critical
    EXPECT_EQ(changes[1], std::make_pair(SlotState::kOk, SlotState::kWarn));
    EXPECT_EQ(changes[2], std::make_pair(SlotState::kWarn, SlotState::kCritical));
  }
  auto snap = guard.last();
  ASSERT_TRUE(snap.has_value());
  ASSERT_TRUE(snap->slot.has_value());
  EXPECT_GE(*snap->slot->retained_wal_bytes(), 12 * kMB);
  EXPECT_FALSE(snap->slot->active);

  auto parsed = metrics::ParseExposition(registry.Render());
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  const metrics::Labels slot = {{"slot", "guard_slot"}};
  const auto* retained = parsed->Find(mn::kSlotRetainedBytes.name.data(), slot);
  ASSERT_NE(retained, nullptr);
  EXPECT_GE(retained->value, 12.0 * kMB);
  EXPECT_EQ(
      parsed
          ->Find(std::string(mn::kSlotState.name), {{"slot", "guard_slot"}, {"state", "critical"}})
          ->value,
      1);
  EXPECT_EQ(
      parsed->Find(std::string(mn::kSlotState.name), {{"slot", "guard_slot"}, {"state", "ok"}})
          ->value,
      0);
  EXPECT_EQ(parsed
                ->Find(std::string(mn::kSlotWalStatus.name),
                       {{"slot", "guard_slot"}, {"status", "reserved"}})
                ->value,
            1);
  EXPECT_EQ(parsed->Find(std::string(mn::kSlotCriticalThreshold.name), slot)->value, 12.0 * kMB);
  EXPECT_EQ(parsed->Find(std::string(mn::kSlotSafeWalSize.name), slot)->value, -1);  // unlimited
  EXPECT_EQ(parsed->Find(std::string(mn::kMaxSlotWalKeepSize.name))->value, -1);
  EXPECT_GE(parsed->Find(std::string(mn::kSlotGuardPolls.name), slot)->value, 3);
  EXPECT_EQ(parsed->Find(std::string(mn::kSlotGuardErrors.name), slot)->value, 0);
  EXPECT_TRUE(registry.errors().empty());

  // Advancing the slot confirms everything: the confirmed lag drops (restart_lsn, and so
  // the retained bytes, follow only once the server logs a new running-xacts record).
  ASSERT_TRUE(
      cluster_->Exec("SELECT pg_replication_slot_advance('guard_slot', pg_current_wal_lsn())")
          .ok());
  ASSERT_TRUE(guard.Poll().ok());
  EXPECT_LT(*guard.last()->slot->confirmed_lag_bytes(), kMB);
  ASSERT_TRUE(cluster_->Exec("SELECT pg_drop_replication_slot('guard_slot')").ok());
  st = guard.Poll();
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(*st, SlotState::kMissing);
}

// Issue 14: table health reads real values: the dead tuples a DELETE left (autovacuum off
// for the table, so they stay), and an invalid index left by a failed CREATE INDEX
// CONCURRENTLY; exported as gauges labelled with the table.
TEST_F(SlotGuardTest, TableHealthReadsDeadTuplesAndInvalidIndexes) {
  using namespace std::chrono_literals;
  ASSERT_TRUE(cluster_
                  ->Exec("CREATE TABLE health (id int, v int) WITH (autovacuum_enabled = false);"
                         "INSERT INTO health SELECT g, g % 10 FROM generate_series(1, 1000) g;"
                         "DELETE FROM health WHERE id <= 400;")
                  .ok());
  // Fails on the duplicate values of v and leaves the index behind, invalid.
  EXPECT_FALSE(cluster_->Exec("CREATE UNIQUE INDEX CONCURRENTLY health_v ON health (v)").ok());
  metrics::Registry registry;
  TableHealthMonitor monitor(cluster_->conninfo(), {"public.health", "public.missing"}, 1s,
                             &registry);
  std::string text;
  for (auto until = std::chrono::steady_clock::now() + 20s;
       std::chrono::steady_clock::now() < until; std::this_thread::sleep_for(100ms)) {
    ASSERT_TRUE(monitor.Poll().ok());
    text = registry.Render();
    // The server's statistics arrive a moment after the statements.
    if (text.find("walrelay_table_dead_rows{table=\"health\"} 400") != std::string::npos) break;
  }
  EXPECT_NE(text.find("walrelay_table_dead_rows{table=\"health\"} 400"), std::string::npos)
      << text;
  EXPECT_NE(text.find("walrelay_table_live_rows{table=\"health\"} 600"), std::string::npos);
  EXPECT_NE(text.find("walrelay_table_invalid_indexes{table=\"health\"} 1"), std::string::npos);
  EXPECT_NE(text.find("walrelay_table_seconds_since_vacuum{table=\"health\"} -1"),
            std::string::npos);
  EXPECT_EQ(text.find("missing"), std::string::npos) << "a table that does not exist is skipped";
  auto rows = ReadTableHealth(nullptr, {});
  EXPECT_TRUE(rows.ok() && rows->empty());
}

// A partitioned table (outbox.cleanup partitions) has no rows of its own: its health is the
// sum over its partitions, with the count of partitions.
TEST_F(SlotGuardTest, TableHealthOfAPartitionedTableSumsItsPartitions) {
  using namespace std::chrono_literals;
  ASSERT_TRUE(cluster_
                  ->Exec("CREATE TABLE parted (id int, v int) PARTITION BY RANGE (id);"
                         "CREATE TABLE parted_1 PARTITION OF parted FOR VALUES FROM (0) TO (500) "
                         "WITH (autovacuum_enabled = false);"
                         "CREATE TABLE parted_2 PARTITION OF parted FOR VALUES FROM (500) TO "
                         "(1000) WITH (autovacuum_enabled = false);"
                         "INSERT INTO parted SELECT g, g FROM generate_series(0, 999) g;"
                         "DELETE FROM parted WHERE id % 10 = 0;")
                  .ok());
  metrics::Registry registry;
  TableHealthMonitor monitor(cluster_->conninfo(), {"public.parted"}, 1s, &registry);
  std::string text;
  for (auto until = std::chrono::steady_clock::now() + 20s;
       std::chrono::steady_clock::now() < until; std::this_thread::sleep_for(100ms)) {
    ASSERT_TRUE(monitor.Poll().ok());
    text = registry.Render();
    if (text.find("walrelay_table_dead_rows{table=\"parted\"} 100") != std::string::npos) break;
  }
  EXPECT_NE(text.find("walrelay_table_dead_rows{table=\"parted\"} 100"), std::string::npos)
      << text;
  EXPECT_NE(text.find("walrelay_table_live_rows{table=\"parted\"} 900"), std::string::npos);
  EXPECT_NE(text.find("walrelay_table_partitions{table=\"parted\"} 2"), std::string::npos);
  EXPECT_EQ(text.find("walrelay_table_size_bytes{table=\"parted\"} 0\n"), std::string::npos)
      << "the partitions' size is the table's";
}

// Ages (issue 14): the oldest row by the timestamp column, measured only when an index
// leads with it; the oldest partition by its lower bound when partitioned by time.
TEST_F(SlotGuardTest, TableHealthAgesOfTheOldestRowAndPartition) {
  ASSERT_TRUE(cluster_
                  ->Exec("CREATE TABLE aged (id int, created_at timestamptz NOT NULL);"
                         "INSERT INTO aged VALUES (1, now() - interval '1 hour'), (2, now());"
                         "CREATE TABLE aged_p (created_at timestamptz NOT NULL) PARTITION BY "
                         "RANGE (created_at);"
                         "CREATE TABLE aged_p1 PARTITION OF aged_p FOR VALUES FROM "
                         "('2026-01-01 00:00:00+00') TO ('2026-01-02 00:00:00+00');"
                         "CREATE TABLE aged_int (id int) PARTITION BY RANGE (id);"
                         "CREATE TABLE aged_int1 PARTITION OF aged_int FOR VALUES FROM (0) TO (9)")
                  .ok());
  auto conn = slot::ConnectPg(cluster_->conninfo(), nullptr, "test");
  ASSERT_TRUE(conn.ok()) << conn.status().ToString();
  auto read = [&](const HealthTable& t) {
    auto rows = ReadTableHealth(conn->get(), {t});
    EXPECT_TRUE(rows.ok() && rows->size() == 1) << rows.status().ToString();
    return rows.ok() && rows->size() == 1 ? rows->front() : TableHealthRow{};
  };
  TableHealthRow row = read({"public.aged", "created_at"});
  EXPECT_FALSE(row.oldest_row_seconds.has_value()) << "measured without an index";
  EXPECT_TRUE(row.oldest_row_unindexed);
  ASSERT_TRUE(cluster_->Exec("CREATE INDEX ON aged (created_at)").ok());
  row = read({"public.aged", "created_at"});
  ASSERT_TRUE(row.oldest_row_seconds.has_value());
  EXPECT_GE(*row.oldest_row_seconds, 3600);
  EXPECT_LT(*row.oldest_row_seconds, 3600 + 60);
  EXPECT_FALSE(read("public.aged").oldest_row_seconds.has_value()) << "no column, no age";
  EXPECT_FALSE(row.seconds_since_oldest_partition.has_value());

  row = read("public.aged_p");
  ASSERT_TRUE(row.seconds_since_oldest_partition.has_value());
  const double since_2026 =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count() -
      1767225600.0;  // 2026-01-01T00:00:00Z
  EXPECT_NEAR(*row.seconds_since_oldest_partition, since_2026, 60);
  EXPECT_FALSE(read("public.aged_int").seconds_since_oldest_partition.has_value());

  metrics::Registry registry;
  SetTableHealthGauges(row, registry);
  EXPECT_NE(registry.Render().find("walrelay_table_oldest_row_seconds{table=\"aged_p\"} -1"),
            std::string::npos)
      << registry.Render();
}

TEST_F(SlotGuardTest, ThreadPollsAndStops) {
  SlotGuardOptions o;
  o.conninfo = cluster_->conninfo();
  o.slot = "no_such_slot";
  o.interval = std::chrono::milliseconds(50);
  SlotGuard guard(o);
  guard.Start();
  for (int i = 0; i < 200 && guard.state() != SlotState::kMissing; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(guard.state(), SlotState::kMissing);
  guard.Stop();
  guard.Stop();
}

TEST_F(SlotGuardTest, UnreachableServerKeepsStateAndCountsErrors) {
  metrics::Registry registry;
  SlotGuardOptions o;
  o.conninfo = "host=127.0.0.1 port=1 connect_timeout=2";
  o.slot = "x";
  o.registry = &registry;
  SlotGuard guard(o);
  auto st = guard.Poll();
  EXPECT_EQ(st.status().code(), StatusCode::kUnavailable) << st.status().ToString();
  EXPECT_EQ(guard.state(), SlotState::kOk);
  EXPECT_FALSE(guard.last_error().ok());
  auto parsed = metrics::ParseExposition(registry.Render());
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->Find(std::string(mn::kSlotGuardErrors.name))->value, 1);
}

RelayConfig ConfigFor(const TestCluster& c) {
  RelayConfig config;
  config.source_dsn = c.conninfo();
  config.slot = "startup_slot";
  config.publication = "startup_pub";
  config.tables = {"public.outbox"};
  return config;
}

TEST_F(SlotGuardTest, StartupChecksPassWithALoudKeepSizeWarning) {
  RelayConfig config = ConfigFor(*cluster_);
  auto r = StartupChecks(config);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->slot.has_value());
  EXPECT_FALSE(r->publication_exists);
  ASSERT_FALSE(r->warnings.empty());
  EXPECT_NE(r->warnings[0].find("max_slot_wal_keep_size = -1"), std::string::npos);
  EXPECT_NE(r->warnings[0].find("fill the server's disk"), std::string::npos);
  EXPECT_NE(r->warnings[0].find("ALTER SYSTEM SET max_slot_wal_keep_size"), std::string::npos);
  // A fraction threshold cannot apply to an unlimited keep size: warned too.
  StartupCheckOptions opts;
  opts.critical = Threshold::Fraction(0.8);
  r = StartupChecks(config, opts);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->warnings.size(), 2u);
}

// Check 6 (PostgreSQL 17+, where a standby streams from the server through a physical
// slot): a slot that is not a failover slot, and an empty synchronized_standby_slots, each
// get a warning with the fix; neither applies before 17, without a physical slot, or with
// source.slot_failover off.
TEST_F(SlotGuardTest, StartupChecksWarnWhatAFailoverToAStandbyNeeds) {
  auto version = cluster_->QueryScalar("SHOW server_version_num");
  ASSERT_TRUE(version.ok()) << version.status().ToString();
  const bool failover_slots = std::stoi(*version) >= 170000;
  RelayConfig config = ConfigFor(*cluster_);
  ASSERT_TRUE(cluster_->Exec("SELECT pg_create_logical_replication_slot('startup_slot', "
                             "'pgoutput')")
                  .ok());
  auto count = [](const StartupReport& r, const std::string& text) {
    return std::count_if(r.warnings.begin(), r.warnings.end(), [&](const std::string& w) {
      return w.find(text) != std::string::npos;
    });
  };
  const std::string not_failover = "is not a failover slot";
  const std::string no_sync = "synchronized_standby_slots is empty";

  // No standby: nothing to say.
  auto r = StartupChecks(config);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(count(*r, not_failover), 0);
  EXPECT_EQ(count(*r, no_sync), 0);

  ASSERT_TRUE(cluster_->Exec("SELECT pg_create_physical_replication_slot('standby1')").ok());
  r = StartupChecks(config);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(count(*r, not_failover), failover_slots ? 1 : 0);
  EXPECT_EQ(count(*r, no_sync), failover_slots ? 1 : 0);
  if (failover_slots) {
    for (const std::string& w : r->warnings) {
      if (w.find(not_failover) != std::string::npos) {
        EXPECT_NE(w.find("ALTER_REPLICATION_SLOT startup_slot (FAILOVER true)"), std::string::npos)
            << w;
      }
      if (w.find(no_sync) != std::string::npos) {
        EXPECT_NE(w.find("physical slots: standby1"), std::string::npos) << w;
        EXPECT_NE(w.find("ALTER SYSTEM SET synchronized_standby_slots"), std::string::npos) << w;
      }
    }
    // Both fixed: no warning. (The setting names a slot that must exist: standby1 does.)
    ASSERT_TRUE(cluster_->Exec("SELECT pg_drop_replication_slot('startup_slot')").ok());
    ASSERT_TRUE(cluster_->Exec("SELECT pg_create_logical_replication_slot('startup_slot', "
                               "'pgoutput', false, false, true)")
                    .ok());
    ASSERT_TRUE(cluster_->Exec("ALTER SYSTEM SET synchronized_standby_slots = 'standby1'").ok());
    ASSERT_TRUE(cluster_->Exec("SELECT pg_reload_conf()").ok());
    for (int i = 0; i < 50; ++i) {  // the reload reaches new sessions within moments
      auto v = cluster_->QueryScalar("SHOW synchronized_standby_slots");
      if (v.ok() && *v == "standby1") break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    r = StartupChecks(config);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(count(*r, not_failover), 0);
    EXPECT_EQ(count(*r, no_sync), 0);
    ASSERT_TRUE(cluster_->Exec("ALTER SYSTEM RESET synchronized_standby_slots").ok());
    ASSERT_TRUE(cluster_->Exec("SELECT pg_reload_conf()").ok());
  }
  // source.slot_failover off: the relay is told not to care.
  config.slot_failover = false;
  r = StartupChecks(config);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(count(*r, not_failover), 0);
  EXPECT_EQ(count(*r, no_sync), 0);
  ASSERT_TRUE(cluster_->Exec("SELECT pg_drop_replication_slot('standby1')").ok());
  ASSERT_TRUE(cluster_->Exec("SELECT pg_drop_replication_slot('startup_slot')").ok());
}

TEST_F(SlotGuardTest, StartupChecksNameTheFix) {
  RelayConfig config = ConfigFor(*cluster_);
  // No REPLICATION privilege.
  config.source_dsn = cluster_->conninfo_for_user("norepl");
  Status st = StartupChecks(config).status();
  EXPECT_EQ(st.code(), StatusCode::kPermissionDenied) << st.ToString();
  EXPECT_NE(st.message().find("ALTER ROLE norepl REPLICATION"), std::string::npos) << st.message();
  // Issue 27, item 8: managed services grant replication by role membership (Amazon RDS
  // and Aurora: rds_replication, with rolreplication false): the check tries a replication
  // connection instead of reading the attribute, and its refusal names every platform's fix.
  EXPECT_NE(st.message().find("GRANT rds_replication TO norepl"), std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("rds.logical_replication = 1"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("cloudsqlsuperuser"), std::string::npos) << st.message();

  // Slot missing and create_slot off.
  config = ConfigFor(*cluster_);
  config.create_slot = false;
  st = StartupChecks(config).status();
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  EXPECT_NE(st.message().find("pg_create_logical_replication_slot('startup_slot', 'pgoutput')"),
            std::string::npos)
      << st.message();

  // Publication without the outbox table.
  ASSERT_TRUE(cluster_->Exec("CREATE PUBLICATION startup_pub FOR TABLE other").ok());
  config = ConfigFor(*cluster_);
  st = StartupChecks(config).status();
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  EXPECT_NE(st.message().find("ALTER PUBLICATION startup_pub ADD TABLE public.outbox"),
            std::string::npos)
      << st.message();
  ASSERT_TRUE(cluster_->Exec("ALTER PUBLICATION startup_pub ADD TABLE outbox").ok());
  auto ok = StartupChecks(config);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_TRUE(ok->publication_exists);

  // Missing table.
  config.tables = {"public.nope"};
  EXPECT_EQ(StartupChecks(config).status().code(), StatusCode::kNotFound);

  // A physical slot under the configured name.
  ASSERT_TRUE(cluster_->Exec("SELECT pg_create_physical_replication_slot('phys_slot')").ok());
  config = ConfigFor(*cluster_);
  config.slot = "phys_slot";
  st = StartupChecks(config).status();
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  ASSERT_TRUE(cluster_->Exec("SELECT pg_drop_replication_slot('phys_slot')").ok());

  // Unreachable server.
  config.source_dsn = "host=127.0.0.1 port=1 connect_timeout=2";
  EXPECT_EQ(StartupChecks(config).status().code(), StatusCode::kUnavailable);
}

// `--source-plugin wal2json` must start again on the wal2json slot it created.
TEST_F(SlotGuardTest, StartupChecksAcceptTheConfiguredPluginOnly) {
  ASSERT_TRUE(cluster_
                  ->Exec("DROP PUBLICATION IF EXISTS startup_pub; CREATE PUBLICATION startup_pub "
                         "FOR TABLE outbox")
                  .ok());
  ASSERT_TRUE(
      cluster_->Exec("SELECT pg_create_logical_replication_slot('startup_slot', 'wal2json')").ok());
  RelayConfig config = ConfigFor(*cluster_);
  config.plugin = "wal2json";
  auto r = StartupChecks(config);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->slot.has_value());
  EXPECT_EQ(r->slot->plugin, "wal2json");
  // The same slot under pgoutput is refused, naming both plugins and the fix.
  config.plugin = "pgoutput";
  Status st = StartupChecks(config).status();
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  EXPECT_NE(st.message().find("with plugin wal2json"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("logical pgoutput slot (source.plugin)"), std::string::npos)
      << st.message();
  // A missing slot with create_slot off names the configured plugin in the fix.
  ASSERT_TRUE(cluster_->Exec("SELECT pg_drop_replication_slot('startup_slot')").ok());
  config.plugin = "wal2json";
  config.create_slot = false;
  st = StartupChecks(config).status();
  EXPECT_NE(st.message().find("pg_create_logical_replication_slot('startup_slot', 'wal2json')"),
            std::string::npos)
      << st.message();
}

TEST(StartupChecksWalLevelTest, ReplicaIsRefusedWithTheFix) {
  TestCluster::Options options;
  options.settings = {"wal_level=replica"};
  auto c = TestCluster::Start(options);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  RelayConfig config = ConfigFor(**c);
  Status st = StartupChecks(config).status();
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  EXPECT_NE(st.message().find("ALTER SYSTEM SET wal_level = logical"), std::string::npos);
  EXPECT_NE(st.message().find("restart"), std::string::npos);
}

// Invalidates `slot` on a cluster with a tiny max_slot_wal_keep_size: write WAL, switch
// segments and checkpoint until the checkpoint removes WAL the slot needs.
void LoseSlot(TestCluster& c, const std::string& slot) {
  for (int i = 0; i < 30; ++i) {
    auto status = c.QueryScalar("SELECT wal_status FROM pg_replication_slots WHERE slot_name = '" +
                                slot + "'");
    ASSERT_TRUE(status.ok()) << status.status().ToString();
    if (*status == "lost") return;
    Churn(c, 1);
    ASSERT_TRUE(c.Exec("SELECT pg_switch_wal()").ok());
    ASSERT_TRUE(c.Exec("CHECKPOINT").ok());
  }
  FAIL() << "slot " << slot << " was not invalidated\n" << c.ServerLogTail();
}

TEST(SlotGuardLostTest, InvalidatedSlotIsLostForGuardAndStartupChecks) {
  TestCluster::Options options;
  options.settings = {"max_slot_wal_keep_size=1MB", "max_wal_size=32MB", "min_wal_size=32MB"};
  auto c = TestCluster::Start(options);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  TestCluster& cluster = **c;
  ASSERT_TRUE(cluster
                  .Exec("CREATE TABLE churn (id bigserial PRIMARY KEY, pad text);"
                        "CREATE TABLE outbox (id bigserial PRIMARY KEY, payload text);"
                        "CREATE PUBLICATION lost_pub FOR TABLE outbox;")
                  .ok());
  // A slot cannot be created in a transaction that wrote: a statement of its own.
  ASSERT_TRUE(
      cluster.Exec("SELECT pg_create_logical_replication_slot('lost_slot', 'pgoutput')").ok());
  metrics::Registry registry;
  SlotGuardOptions o;
  o.conninfo = cluster.conninfo();
  o.slot = "lost_slot";
  o.warn = Threshold::Fraction(0.5);
  o.critical = Threshold::Fraction(0.9);
  o.registry = &registry;
  SlotGuard guard(o);
  ASSERT_TRUE(guard.Poll().ok());
  ASSERT_NE(guard.last()->slot->safe_wal_size, std::nullopt);  // bounded keep size

  LoseSlot(cluster, "lost_slot");
  auto st = guard.Poll();
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(*st, SlotState::kLost);
  auto parsed = metrics::ParseExposition(registry.Render());
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->Find(std::string(mn::kSlotState.name), {{"state", "lost"}})->value, 1);
  EXPECT_EQ(parsed->Find(std::string(mn::kSlotWalStatus.name), {{"status", "lost"}})->value, 1);
  EXPECT_EQ(parsed->Find(std::string(mn::kMaxSlotWalKeepSize.name))->value, 1.0 * kMB);
  EXPECT_EQ(parsed->Find(std::string(mn::kSlotWarnThreshold.name))->value, 0.5 * kMB);

  RelayConfig config;
  config.source_dsn = cluster.conninfo();
  config.slot = "lost_slot";
  config.publication = "lost_pub";
  config.tables = {"outbox"};
  Status err = StartupChecks(config).status();
  // As the relay runs it with --recovery-enabled false: no retry can fix it.
  EXPECT_EQ(err.code(), StatusCode::kDataLoss) << err.ToString();
  EXPECT_NE(err.message().find("wal_status 'lost'"), std::string::npos) << err.message();
  EXPECT_NE(err.message().find("--recovery-enabled is false"), std::string::npos) << err.message();
  EXPECT_NE(err.message().find("pg_drop_replication_slot('lost_slot')"), std::string::npos);
  StartupCheckOptions recover;
  recover.lost_slot_is_error = false;
  auto report = StartupChecks(config, recover);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_TRUE(report->slot_lost);
  EXPECT_TRUE(report->warnings.empty() == false);
}

// PostgreSQL 18's idle_replication_slot_timeout, on a real 18 (skipped before it): the start
// checks warn while the setting is on, a slot nobody reads is invalidated at the next
// checkpoint, and the guard and the start checks call it lost, naming the reason and the
// setting (the relay then recovers it as any lost slot: RecoveryTest).
TEST(SlotGuardLostTest, IdleTimeoutOn18IsWarnedAboutAndNamedWhenItStrikes) {
  auto c = TestCluster::Start();
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  TestCluster& cluster = **c;
  const int version = std::stoi(*cluster.QueryScalar("SHOW server_version_num"));
  if (version < 180000) GTEST_SKIP() << "idle_replication_slot_timeout exists from 18 on";
  ASSERT_TRUE(cluster
                  .Exec("CREATE TABLE outbox (id bigserial PRIMARY KEY, payload text);"
                        "CREATE PUBLICATION idle_pub FOR TABLE outbox;")
                  .ok());
  ASSERT_TRUE(
      cluster.Exec("SELECT pg_create_logical_replication_slot('idle_slot', 'pgoutput')").ok());
  RelayConfig config;
  config.source_dsn = cluster.conninfo();
  config.slot = "idle_slot";
  config.publication = "idle_pub";
  config.tables = {"outbox"};
  auto has_warning = [](const StartupReport& r, std::string_view text) {
    return std::any_of(r.warnings.begin(), r.warnings.end(), [&](const std::string& w) {
      return w.find(text) != std::string::npos;
    });
  };
  auto before = StartupChecks(config);
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  EXPECT_EQ(before->settings.idle_replication_slot_timeout.count(), 0);
  EXPECT_FALSE(has_warning(*before, "idle_replication_slot_timeout"));

  ASSERT_TRUE(cluster.Exec("ALTER SYSTEM SET idle_replication_slot_timeout = 1").ok());
  ASSERT_TRUE(cluster.Exec("SELECT pg_reload_conf()").ok());
  // The reload is asynchronous: wait until a new session sees the setting.
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        auto v = cluster.QueryScalar("SHOW idle_replication_slot_timeout");
        return v.ok() && *v == "1s";
      },
      std::chrono::seconds(30)))
      << "the server did not take idle_replication_slot_timeout = 1";
  auto on = StartupChecks(config);
  ASSERT_TRUE(on.ok()) << on.status().ToString();
  EXPECT_EQ(on->settings.idle_replication_slot_timeout.count(), 1);
  EXPECT_TRUE(has_warning(*on, "idle_replication_slot_timeout is 1 s on this server"));
  EXPECT_TRUE(has_warning(*on, "ALTER SYSTEM SET idle_replication_slot_timeout = 0"));

  // Idle for longer than the timeout, then a checkpoint: invalidated.
  std::string reason;
  for (int i = 0; i < 40 && reason.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    ASSERT_TRUE(cluster.Exec("CHECKPOINT").ok());
    auto r = cluster.QueryScalar(
        "SELECT coalesce(invalidation_reason, '') FROM pg_replication_slots "
        "WHERE slot_name = 'idle_slot'");
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    reason = *r;
  }
  ASSERT_EQ(reason, "idle_timeout") << cluster.ServerLogTail();

  metrics::Registry registry;
  SlotGuardOptions o;
  o.conninfo = cluster.conninfo();
  o.slot = "idle_slot";
  o.registry = &registry;
  SlotGuard guard(o);
  auto st = guard.Poll();
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(*st, SlotState::kLost);
  ASSERT_TRUE(guard.last().has_value());
  EXPECT_EQ(guard.last()->slot->invalidation_reason, "idle_timeout");
  Status err = StartupChecks(config).status();
  EXPECT_EQ(err.code(), StatusCode::kDataLoss) << err.ToString();
  EXPECT_NE(err.message().find("invalidated (idle_timeout)"), std::string::npos) << err.message();
  EXPECT_NE(err.message().find("idle_replication_slot_timeout"), std::string::npos)
      << err.message();
}

}  // namespace
}  // namespace walrelay::relay
