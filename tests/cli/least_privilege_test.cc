// docs/operations.md, section 7, end to end: `walrelay setup` runs as the owner, then the
// relay runs as the documented least-privilege role — LOGIN REPLICATION, SELECT on the
// outbox, SELECT/INSERT/UPDATE on the dead-letter table, SELECT/INSERT/UPDATE on the progress
// table, and no CREATE on any schema — and streams, dead-letters, saves its progress and
// sends heartbeats.
#include <gtest/gtest.h>
#include <libpq-fe.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "src/cli/setup.h"
#include "src/kafka/mock_cluster.h"
#include "src/relay/commands/redrive.h"
#include "src/relay/core/privileges.h"
#include "src/relay/run/relay.h"
#include "tests/kafka/test_consumer.h"
#include "tests/support/pg_cluster.h"

namespace walrelay::cli {
namespace {

using namespace std::chrono_literals;

TEST(LeastPrivilegeTest, SetupAsOwnerThenTheRelayAsTheDocumentedRole) {
  auto pg = testing::TestCluster::Start();
  ASSERT_TRUE(pg.ok()) << pg.status().ToString();
  auto& c = **pg;
  auto kc = kafka::MockCluster::Create(1);
  ASSERT_TRUE(kc.ok()) << kc.status().ToString();
  ASSERT_TRUE((*kc)->CreateTopic("outbox.payment", 2, 1).ok());

  relay::RelayConfig config;
  config.source_dsn = c.conninfo();  // the owner (the cluster's superuser)
  config.bootstrap_servers = (*kc)->bootstraps();
  config.status_interval = 100ms;
  config.reconnect_min = 50ms;
  config.reconnect_max = 500ms;
  config.heartbeat_interval = 300ms;
  ASSERT_TRUE(RunSetup(config, /*create_tables=*/true, /*dry_run=*/false).ok());
  ASSERT_TRUE(c.Exec("ALTER TABLE outbox ALTER COLUMN aggregate_id DROP NOT NULL").ok());

  // docs/operations.md, section 7, as written there (role name aside).
  ASSERT_TRUE(c.Exec("CREATE ROLE relay_min LOGIN REPLICATION PASSWORD 'unused'").ok());
  ASSERT_TRUE(c.Exec("GRANT SELECT ON public.outbox TO relay_min").ok());
  ASSERT_TRUE(c.Exec("GRANT SELECT, INSERT, UPDATE ON walrelay_dead_letter TO relay_min").ok());
  ASSERT_TRUE(c.Exec("GRANT SELECT, INSERT, UPDATE ON walrelay_progress TO relay_min").ok());
  ASSERT_EQ(*c.QueryScalar("SELECT has_schema_privilege('relay_min', 'public', 'CREATE') OR "
                           "has_database_privilege('relay_min', 'postgres', 'CREATE')"),
            "f");

  config.source_dsn = c.conninfo_for_user("relay_min");
  relay::Relay relay(config);
  Status run;
  std::atomic<bool> returned{false};
  std::thread t([&] {
    run = relay.Run();
    returned.store(true);
  });
  for (int i = 0; i < 500 && relay.stats().streaming.load() == 0 && !returned.load(); ++i) {
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(relay.stats().streaming.load(), 1) << run.ToString();
  if (relay.stats().streaming.load() == 1) {
    ASSERT_TRUE(c.Exec("INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) "
                       "SELECT 'payment', 'a' || g, 'Paid', '{}' FROM generate_series(1, 50) g")
                    .ok());
    ASSERT_TRUE(c.Exec("INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) "
                       "VALUES ('payment', NULL, 'NullKey', '{}')")
                    .ok());
    auto records = kafka::testing::ConsumeAll((*kc)->bootstraps(), "outbox.payment", 2, 50, 30s);
    EXPECT_EQ(records.size(), 50u);
    // Progress saved (INSERT, then UPDATE on conflict) and the dead letter written.
    std::string saved;
    for (int i = 0; i < 200 && saved != "t"; ++i, std::this_thread::sleep_for(50ms)) {
      auto v = c.QueryScalar(
          "SELECT coalesce(bool_or(bound_snapshot IS NOT NULL), false) FROM walrelay_progress "
          "WHERE slot = 'walrelay'");
      saved = v.ok() ? *v : "";
    }
    EXPECT_EQ(saved, "t");
    EXPECT_EQ(*c.QueryScalar("SELECT count(*) FROM walrelay_dead_letter"), "1");
    EXPECT_GE(relay.stats().heartbeats_sent.load(), 1u);
  }
  relay.RequestStop();
  t.join();
  EXPECT_TRUE(run.ok()) << run.ToString();
}

// SQL as another role, on a connection of its own.
Status ExecAs(const std::string& conninfo, const std::string& sql) {
  PGconn* conn = PQconnectdb(conninfo.c_str());
  Status st;
  if (PQstatus(conn) != CONNECTION_OK) {
    st = UnavailableError(PQerrorMessage(conn));
  } else {
    PGresult* r = PQexec(conn, sql.c_str());
    const ExecStatusType t = PQresultStatus(r);
    if (t != PGRES_COMMAND_OK && t != PGRES_TUPLES_OK) st = InternalError(PQerrorMessage(conn));
    PQclear(r);
  }
  PQfinish(conn);
  return st;
}

std::string ReadDoc(const std::string& relative) {
  std::ifstream in(std::string(WALRELAY_SOURCE_DIR) + "/" + relative);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The statements of the first ```sql block after `marker` in `text` (comments dropped).
std::vector<std::string> SqlBlockAfter(const std::string& text, const std::string& marker) {
  const size_t at = text.find(marker);
  if (at == std::string::npos) return {};
  const size_t begin = text.find("```sql\n", at);
  if (begin == std::string::npos) return {};
  const size_t end = text.find("```", begin + 7);
  std::string body;
  std::istringstream lines(text.substr(begin + 7, end - begin - 7));
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("--", 0) != 0) body += line + "\n";
  }
  std::vector<std::string> statements;
  std::istringstream parts(body);
  for (std::string s; std::getline(parts, s, ';');) {
    s = std::regex_replace(s, std::regex("^\\s+|\\s+$"), "");
    if (!s.empty()) statements.push_back(s);
  }
  return statements;
}

// Issue 42 item 3: the README's path with the usual two roles. The README's outbox table and
// docs/operations.md's role block run as written (the role renamed: the test cluster's
// superuser is already called walrelay), setup runs as the owner (an ordinary role without
// REPLICATION, which therefore leaves the slot to the relay role, as setup says) with
// --relay-role, the relay streams as the relay role, a dead letter is re-driven by `dead-letters retry` as
// the relay role (it needs UPDATE on the dead-letter table, which the docs left out), and
// the docs' GRANTs are exactly what setup grants.
TEST(LeastPrivilegeTest, TheTwoRolePathAsDocumented) {
  auto pg = testing::TestCluster::Start();
  ASSERT_TRUE(pg.ok()) << pg.status().ToString();
  auto& c = **pg;
  auto kc = kafka::MockCluster::Create(1);
  ASSERT_TRUE(kc.ok()) << kc.status().ToString();
  ASSERT_TRUE((*kc)->CreateTopic("outbox.payment", 2, 1).ok());

  // The owner: an ordinary role that owns the database (so schema public), with no
  // REPLICATION, as the migrations' role usually is.
  ASSERT_TRUE(c.Exec("CREATE ROLE app_owner LOGIN; ALTER DATABASE postgres OWNER TO app_owner")
                  .ok());
  const auto readme = SqlBlockAfter(ReadDoc("README.md"), "### The outbox table");
  ASSERT_EQ(readme.size(), 2u) << "the README's table and its index";
  for (const std::string& s : readme) {
    ASSERT_TRUE(ExecAs(c.conninfo_for_user("app_owner"), s).ok()) << s;
  }
  auto docs = SqlBlockAfter(ReadDoc("docs/operations.md"), "The usual deployment has two roles");
  ASSERT_EQ(docs.size(), 4u) << "CREATE ROLE and three GRANTs";
  for (std::string& s : docs) s = std::regex_replace(s, std::regex("\\bwalrelay\\b"), "relay_doc");
  ASSERT_EQ(docs[0].rfind("CREATE ROLE relay_doc", 0), 0u) << docs[0];
  ASSERT_TRUE(c.Exec(docs[0]).ok()) << docs[0];

  relay::RelayConfig config;
  config.source_dsn = c.conninfo_for_user("app_owner");
  config.bootstrap_servers = (*kc)->bootstraps();
  config.status_interval = 100ms;
  config.reconnect_min = 50ms;
  config.reconnect_max = 500ms;
  ::testing::internal::CaptureStderr();
  Status setup = RunSetup(config, /*create_tables=*/false, /*dry_run=*/false, "relay_doc");
  const std::string said = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(setup.ok()) << setup.ToString() << "\n" << said;
  // The owner may not create the slot (a role attribute, not a GRANT): setup says so and
  // how the relay role makes it, and does exactly that here, before any event is written.
  EXPECT_NE(said.find("slot walrelay: not created: role app_owner may not create replication "
                      "slots"),
            std::string::npos)
      << said;
  EXPECT_NE(said.find("setup complete but for the slot"), std::string::npos) << said;
  const std::string create = "SELECT pg_create_logical_replication_slot('walrelay', 'pgoutput')";
  ASSERT_NE(said.find(create), std::string::npos) << said;
  ASSERT_TRUE(ExecAs(c.conninfo_for_user("relay_doc"), create).ok());
  // The docs' GRANTs are what setup grants (and run as written).
  std::set<std::string> granted, documented(docs.begin() + 1, docs.end());
  for (const auto& p : relay::RelayPrivileges(config)) granted.insert(p.GrantTo("relay_doc"));
  EXPECT_EQ(documented, granted);
  for (size_t i = 1; i < docs.size(); ++i) ASSERT_TRUE(c.Exec(docs[i]).ok()) << docs[i];
  ASSERT_EQ(*c.QueryScalar("SELECT has_table_privilege('relay_doc', 'walrelay_dead_letter', "
                           "'UPDATE') AND NOT has_schema_privilege('relay_doc', 'public', "
                           "'CREATE')"),
            "t");

  config.source_dsn = c.conninfo_for_user("relay_doc");
  {
    relay::Relay relay(config);
    Status run;
    std::atomic<bool> returned{false};
    std::thread t([&] {
      run = relay.Run();
      returned.store(true);
    });
    for (int i = 0; i < 500 && relay.stats().streaming.load() == 0 && !returned.load(); ++i) {
      std::this_thread::sleep_for(20ms);
    }
    ASSERT_EQ(relay.stats().streaming.load(), 1) << run.ToString();
    ASSERT_TRUE(c.Exec("INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) "
                       "SELECT 'payment', 'a' || g, 'Paid', '{}' FROM generate_series(1, 5) g; "
                       "INSERT INTO outbox (aggregate_id, event_type, payload) "
                       "VALUES ('b1', 'NoTopic', '{}')")
                    .ok());
    auto records = kafka::testing::ConsumeAll((*kc)->bootstraps(), "outbox.payment", 2, 5, 30s);
    EXPECT_EQ(records.size(), 5u);
    std::string letters;
    for (int i = 0; i < 200 && letters != "1"; ++i, std::this_thread::sleep_for(50ms)) {
      auto v = c.QueryScalar("SELECT count(*) FROM walrelay_dead_letter");
      letters = v.ok() ? *v : "";
    }
    ASSERT_EQ(letters, "1") << "the row without a topic is dead-lettered";
    relay.RequestStop();
    t.join();
    EXPECT_TRUE(run.ok()) << run.ToString();
  }
  // `dead-letters list`, as the relay role: a header, the letter with its reason, a next step.
  {
    const std::string cmd = std::string(WALRELAY_BINARY) + " dead-letters list --source-dsn '" +
                            config.source_dsn + "' 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    ASSERT_NE(p, nullptr);
    std::string out;
    char buf[4096];
    for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
    ASSERT_EQ(pclose(p), 0) << out;
    EXPECT_EQ(out.rfind("ID  DEAD_AT  SOURCE  EVENT_ID  AGGREGATE_ID  TOPIC  [RE-DRIVE]  REASON\n",
                        0),
              0u)
        << out;
    EXPECT_NE(out.find("no topic: the topic column is NULL"), std::string::npos) << out;
    // The row is found by what the line shows: its source table and event id.
    const auto event_id = c.QueryScalar("SELECT event_id FROM walrelay_dead_letter");
    ASSERT_TRUE(event_id.ok());
    EXPECT_NE(out.find("  public.outbox  " + *event_id + "  b1  -  "), std::string::npos) << out;
    EXPECT_NE(out.find("A letter's outbox row: SELECT * FROM SOURCE WHERE event_id = 'EVENT_ID'"),
              std::string::npos)
        << out;
    EXPECT_NE(out.find("1 dead letters. Next: fix each cause"), std::string::npos) << out;
  }
  // The owner fixes the row; the relay role re-drives the letter and records the outcome.
  ASSERT_TRUE(c.Exec("UPDATE outbox SET aggregate_type = 'payment' WHERE event_type = 'NoTopic'").ok());
  auto redriven = relay::RedriveDeadLetters(config, relay::DeadLetterSelection{});
  ASSERT_TRUE(redriven.ok()) << redriven.status().ToString();
  EXPECT_EQ(redriven->published, 1);
  EXPECT_EQ(*c.QueryScalar("SELECT redrive_outcome FROM walrelay_dead_letter"), "published");
  auto records = kafka::testing::ConsumeAll((*kc)->bootstraps(), "outbox.payment", 2, 6, 30s);
  ASSERT_EQ(records.size(), 6u);
  std::set<std::string> keys;
  for (const auto& r : records) keys.insert(r.key);
  EXPECT_EQ(keys, (std::set<std::string>{"a1", "a2", "a3", "a4", "a5", "b1"}));
}

// Issue 42 item 3: a relay role without the table privileges is refused at start with the
// GRANTs to run (it failed on walrelay_progress before, one privilege at a time).
TEST(LeastPrivilegeTest, AMissingPrivilegeIsRefusedAtStartWithTheGrants) {
  auto pg = testing::TestCluster::Start();
  ASSERT_TRUE(pg.ok()) << pg.status().ToString();
  auto& c = **pg;
  auto kc = kafka::MockCluster::Create(1);
  ASSERT_TRUE(kc.ok()) << kc.status().ToString();
  relay::RelayConfig config;
  config.source_dsn = c.conninfo();
  config.bootstrap_servers = (*kc)->bootstraps();
  // A second outbox in a schema of its own: the role lacks USAGE on the schema too.
  config.tables = {"public.outbox", "billing.outbox"};
  ASSERT_TRUE(c.Exec("CREATE SCHEMA billing").ok());  // setup creates the tables
  ASSERT_TRUE(RunSetup(config, /*create_tables=*/true, /*dry_run=*/false).ok());
  ASSERT_TRUE(c.Exec("CREATE ROLE relay_bare LOGIN REPLICATION; "
                     "GRANT SELECT ON public.outbox TO relay_bare").ok());
  config.source_dsn = c.conninfo_for_user("relay_bare");
  relay::Relay relay(config);
  Status run = relay.Run();
  ASSERT_EQ(run.code(), StatusCode::kPermissionDenied) << run.ToString();
  EXPECT_NE(run.message().find("GRANT SELECT, INSERT, UPDATE ON walrelay_dead_letter TO relay_bare"),
            std::string::npos)
      << run.message();
  EXPECT_NE(run.message().find("GRANT SELECT, INSERT, UPDATE ON walrelay_progress TO relay_bare"),
            std::string::npos)
      << run.message();
  EXPECT_NE(run.message().find("GRANT USAGE ON SCHEMA billing TO relay_bare"), std::string::npos)
      << run.message();
  EXPECT_NE(run.message().find("GRANT SELECT ON billing.outbox TO relay_bare"), std::string::npos)
      << run.message();
  EXPECT_EQ(run.message().find("ON public.outbox"), std::string::npos) << "it has that one";
  EXPECT_EQ(relay.stats().streaming.load(), 0);
}

}  // namespace
}  // namespace walrelay::cli
