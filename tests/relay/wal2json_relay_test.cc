// source.plugin = wal2json: the relay reading a wal2json slot delivers the same events as
// the relay reading a pgoutput slot, for the same workload (two in-process relays on one
// throwaway PostgreSQL, each with its own slot and topic, into one mock Kafka cluster).
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <thread>

#include "src/kafka/mock_cluster.h"
#include "src/relay/run/relay.h"
#include "src/relay/core/schema.h"
#include "tests/kafka/test_consumer.h"
#include "tests/support/pg_cluster.h"

namespace walrelay::relay {
namespace {

using namespace std::chrono_literals;
using kafka::testing::ConsumeAll;
using kafka::testing::ConsumedRecord;

constexpr int kPartitions = 4;

TEST(Wal2JsonRelayTest, SameEventsAsPgoutput) {
  auto pg = testing::TestCluster::Start();
  ASSERT_TRUE(pg.ok()) << pg.status().ToString();
  auto& c = **pg;
  ASSERT_TRUE(c.Exec(OutboxTableDdl("public.outbox")).ok());
  ASSERT_TRUE(c.Exec("CREATE TABLE other (id int PRIMARY KEY, v text)").ok());
  auto kc = kafka::MockCluster::Create(1);
  ASSERT_TRUE(kc.ok()) << kc.status().ToString();
  auto& kafka = **kc;
  ASSERT_TRUE(kafka.CreateTopic("pg.payment", kPartitions, 1).ok());
  ASSERT_TRUE(kafka.CreateTopic("wj.payment", kPartitions, 1).ok());
  ASSERT_TRUE(kafka.CreateTopic("explicit", kPartitions, 1).ok());

  auto make = [&](const std::string& plugin, const std::string& prefix) {
    RelayConfig config;
    config.source_dsn = c.conninfo();
    config.bootstrap_servers = kafka.bootstraps();
    config.plugin = plugin;
    config.slot = "walrelay_" + plugin;
    config.topic_template = prefix + ".${aggregate_type}";
    config.message_prefix = "walrelay.outbox";
    config.status_interval = 100ms;
    config.reconnect_min = 50ms;
    config.reconnect_max = 500ms;
    return std::make_unique<Relay>(config);
  };
  auto pgoutput = make("pgoutput", "pg");
  auto wal2json = make("wal2json", "wj");
  Status st_pg, st_wj;
  std::thread t_pg([&] { st_pg = pgoutput->Run(); });
  std::thread t_wj([&] { st_wj = wal2json->Run(); });
  for (int i = 0; i < 500 && (pgoutput->stats().streaming.load() == 0 ||
                              wal2json->stats().streaming.load() == 0);
       ++i) {
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_EQ(pgoutput->stats().streaming.load(), 1);
  ASSERT_EQ(wal2json->stats().streaming.load(), 1);

  // The workload: single and multi-row transactions, unicode and escapes in payloads,
  // headers, an explicit topic (counted separately), a rolled-back transaction, updates,
  // deletes and another table's changes (none published), a table-less outbox message.
  ASSERT_TRUE(c.Exec("INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) "
                     "VALUES ('payment', 'p1', 'Paid', '{\"amount\": 1.50, \"note\": "
                     "\"caf\u00e9 \\\"quoted\\\" \\\\ tab\\t\"}')")
                  .ok());
  for (int t = 0; t < 20; ++t) {
    ASSERT_TRUE(c.Exec("INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, "
                       "headers) SELECT 'payment', 'a' || (g % 5), 'Captured', "
                       "jsonb_build_object('t', " +
                       std::to_string(t) +
                       ", 'g', g, 'big', repeat('x', 300)), '{\"trace\": \"abc\"}' FROM "
                       "generate_series(1, 25) g")
                    .ok());
  }
  ASSERT_TRUE(c.Exec("BEGIN; INSERT INTO outbox (aggregate_type, aggregate_id, event_type, "
                     "payload) VALUES ('payment', 'ghost', 'Ghost', '{}'); ROLLBACK;")
                  .ok());
  ASSERT_TRUE(c.Exec("INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, "
                     "topic) VALUES ('payment', 'e1', 'Explicit', '{\"e\": true}', 'explicit')")
                  .ok());
  ASSERT_TRUE(c.Exec("INSERT INTO other VALUES (1, 'a'); UPDATE other SET v = 'b'; "
                     "UPDATE outbox SET event_type = 'Changed' WHERE id = 2; "
                     "DELETE FROM outbox WHERE id = 3")
                  .ok());
  ASSERT_TRUE(c.Exec("SELECT pg_logical_emit_message(true, 'walrelay.outbox', "
                     "'{\"event_id\": \"0b7d2c9e-1111-4a4a-8b8b-000000000001\", "
                     "\"aggregate_type\": \"payment\", \"aggregate_id\": \"m1\", "
                     "\"event_type\": \"FromMessage\", \"payload\": {\"m\": 1}}')")
                  .ok());
  constexpr size_t kExpected = 1 + 20 * 25 + 1;  // on outbox.payment-like topics

  auto target = c.QueryScalar("SELECT pg_current_wal_insert_lsn()");
  ASSERT_TRUE(target.ok());
  for (const char* slot : {"walrelay_pgoutput", "walrelay_wal2json"}) {
    bool caught_up = false;
    for (int i = 0; i < 600 && !caught_up; ++i) {
      auto v =
          c.QueryScalar(std::string("SELECT confirmed_flush_lsn >= '") + *target +
                        "'::pg_lsn FROM pg_replication_slots WHERE slot_name = '" + slot + "'");
      caught_up = v.ok() && *v == "t";
      if (!caught_up) std::this_thread::sleep_for(50ms);
    }
    ASSERT_TRUE(caught_up) << slot << " did not confirm the workload";
  }
  pgoutput->RequestStop();
  wal2json->RequestStop();
  t_pg.join();
  t_wj.join();
  EXPECT_TRUE(st_pg.ok()) << st_pg.ToString();
  EXPECT_TRUE(st_wj.ok()) << st_wj.ToString();

  // The wal2json relay starts again on the wal2json slot its first run created.
  auto again = make("wal2json", "wj");
  Status st_again;
  std::atomic<bool> returned{false};
  std::thread t_again([&] {
    st_again = again->Run();
    returned.store(true);
  });
  for (int i = 0; i < 500 && again->stats().streaming.load() == 0 && !returned.load(); ++i) {
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(again->stats().streaming.load(), 1) << "the second wal2json run did not stream";
  again->RequestStop();
  t_again.join();
  EXPECT_TRUE(st_again.ok()) << st_again.ToString();

  auto a = ConsumeAll(kafka.bootstraps(), "pg.payment", kPartitions, kExpected, 30s);
  auto b = ConsumeAll(kafka.bootstraps(), "wj.payment", kPartitions, kExpected, 30s);
  ASSERT_EQ(a.size(), kExpected);
  ASSERT_EQ(b.size(), kExpected);
  // Same events: by event_id, the same key, value, partition and headers (minus none).
  auto index = [](const std::vector<ConsumedRecord>& rs) {
    std::map<std::string, const ConsumedRecord*> m;
    for (const auto& r : rs) m[r.Header("event_id")] = &r;
    return m;
  };
  auto ia = index(a), ib = index(b);
  ASSERT_EQ(ia.size(), kExpected);
  ASSERT_EQ(ib.size(), kExpected);
  for (const auto& [id, ra] : ia) {
    auto it = ib.find(id);
    ASSERT_NE(it, ib.end()) << "event " << id << " missing from the wal2json relay";
    const ConsumedRecord& rb = *it->second;
    EXPECT_EQ(ra->key, rb.key) << id;
    EXPECT_EQ(ra->value, rb.value) << id;
    EXPECT_EQ(ra->partition, rb.partition) << id;
    for (const char* h : {"event_type", "aggregate_type", "trace", "walrelay.position"}) {
      EXPECT_EQ(ra->Header(h), rb.Header(h)) << id << " header " << h;
    }
  }
  // Per aggregate, the same order.
  auto order = [](const std::vector<ConsumedRecord>& rs) {
    std::map<std::string, std::vector<std::string>> m;
    for (const auto& r : rs) m[r.key].push_back(r.Header("event_id"));
    return m;
  };
  EXPECT_EQ(order(a), order(b));
  EXPECT_EQ(kafka::testing::EndOffsetSum(kafka.bootstraps(), "explicit", kPartitions), 2);
  EXPECT_EQ(pgoutput->stats().events_dead_lettered.load(), 0u);
  EXPECT_EQ(wal2json->stats().events_dead_lettered.load(), 0u);
  EXPECT_EQ(wal2json->stats().skipped_updates.load(), pgoutput->stats().skipped_updates.load());
  EXPECT_EQ(wal2json->stats().skipped_deletes.load(), pgoutput->stats().skipped_deletes.load());
}

}  // namespace
}  // namespace walrelay::relay
