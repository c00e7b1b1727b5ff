// Integration tests of SlotAdmin against a throwaway PostgreSQL (TestCluster).
#include "slot/slot_admin.h"

#include <gtest/gtest.h>

#include <thread>

#include "slot/pg_error.h"
#include "slot/replication_connection.h"
#include "tests/support/pg_cluster.h"

namespace walrelay::slot {
namespace {

using std::chrono::milliseconds;
using testing::TestCluster;

class SlotAdminTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto c = TestCluster::Start();
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    cluster_ = std::move(c).value().release();
    ASSERT_TRUE(cluster_
                    ->Exec("CREATE TABLE outbox (id bigint PRIMARY KEY);"
                           "CREATE SCHEMA app; CREATE TABLE app.events (id int PRIMARY KEY);"
                           "CREATE TABLE other (id int PRIMARY KEY);"
                           "CREATE ROLE norepl LOGIN;")
                    .ok());
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override {
    auto a = SlotAdmin::Connect(cluster_->conninfo());
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    admin_ = std::move(a).value();
  }

  static TestCluster* cluster_;
  std::unique_ptr<SlotAdmin> admin_;
};
TestCluster* SlotAdminTest::cluster_ = nullptr;

TEST_F(SlotAdminTest, EnsurePublicationCreatesThenAccepts) {
  ASSERT_TRUE(admin_->EnsurePublication("pub_a", {"outbox", "app.events"}).ok());
  auto n =
      cluster_->QueryScalar("SELECT count(*) FROM pg_publication_tables WHERE pubname = 'pub_a'");
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, "2");
  // Idempotent, and a subset is covered too.
  EXPECT_TRUE(admin_->EnsurePublication("pub_a", {"outbox", "app.events"}).ok());
  EXPECT_TRUE(admin_->EnsurePublication("pub_a", {"public.outbox"}).ok());
}

TEST_F(SlotAdminTest, EnsurePublicationDoesNotAlterAnExistingOne) {
  ASSERT_TRUE(cluster_->Exec("CREATE PUBLICATION pub_b FOR TABLE other").ok());
  Status st = admin_->EnsurePublication("pub_b", {"other", "outbox"}).status();
  ASSERT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  EXPECT_NE(st.message().find("ALTER PUBLICATION pub_b ADD TABLE public.outbox"), std::string::npos)
      << st.message();
  auto n =
      cluster_->QueryScalar("SELECT count(*) FROM pg_publication_tables WHERE pubname = 'pub_b'");
  EXPECT_EQ(*n, "1");
}

TEST_F(SlotAdminTest, EnsurePublicationAllTablesAndMissingTable) {
  ASSERT_TRUE(cluster_->Exec("CREATE PUBLICATION pub_all FOR ALL TABLES").ok());
  EXPECT_TRUE(admin_->EnsurePublication("pub_all", {"outbox", "other"}).ok());
  Status st = admin_->EnsurePublication("pub_c", {"no_such_table"}).status();
  EXPECT_EQ(st.code(), StatusCode::kNotFound) << st.ToString();
  EXPECT_EQ(admin_->EnsurePublication("pub_c", {}).status().code(), StatusCode::kInvalidArgument);
}

// Names mean what they mean in SQL: unquoted folds, quoted keeps case, a quoted schema may
// contain a dot; each resolves to the table's OID.
TEST_F(SlotAdminTest, ResolveTablesFollowsSqlNameRules) {
  ASSERT_TRUE(cluster_
                  ->Exec("CREATE TABLE \"Outbox\" (id int); CREATE SCHEMA \"my.schema\";"
                         "CREATE TABLE \"my.schema\".t (id int); CREATE TABLE folded (id int);")
                  .ok());
  auto oid_of = [&](const std::string& regclass) {
    return std::stoul(*cluster_->QueryScalar("SELECT '" + regclass + "'::regclass::oid"));
  };
  auto r = admin_->ResolveTables({"public.FOLDED", "public.\"Outbox\"", "\"my.schema\".t"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 3u);
  EXPECT_EQ((*r)[0].name, "folded");
  EXPECT_EQ((*r)[0].oid, oid_of("public.folded"));
  EXPECT_EQ((*r)[1].name, "Outbox");
  EXPECT_EQ((*r)[1].oid, oid_of("public.\"Outbox\""));
  EXPECT_EQ((*r)[1].Display(), "public.\"Outbox\"");
  EXPECT_EQ((*r)[2].schema, "my.schema");
  EXPECT_EQ((*r)[2].oid, oid_of("\"my.schema\".t"));
  // public.Outbox folds to public.outbox (a different table from public."Outbox").
  auto folded = admin_->ResolveTables({"public.Outbox"});
  ASSERT_TRUE(folded.ok()) << folded.status().ToString();
  EXPECT_EQ((*folded)[0].oid, oid_of("public.outbox"));
  EXPECT_EQ(admin_->ResolveTables({"app.Outbox"}).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(admin_->ResolveTables({"public.\"open"}).status().code(), StatusCode::kInvalidArgument);
}

// A partitioned outbox publishes through its root: the publication walrelay creates says
// so, an existing one without it is refused with the fix, and a partition itself cannot be
// configured (its rows arrive under the root).
TEST_F(SlotAdminTest, PartitionedTablePublishesViaRoot) {
  ASSERT_TRUE(cluster_
                  ->Exec("CREATE TABLE parted (id int, d date) PARTITION BY RANGE (d);"
                         "CREATE TABLE parted_2026 PARTITION OF parted FOR VALUES FROM "
                         "('2026-01-01') TO ('2027-01-01');")
                  .ok());
  auto r = admin_->EnsurePublication("pub_parted", {"public.parted"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE((*r)[0].partitioned);
  EXPECT_EQ(*cluster_->QueryScalar("SELECT pubviaroot FROM pg_publication WHERE pubname = "
                                   "'pub_parted'"),
            "t");
  // Idempotent: the root is what the publication publishes.
  EXPECT_TRUE(admin_->EnsurePublication("pub_parted", {"public.parted"}).ok());

  ASSERT_TRUE(cluster_->Exec("CREATE PUBLICATION pub_leaves FOR TABLE parted").ok());
  Status st = admin_->EnsurePublication("pub_leaves", {"public.parted"}).status();
  ASSERT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  EXPECT_NE(st.message().find("ALTER PUBLICATION pub_leaves SET (publish_via_partition_root = "
                              "true)"),
            std::string::npos)
      << st.message();

  st = admin_->ResolveTables({"public.parted_2026"}).status();
  ASSERT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  EXPECT_NE(st.message().find("partition of public.parted"), std::string::npos) << st.message();
}

// A publication that would skip outbox rows is refused with the fix in SQL, as a
// configuration no restart cures (kInvalidArgument: exit 2): one that does not publish
// inserts, and (PostgreSQL 15+) one with a row filter or a column list on an outbox table.
// Before, each was accepted and the slot confirmed past events that never reached Kafka.
TEST_F(SlotAdminTest, PublicationThatSkipsOutboxRowsIsRefusedWithTheFix) {
  ASSERT_TRUE(cluster_->Exec("CREATE PUBLICATION pub_noins FOR TABLE outbox WITH (publish = "
                             "'update, delete')")
                  .ok());
  Status st = admin_->EnsurePublication("pub_noins", {"outbox"}).status();
  ASSERT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("does not publish inserts"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("ALTER PUBLICATION pub_noins SET (publish = 'insert, update, "
                              "delete');"),
            std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("walrelay republish --since"), std::string::npos) << st.message();
  // FOR ALL TABLES is held to the same rule.
  ASSERT_TRUE(cluster_->Exec("CREATE PUBLICATION pub_all_noins FOR ALL TABLES WITH (publish = "
                             "'delete')")
                  .ok());
  EXPECT_EQ(admin_->EnsurePublication("pub_all_noins", {"outbox"}).status().code(),
            StatusCode::kInvalidArgument);

  auto version = cluster_->QueryScalar("SHOW server_version_num");
  ASSERT_TRUE(version.ok());
  if (std::stoi(*version) < 150000) {
    GTEST_SKIP() << "row filters and column lists need PostgreSQL 15+ (server " << *version
                 << "); the insert check above ran";
  }
  ASSERT_TRUE(cluster_->Exec("CREATE PUBLICATION pub_filtered FOR TABLE outbox WHERE (id > 10), "
                             "app.events")
                  .ok());
  st = admin_->EnsurePublication("pub_filtered", {"outbox", "app.events"}).status();
  ASSERT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("publishes public.outbox with a row filter (WHERE (id > 10))"),
            std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("ALTER PUBLICATION pub_filtered DROP TABLE public.outbox; ALTER "
                              "PUBLICATION pub_filtered ADD TABLE public.outbox;"),
            std::string::npos)
      << st.message();
  // The filter is on another table than the one configured: not walrelay's concern.
  EXPECT_TRUE(admin_->EnsurePublication("pub_filtered", {"app.events"}).ok());

  ASSERT_TRUE(cluster_->Exec("CREATE PUBLICATION pub_columns FOR TABLE app.events (id)").ok());
  st = admin_->EnsurePublication("pub_columns", {"app.events"}).status();
  ASSERT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("publishes app.events with a column list"), std::string::npos)
      << st.message();
}

TEST_F(SlotAdminTest, GetSlotFollowsActivityAndPosition) {
  auto repl = ReplicationConnection::Connect(cluster_->replication_conninfo());
  ASSERT_TRUE(repl.ok()) << repl.status().ToString();
  auto created = (*repl)->CreateLogicalSlot("admin_slot", "pgoutput", /*temporary=*/false);
  ASSERT_TRUE(created.ok()) << created.status().ToString();

  auto info = admin_->GetSlot("admin_slot");
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->slot_name, "admin_slot");
  EXPECT_EQ(info->plugin, "pgoutput");
  EXPECT_EQ(info->slot_type, "logical");
  EXPECT_EQ(info->database, "postgres");
  EXPECT_FALSE(info->temporary);
  EXPECT_FALSE(info->active);
  EXPECT_FALSE(info->active_pid.has_value());
  ASSERT_TRUE(info->confirmed_flush_lsn.has_value());
  EXPECT_EQ(*info->confirmed_flush_lsn, created->consistent_point);
  ASSERT_TRUE(info->restart_lsn.has_value());
  EXPECT_EQ(info->wal_status, "reserved");
  EXPECT_FALSE(info->safe_wal_size.has_value());  // max_slot_wal_keep_size = -1
  EXPECT_GE(info->current_wal_lsn, *info->confirmed_flush_lsn);

  ASSERT_TRUE(cluster_->Exec("INSERT INTO other SELECT generate_series(1, 1000)").ok());
  // pg_current_wal_lsn() is the WAL *write* position: with synchronous_commit=off the
  // WAL writer gets there within wal_writer_delay.
  Result<SlotInfo> later = info;
  for (int i = 0; i < 100; ++i) {
    later = admin_->GetSlot("admin_slot");
    ASSERT_TRUE(later.ok());
    if (later->current_wal_lsn > info->current_wal_lsn) break;
    std::this_thread::sleep_for(milliseconds(50));
  }
  EXPECT_GT(later->current_wal_lsn, info->current_wal_lsn);
  ASSERT_TRUE(later->confirmed_lag_bytes().has_value());
  EXPECT_GT(*later->confirmed_lag_bytes(), 0u);
  EXPECT_GE(*later->retained_wal_bytes(), *later->confirmed_lag_bytes());

  ASSERT_TRUE((*repl)
                  ->StartLogical("admin_slot", Lsn(),
                                 {{"proto_version", "1"}, {"publication_names", "pub_all"}})
                  .ok());
  ASSERT_TRUE((*repl)->Read(milliseconds(100)).ok());
  auto active = admin_->GetSlot("admin_slot");
  ASSERT_TRUE(active.ok());
  EXPECT_TRUE(active->active);
  EXPECT_EQ(active->active_pid, (*repl)->backend_pid());

  Status busy = admin_->DropSlot("admin_slot");
  EXPECT_EQ(busy.code(), StatusCode::kFailedPrecondition) << busy.ToString();
  EXPECT_NE(busy.message().find("another walrelay"), std::string::npos) << busy.message();

  ASSERT_TRUE((*repl)->Close().ok());
  Status dropped;
  for (int i = 0; i < 50; ++i) {  // the walsender exits asynchronously
    dropped = admin_->DropSlot("admin_slot");
    if (dropped.ok()) break;
    std::this_thread::sleep_for(milliseconds(100));
  }
  EXPECT_TRUE(dropped.ok()) << dropped.ToString();
  EXPECT_EQ(admin_->GetSlot("admin_slot").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(admin_->DropSlot("admin_slot").code(), StatusCode::kNotFound);
}

TEST_F(SlotAdminTest, SafeWalSizeWithMaxSlotWalKeepSize) {
  ASSERT_TRUE(
      cluster_->Exec("SELECT pg_create_logical_replication_slot('keep_slot', 'pgoutput')").ok());
  ASSERT_TRUE(cluster_->Exec("ALTER SYSTEM SET max_slot_wal_keep_size = '64MB'").ok());
  ASSERT_TRUE(cluster_->Exec("SELECT pg_reload_conf()").ok());
  std::optional<int64_t> safe;
  for (int i = 0; i < 50 && !safe; ++i) {
    auto info = admin_->GetSlot("keep_slot");
    ASSERT_TRUE(info.ok());
    safe = info->safe_wal_size;
    if (!safe) std::this_thread::sleep_for(milliseconds(100));
  }
  ASSERT_TRUE(safe.has_value());
  EXPECT_GT(*safe, 0);
  EXPECT_LT(*safe, 2 * 64LL * 1024 * 1024);  // counted to WAL segment boundaries
  auto settings = admin_->GetServerSettings();
  ASSERT_TRUE(settings.ok());
  EXPECT_EQ(settings->max_slot_wal_keep_size_bytes, 64LL * 1024 * 1024);
  ASSERT_TRUE(cluster_->Exec("ALTER SYSTEM RESET max_slot_wal_keep_size").ok());
  ASSERT_TRUE(cluster_->Exec("SELECT pg_reload_conf()").ok());
  ASSERT_TRUE(cluster_->Exec("SELECT pg_drop_replication_slot('keep_slot')").ok());
}

TEST_F(SlotAdminTest, ListSlotsSeesEverySlot) {
  ASSERT_TRUE(cluster_
                  ->Exec("SELECT pg_create_logical_replication_slot('list_a', 'pgoutput');"
                         "SELECT pg_create_physical_replication_slot('list_b', true)")
                  .ok());
  auto slots = admin_->ListSlots();
  ASSERT_TRUE(slots.ok()) << slots.status().ToString();
  bool a = false, b = false;
  for (const auto& s : *slots) {
    if (s.slot_name == "list_a") a = s.slot_type == "logical";
    if (s.slot_name == "list_b") {
      b = s.slot_type == "physical" && s.plugin.empty() && !s.confirmed_flush_lsn;
    }
  }
  EXPECT_TRUE(a);
  EXPECT_TRUE(b);
  EXPECT_TRUE(admin_->DropSlot("list_a").ok());
  EXPECT_TRUE(admin_->DropSlot("list_b").ok());
}

TEST_F(SlotAdminTest, ServerSettingsAndPrivilege) {
  auto s = admin_->GetServerSettings();
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->wal_level, "logical");
  EXPECT_EQ(s->max_replication_slots, 20);
  EXPECT_EQ(s->max_wal_senders, 20);
  EXPECT_EQ(s->wal_sender_timeout, milliseconds(60000));
  EXPECT_GE(s->server_version_num, 150000);
  EXPECT_EQ(s->max_slot_wal_keep_size_bytes, -1);

  auto other = SlotAdmin::Connect(cluster_->conninfo_for_user("norepl"));
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  EXPECT_EQ((*other)->user(), "norepl");
  auto lsn = admin_->CurrentWalLsn();
  ASSERT_TRUE(lsn.ok());
  EXPECT_TRUE(lsn->valid());
}

// Two relays starting together on a fresh database both find the dead-letter table
// missing and both create it: the second CREATE waits for the first's transaction and then
// fails (42P07 or a unique violation in the catalog). The table exists then, which is all
// the caller asked for. (Seen in CI: Wal2JsonRelayTest starts two relays at once.)
TEST_F(SlotAdminTest, CreateTableIfMissingWhileAnotherSessionCreatesIt) {
  PgConnPtr first(PQconnectdb(cluster_->conninfo().c_str()));
  PgConnPtr second(PQconnectdb(cluster_->conninfo().c_str()));
  ASSERT_EQ(PQstatus(first.get()), CONNECTION_OK);
  ASSERT_EQ(PQstatus(second.get()), CONNECTION_OK);
  const std::string ddl = "CREATE TABLE raced (id bigint PRIMARY KEY, note text)";
  ASSERT_TRUE(ExecPg(first.get(), "BEGIN", {}, "test").ok());
  ASSERT_TRUE(ExecPg(first.get(), ddl, {}, "test").ok());  // created, not yet committed
  Status second_status;
  std::thread racer([&] {
    second_status = CreateTableIfMissing(second.get(), "raced", ddl, "dead-letter table");
  });
  std::this_thread::sleep_for(milliseconds(300));  // the racer waits on the catalog
  ASSERT_TRUE(ExecPg(first.get(), "COMMIT", {}, "test").ok());
  racer.join();
  EXPECT_TRUE(second_status.ok()) << second_status.ToString();
}

TEST_F(SlotAdminTest, LostServerIsUnavailable) {
  auto c = TestCluster::Start();
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto admin = SlotAdmin::Connect((*c)->conninfo());
  ASSERT_TRUE(admin.ok());
  ASSERT_TRUE((*c)->Stop(TestCluster::StopMode::kImmediate).ok());
  EXPECT_EQ((*admin)->ListSlots().status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(SlotAdmin::Connect((*c)->conninfo()).status().code(), StatusCode::kUnavailable);
}

// Only wal_status exists on the PostgreSQL 15 the tests run: the 16+ and 17+ columns are
// covered here, from the values those servers return, and untested live.
TEST(SlotInvalidationTest, ReasonFromTheColumnsOfEachServerVersion) {
  EXPECT_EQ(SlotInvalidation("reserved", std::nullopt, ""), "");
  EXPECT_EQ(SlotInvalidation("", std::nullopt, ""), "");
  EXPECT_EQ(SlotInvalidation("lost", std::nullopt, ""), "wal_removed");           // 14, 15
  EXPECT_EQ(SlotInvalidation("reserved", false, ""), "");                         // 16, valid
  EXPECT_EQ(SlotInvalidation("reserved", true, ""), "conflicting");               // 16, conflict
  EXPECT_EQ(SlotInvalidation("lost", false, ""), "wal_removed");                  // 16, WAL removed
  EXPECT_EQ(SlotInvalidation("reserved", true, "rows_removed"), "rows_removed");  // 17
  EXPECT_EQ(SlotInvalidation("lost", std::nullopt, "wal_removed"), "wal_removed");
  EXPECT_EQ(SlotInvalidation("extended", false, "idle_timeout"), "idle_timeout");  // 18
  SlotInfo s;
  s.invalidation_reason = "idle_timeout";
  EXPECT_TRUE(s.invalidated());
  EXPECT_NE(ExplainSlotInvalidation("idle_timeout").find("idle_replication_slot_timeout"),
            std::string::npos);
  EXPECT_NE(ExplainSlotInvalidation("rows_removed").find("hot_standby_feedback"),
            std::string::npos);
  EXPECT_NE(ExplainSlotInvalidation("wal_removed").find("max_slot_wal_keep_size"),
            std::string::npos);
  EXPECT_NE(ExplainSlotInvalidation("future_reason").find("'future_reason'"), std::string::npos);
}

TEST_F(SlotAdminTest, RelaySessionConnectionsBoundTheirWaits) {
  auto relay = ConnectPg(cluster_->conninfo(), "false", "test", kRelaySession);
  ASSERT_TRUE(relay.ok()) << relay.status().ToString();
  EXPECT_EQ(ClientWaitBound(relay->get()), kRelaySession.statement_timeout + kClientWaitGrace);
  auto r = ExecPg(relay->get(), "SHOW statement_timeout", {}, "test");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(std::string(PQgetvalue(r->get(), 0, 0)), "30s");
  r = ExecPg(relay->get(), "SHOW synchronous_commit", {}, "test");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(std::string(PQgetvalue(r->get(), 0, 0)), "local");
  // Errors still map through the bounded path.
  EXPECT_EQ(ExecPg(relay->get(), "SELEC 1", {}, "test").status().code(),
            StatusCode::kInvalidArgument);
  auto plain = ConnectPg(cluster_->conninfo(), "false", "test");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(ClientWaitBound(plain->get()).count(), 0);
}

}  // namespace
}  // namespace walrelay::slot
