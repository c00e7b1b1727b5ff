// `walrelay lag` end to end: the real binary (WALRELAY_BINARY) against a throwaway
// PostgreSQL 15. A slot is created and never read while the database churns: the check
// crosses warn then critical with exit codes 1 and 2; --json and --prometheus parse; a
// slot invalidated through a tiny max_slot_wal_keep_size is reported as lost; an
// unreachable server exits 3.
#include <gtest/gtest.h>
#include <simdjson.h>
#include <sys/wait.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <thread>

#include "src/metrics/registry.h"
#include "tests/support/pg_cluster.h"

namespace walrelay {
namespace {

using testing::TestCluster;

struct LagRun {
  int code = -1;
  std::string out;
};

std::string Quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'') {
      q += "'\\''";
    } else {
      q += c;
    }
  }
  return q + "'";
}

LagRun Lag(const std::string& args) {
  const std::string cmd = std::string(WALRELAY_BINARY) + " lag " + args + " 2>/dev/null";
  LagRun r;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

void Churn(TestCluster& c, int mb) {
  ASSERT_TRUE(c.Exec("INSERT INTO churn(pad) SELECT repeat(md5(g::text), 28) FROM "
                     "generate_series(1, " +
                     std::to_string(mb * 900) + ") g")
                  .ok());
}

class LagTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto c = TestCluster::Start();
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    cluster_ = std::move(c).value().release();
    ASSERT_TRUE(cluster_->Exec("CREATE TABLE churn (id bigserial PRIMARY KEY, pad text)").ok());
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  static std::string Dsn() { return "--dsn " + Quote(cluster_->conninfo()); }
  static TestCluster* cluster_;
};
TestCluster* LagTest::cluster_ = nullptr;

TEST_F(LagTest, UnreadSlotCrossesWarnThenCriticalWithExitCodes) {
  ASSERT_TRUE(
      cluster_->Exec("SELECT pg_create_logical_replication_slot('lag_slot', 'pgoutput')").ok());
  const std::string check = Dsn() + " --slot lag_slot --warn 4MB --critical 12MB";
  LagRun r = Lag(check);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("lag_slot"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("pgoutput"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("INACTIVE_SINCE"), std::string::npos) << r.out;

  std::vector<int> codes = {0};
  for (int i = 0; i < 40 && codes.back() != 2; ++i) {
    Churn(*cluster_, 1);
    r = Lag(check);
    ASSERT_GE(r.code, 0);
    if (r.code != codes.back()) codes.push_back(r.code);
  }
  EXPECT_EQ(codes, (std::vector<int>{0, 1, 2}));
  EXPECT_NE(r.out.find("critical"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" MB"), std::string::npos) << r.out;  // human units

  // Environment instead of --dsn; no thresholds: ok.
  const std::string env = "WALRELAY_SOURCE_DSN=" + Quote(cluster_->conninfo()) + " " +
                          std::string(WALRELAY_BINARY) + " lag >/dev/null 2>&1";
  const int status = std::system(env.c_str());
  EXPECT_EQ(WEXITSTATUS(status), 0);

  // A slot that does not exist, when asked for, is critical.
  EXPECT_EQ(Lag(Dsn() + " --slot no_such_slot").code, 2);
  ASSERT_TRUE(cluster_->Exec("SELECT pg_drop_replication_slot('lag_slot')").ok());
}

// Issue 42 item 8: a walrelay slot nobody reads showed state ok (no thresholds given).
// Now a slot named in walrelay's progress table that no relay reads is a warning with
// "unread" (PostgreSQL 17+: after a minute, with since when; before 17 at once, with the last
// progress walrelay recorded); another inactive slot stays ok; thresholds default to the
// relay's for walrelay's slots.
TEST_F(LagTest, AWalrelaySlotNobodyReadsIsAWarning) {
  ASSERT_TRUE(cluster_
                  ->Exec("SELECT pg_create_logical_replication_slot('wr_unread', 'pgoutput'); "
                         "SELECT pg_create_logical_replication_slot('other_unread', 'pgoutput'); "
                         "CREATE TABLE walrelay_progress (slot text NOT NULL, source text NOT "
                         "NULL, updated_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY "
                         "(slot, source)); INSERT INTO walrelay_progress (slot, source) VALUES "
                         "('wr_unread', 'wal')")
                  .ok());
  auto version = cluster_->QueryScalar("SHOW server_version_num");
  ASSERT_TRUE(version.ok());
  const bool since_17 = std::stoi(*version) >= 170000;

  EXPECT_EQ(Lag(Dsn() + " --slot other_unread").code, 0) << "not walrelay's: ok while unread";
  LagRun r = Lag(Dsn() + " --slot wr_unread --json");
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  ASSERT_EQ(parser.parse(r.out).get(doc), simdjson::SUCCESS) << r.out;
  simdjson::dom::element row = doc["slots"].at(0);
  EXPECT_TRUE(row["walrelay"].get_bool().value()) << r.out;
  if (since_17) {
    // Unread for less than a minute: a relay between sessions, not news yet.
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_TRUE(row["inactive_seconds"].is_int64()) << r.out;
  } else {
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_EQ(std::string(row["state"].get_string().value()), "warn") << r.out;
    const std::string reason(row["reason"].get_string().value());
    EXPECT_NE(reason.find("walrelay's slot, and no relay reads it"), std::string::npos) << reason;
    EXPECT_NE(reason.find("walrelay last recorded progress"), std::string::npos) << reason;
    EXPECT_NE(reason.find("pg_drop_replication_slot('wr_unread')"), std::string::npos) << reason;
    EXPECT_TRUE(row["inactive_seconds"].is_null()) << r.out;
  }
  // The table form names the reason too.
  r = Lag(Dsn() + " --slot wr_unread");
  if (!since_17) {
    EXPECT_NE(r.out.find("wr_unread: warn: walrelay's slot"), std::string::npos) << r.out;
  }
  // Another progress table: the slot is not walrelay's there.
  EXPECT_EQ(Lag(Dsn() + " --slot wr_unread --progress-table no_such_table").code, 0);
  ASSERT_TRUE(cluster_
                  ->Exec("SELECT pg_drop_replication_slot('wr_unread'); "
                         "SELECT pg_drop_replication_slot('other_unread'); "
                         "DROP TABLE walrelay_progress")
                  .ok());
}

// --tables (issue 14): the tables' health next to the slots, in each output form; a
// partitioned table's rows are its partitions'; a missing table is named, exit code as
// without it.
TEST_F(LagTest, TablesShowTheirHealthInEveryForm) {
  ASSERT_TRUE(cluster_
                  ->Exec("CREATE TABLE health_plain (id int); CREATE TABLE health_parted (id int) "
                         "PARTITION BY RANGE (id); CREATE TABLE health_parted_1 PARTITION OF "
                         "health_parted FOR VALUES FROM (0) TO (100); CREATE TABLE "
                         "health_parted_2 PARTITION OF health_parted FOR VALUES FROM (100) TO "
                         "(200); INSERT INTO health_parted SELECT g FROM generate_series(0, 199) "
                         "g; INSERT INTO health_plain SELECT g FROM generate_series(1, 50) g; "
                         "ANALYZE health_plain, health_parted_1, health_parted_2")
                  .ok());
  // PostgreSQL 14's statistics collector shows them a moment later than 15's shared-memory
  // statistics: wait until the server reports what walrelay lag is to read.
  for (int i = 0; i < 300; ++i) {
    auto seen = cluster_->QueryScalar(
        "SELECT sum(n_live_tup) FILTER (WHERE relname = 'health_plain') = 50 AND "
        "sum(n_live_tup) FILTER (WHERE relname LIKE 'health_parted_%') = 200 AND "
        "bool_and(last_analyze IS NOT NULL) FROM pg_stat_user_tables "
        "WHERE relname IN ('health_plain', 'health_parted_1', 'health_parted_2')");
    if (seen.ok() && *seen == "t") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const std::string tables = " --tables public.health_plain,public.health_parted --tables nope";
  LagRun r = Lag(Dsn() + " --json" + tables);
  EXPECT_EQ(r.code, 0) << r.out;
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  ASSERT_EQ(parser.parse(r.out).get(doc), simdjson::SUCCESS) << r.out;
  std::map<std::string, simdjson::dom::element> by_name;
  for (simdjson::dom::element t : doc["tables"].get_array()) {
    by_name[std::string(std::string_view(t["table"]))] = t;
  }
  ASSERT_EQ(by_name.size(), 2u) << r.out;
  EXPECT_EQ(int64_t(by_name["health_plain"]["live_rows"]), 50);
  EXPECT_EQ(int64_t(by_name["health_plain"]["partitions"]), 0);
  EXPECT_GT(int64_t(by_name["health_plain"]["total_bytes"]), 0);
  EXPECT_TRUE(by_name["health_plain"]["seconds_since_vacuum"].is_null());
  EXPECT_FALSE(by_name["health_plain"]["seconds_since_analyze"].is_null());
  EXPECT_EQ(int64_t(by_name["health_parted"]["live_rows"]), 200);
  EXPECT_EQ(int64_t(by_name["health_parted"]["partitions"]), 2);
  EXPECT_EQ(std::string_view(doc["missing_tables"].at(0)), "nope");

  r = Lag(Dsn() + tables);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("DEAD_ROWS"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("health_parted"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("note: table nope not found"), std::string::npos) << r.out;
  r = Lag(Dsn() + " --prometheus" + tables);
  EXPECT_NE(r.out.find("walrelay_table_partitions{table=\"health_parted\"} 2"),
            std::string::npos)
      << r.out;
}

TEST_F(LagTest, JsonParsesAndCarriesEveryField) {
  ASSERT_TRUE(
      cluster_->Exec("SELECT pg_create_logical_replication_slot('json_slot', 'pgoutput')").ok());
  ASSERT_TRUE(cluster_->Exec("SELECT pg_create_physical_replication_slot('phys_slot', true)").ok());
  Churn(*cluster_, 4);  // comfortably over the 1MB warn threshold
  LagRun r = Lag(Dsn() + " --json --warn 1MB");
  EXPECT_EQ(r.code, 1) << r.out;
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  ASSERT_EQ(parser.parse(r.out).get(doc), simdjson::SUCCESS) << r.out;
  EXPECT_EQ(int64_t(doc["exit_code"]), 1);
  EXPECT_EQ(int64_t(doc["max_slot_wal_keep_size_bytes"]), -1);
  EXPECT_EQ(uint64_t(doc["warn_bytes"]), 1024u * 1024);
  EXPECT_TRUE(doc["critical_bytes"].is_null());
  bool saw_logical = false, saw_physical = false;
  for (simdjson::dom::element slot : doc["slots"].get_array()) {
    const std::string_view name = slot["slot_name"];
    if (name == "json_slot") {
      saw_logical = true;
      EXPECT_EQ(std::string_view(slot["plugin"]), "pgoutput");
      EXPECT_EQ(std::string_view(slot["database"]), "postgres");
      EXPECT_EQ(std::string_view(slot["slot_type"]), "logical");
      EXPECT_FALSE(bool(slot["active"]));
      EXPECT_TRUE(slot["active_pid"].is_null());
      EXPECT_GE(uint64_t(slot["retained_bytes"]), 1024u * 1024);
      EXPECT_GE(uint64_t(slot["confirmed_lag_bytes"]), 1024u * 1024);
      EXPECT_EQ(std::string_view(slot["wal_status"]), "reserved");
      EXPECT_TRUE(slot["safe_wal_size_bytes"].is_null());
      // PostgreSQL 17+ records when a slot was released (here: made and never read, so
      // since its creation, seconds ago); older servers do not, and it is null there.
      const int version = std::stoi(*cluster_->QueryScalar("SHOW server_version_num"));
      if (version >= 170000) {
        const std::string_view since = slot["inactive_since"];
        EXPECT_TRUE(std::regex_match(std::string(since),
                                     std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z)")))
            << since;
        auto age = cluster_->QueryScalar("SELECT extract(epoch FROM now() - '" +
                                         std::string(since) + "'::timestamptz)::int");
        ASSERT_TRUE(age.ok()) << age.status().ToString();
        EXPECT_GE(std::stoi(*age), 0);
        EXPECT_LT(std::stoi(*age), 120);
      } else {
        EXPECT_TRUE(slot["inactive_since"].is_null());
      }
      // So do a slot's failover and synced flags (a primary's ordinary slot: both false).
      if (version >= 170000) {
        EXPECT_FALSE(bool(slot["failover"]));
        EXPECT_FALSE(bool(slot["synced"]));
      } else {
        EXPECT_TRUE(slot["failover"].is_null());
        EXPECT_TRUE(slot["synced"].is_null());
      }
      EXPECT_EQ(std::string_view(slot["state"]), "warn");
      EXPECT_NE(std::string_view(slot["retained"]).find("MB"), std::string_view::npos);
    } else if (name == "phys_slot") {
      saw_physical = true;
      EXPECT_EQ(std::string_view(slot["slot_type"]), "physical");
      EXPECT_TRUE(slot["plugin"].is_null());
      EXPECT_TRUE(slot["confirmed_lag_bytes"].is_null());
    }
  }
  EXPECT_TRUE(saw_logical);
  EXPECT_TRUE(saw_physical);

  // --watch: one document per refresh until SIGINT; exits with the last code.
  const std::string cmd = "timeout --preserve-status -s INT 1.5 " + std::string(WALRELAY_BINARY) +
                          " lag " + Dsn() + " --json --watch 0.2 --warn 1MB";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  EXPECT_EQ(WEXITSTATUS(status), 1);
  int lines = 0;
  for (char c : out) lines += c == '\n';
  EXPECT_GE(lines, 3) << out;
  ASSERT_TRUE(cluster_->Exec("SELECT pg_drop_replication_slot('json_slot')").ok());
  ASSERT_TRUE(cluster_->Exec("SELECT pg_drop_replication_slot('phys_slot')").ok());
}

// PostgreSQL 17+: a failover slot says so in the table and in JSON (a standby's
// synchronized copy, "synced", is checked on a real standby by scripts/pg-failover-check.sh).
TEST_F(LagTest, AFailoverSlotIsShownAsOne) {
  const int version = std::stoi(*cluster_->QueryScalar("SHOW server_version_num"));
  if (version < 170000) {
    LagRun r = Lag(Dsn());
    EXPECT_NE(r.out.find("FAILOVER"), std::string::npos) << r.out;
    GTEST_SKIP() << "failover slots exist from PostgreSQL 17 (this server: " << version << ")";
  }
  ASSERT_TRUE(cluster_
                  ->Exec("SELECT pg_create_logical_replication_slot('fo_slot', 'pgoutput', "
                         "false, false, true)")
                  .ok());
  ASSERT_TRUE(
      cluster_->Exec("SELECT pg_create_logical_replication_slot('plain_slot', 'pgoutput')").ok());
  LagRun r = Lag(Dsn() + " --slot fo_slot --slot plain_slot");
  EXPECT_EQ(r.code, 0) << r.out;
  // The FAILOVER column of each row: the cell under the header's FAILOVER.
  std::istringstream lines(r.out);
  std::string line;
  size_t column = std::string::npos;
  std::map<std::string, std::string> cell;
  while (std::getline(lines, line)) {
    if (line.rfind("SLOT ", 0) == 0) column = line.find("FAILOVER");
    if (column == std::string::npos || line.size() <= column) continue;
    cell[line.substr(0, line.find(' '))] = line.substr(column, line.find(' ', column) - column);
  }
  EXPECT_EQ(cell["fo_slot"], "yes") << r.out;
  EXPECT_EQ(cell["plain_slot"], "no") << r.out;
  r = Lag(Dsn() + " --slot fo_slot --json");
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  ASSERT_EQ(parser.parse(r.out).get(doc), simdjson::SUCCESS) << r.out;
  simdjson::dom::element slot = doc["slots"].at(0);
  EXPECT_TRUE(bool(slot["failover"])) << r.out;
  EXPECT_FALSE(bool(slot["synced"])) << r.out;
  r = Lag(Dsn() + " --slot fo_slot --slot plain_slot --prometheus");
  auto parsed = metrics::ParseExposition(r.out);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString() << "\n" << r.out;
  for (const char* role : {"no", "yes", "synced", "synced-temporary"}) {
    const auto* fo =
        parsed->Find("walrelay_slot_failover", {{"slot", "fo_slot"}, {"failover", role}});
    const auto* plain =
        parsed->Find("walrelay_slot_failover", {{"slot", "plain_slot"}, {"failover", role}});
    ASSERT_NE(fo, nullptr) << role << "\n" << r.out;
    ASSERT_NE(plain, nullptr) << role << "\n" << r.out;
    EXPECT_EQ(fo->value, std::string_view(role) == "yes" ? 1 : 0) << role;
    EXPECT_EQ(plain->value, std::string_view(role) == "no" ? 1 : 0) << role;
  }
  ASSERT_TRUE(cluster_->Exec("SELECT pg_drop_replication_slot('fo_slot')").ok());
  ASSERT_TRUE(cluster_->Exec("SELECT pg_drop_replication_slot('plain_slot')").ok());
}

TEST_F(LagTest, PrometheusParses) {
  ASSERT_TRUE(
      cluster_->Exec("SELECT pg_create_logical_replication_slot('prom_slot', 'pgoutput')").ok());
  Churn(*cluster_, 2);
  LagRun r = Lag(Dsn() + " --prometheus --critical 512kB");
  EXPECT_EQ(r.code, 2) << r.out;
  auto parsed = metrics::ParseExposition(r.out);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString() << "\n" << r.out;
  const metrics::Labels slot = {{"slot", "prom_slot"}};
  ASSERT_NE(parsed->Find("walrelay_slot_retained_bytes", slot), nullptr) << r.out;
  EXPECT_GE(parsed->Find("walrelay_slot_retained_bytes", slot)->value, 512 * 1024);
  EXPECT_EQ(parsed->Find("walrelay_slot_retained_bytes", slot)->label("plugin"), "pgoutput");
  EXPECT_EQ(
      parsed->Find("walrelay_slot_state", {{"slot", "prom_slot"}, {"state", "critical"}})->value,
      1);
  EXPECT_EQ(parsed->Find("walrelay_slot_active", slot)->value, 0);
  // The failover role exists from PostgreSQL 17; before, no such series.
  const int version = std::stoi(*cluster_->QueryScalar("SHOW server_version_num"));
  const auto* no_failover =
      parsed->Find("walrelay_slot_failover", {{"slot", "prom_slot"}, {"failover", "no"}});
  if (version >= 170000) {
    ASSERT_NE(no_failover, nullptr) << r.out;
    EXPECT_EQ(no_failover->value, 1);
  } else {
    EXPECT_EQ(no_failover, nullptr) << r.out;
  }
  EXPECT_EQ(parsed->Find("walrelay_lag_check_status")->value, 2);
  EXPECT_EQ(parsed->Find("walrelay_slot_critical_threshold_bytes")->value, 512 * 1024);
  EXPECT_EQ(parsed->Find("walrelay_server_max_slot_wal_keep_size_bytes")->value, -1);
  ASSERT_TRUE(cluster_->Exec("SELECT pg_drop_replication_slot('prom_slot')").ok());
}

TEST_F(LagTest, CannotConnectAndBadUsageExitThree) {
  EXPECT_EQ(Lag("--dsn 'host=127.0.0.1 port=1 connect_timeout=2'").code, 3);
  LagRun r = Lag("--prometheus --dsn 'host=127.0.0.1 port=1 connect_timeout=2'");
  EXPECT_EQ(r.code, 3);
  auto parsed = metrics::ParseExposition(r.out);
  ASSERT_TRUE(parsed.ok()) << r.out;
  EXPECT_EQ(parsed->Find("walrelay_lag_check_status")->value, 3);
  EXPECT_EQ(Lag(Dsn() + " --warn lots").code, 3);
  EXPECT_EQ(Lag(Dsn() + " --no-such-flag").code, 3);
  EXPECT_EQ(Lag(Dsn() + " --json --prometheus").code, 3);
  r = Lag("--help");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("--critical"), std::string::npos);
}

TEST(LagLostTest, InvalidatedSlotIsLostAndCritical) {
  TestCluster::Options options;
  options.settings = {"max_slot_wal_keep_size=1MB", "max_wal_size=32MB", "min_wal_size=32MB"};
  auto c = TestCluster::Start(options);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  TestCluster& cluster = **c;
  ASSERT_TRUE(cluster.Exec("CREATE TABLE churn (id bigserial PRIMARY KEY, pad text)").ok());
  ASSERT_TRUE(
      cluster.Exec("SELECT pg_create_logical_replication_slot('lost_slot', 'pgoutput')").ok());
  const std::string dsn = "--dsn " + Quote(cluster.conninfo());
  LagRun r = Lag(dsn + " --json --warn 0.5 --critical 0.9");
  EXPECT_EQ(r.code, 0) << r.out;
  bool lost = false;
  for (int i = 0; i < 30 && !lost; ++i) {
    Churn(cluster, 1);
    ASSERT_TRUE(cluster.Exec("SELECT pg_switch_wal()").ok());
    ASSERT_TRUE(cluster.Exec("CHECKPOINT").ok());
    auto st = cluster.QueryScalar(
        "SELECT wal_status FROM pg_replication_slots WHERE slot_name = 'lost_slot'");
    ASSERT_TRUE(st.ok());
    lost = *st == "lost";
  }
  ASSERT_TRUE(lost) << cluster.ServerLogTail();
  r = Lag(dsn + " --json");
  EXPECT_EQ(r.code, 2) << r.out;
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  ASSERT_EQ(parser.parse(r.out).get(doc), simdjson::SUCCESS) << r.out;
  simdjson::dom::element slot = doc["slots"].at(0);
  EXPECT_EQ(std::string_view(slot["wal_status"]), "lost");
  EXPECT_EQ(std::string_view(slot["state"]), "lost");
  EXPECT_TRUE(slot["retained_bytes"].is_null());
  r = Lag(dsn);
  EXPECT_NE(r.out.find("lost"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace walrelay
