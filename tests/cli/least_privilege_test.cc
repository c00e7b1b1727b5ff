// docs/operations.md, section 7, end to end: `walrelay setup` runs as the owner, then the
// relay runs as the documented least-privilege role — LOGIN REPLICATION, SELECT on the
// outbox, SELECT/INSERT on the dead-letter table, SELECT/INSERT/UPDATE on the progress
// table, and no CREATE on any schema — and streams, dead-letters, saves its progress and
// sends heartbeats.
#include <gtest/gtest.h>

#include <thread>

#include "src/cli/setup.h"
#include "src/kafka/mock_cluster.h"
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
  ASSERT_TRUE(c.Exec("GRANT SELECT, INSERT ON walrelay_dead_letter TO relay_min").ok());
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

}  // namespace
}  // namespace walrelay::cli
